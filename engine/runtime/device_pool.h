// DevicePool: the executing devices of this machine, found once at start, and one in-order executor per device
// (DESIGN.md §2 engine/runtime). Discovery asks every registered kind for indices 0, 1, ... until its factory says
// NotFound (at most kMaxPerKind each): "CPU" always (when built), "CL:n" and "CUDA:n" where present. NULL and INTERP
// (non-executing / oracle) are not pooled.
//
// Selection follows tinygrad's DEV syntax where it applies: "CPU", "CL", "CL:1", "cuda:0" (case-insensitive; a bare
// kind is its index 0); "GPU" is the first CUDA device, else the first CL device.
//
// Executors: Run(device, fn) runs fn on that device's own worker thread, after everything submitted to the same
// device before it, and returns fn's Status; work on different devices runs concurrently. Thread-safe. The pool
// owns its worker threads and joins them on destruction (pending work finishes first).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/runtime/registry.h"

namespace kiln::runtime {

class DevicePool {
 public:
  static constexpr int kMaxPerKind = 16;

  // Discovers the devices of `registry` (see above). Never fails: a kind whose index 0 cannot be created is absent.
  static std::unique_ptr<DevicePool> Discover(
      BackendRegistry& registry = BackendRegistry::Global());
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // Canonical names in discovery order: kinds sorted, indices ascending ("CL:0", "CPU", "CUDA:0", ...). A kind with
  // one index-only device is listed as "<KIND>:0" except CPU, which is "CPU".
  const std::vector<std::string>& devices() const { return names_; }
  // The pooled device for a DEV-style spec; InvalidArgument for a malformed spec, NotFound (listing the pool) for a
  // device this machine does not have.
  absl::StatusOr<std::string> Select(std::string_view spec) const;
  absl::StatusOr<Device*> Get(std::string_view spec) const;
  // Runs fn on the device's executor and waits for it. NotFound for a device outside the pool.
  absl::Status Run(std::string_view spec, std::function<absl::Status()> fn);

 private:
  struct Executor {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    bool stop = false;
    std::thread worker;
  };
  DevicePool() = default;
  std::vector<std::string> names_;
  absl::flat_hash_map<std::string, Device*> devices_;
  absl::flat_hash_map<std::string, std::unique_ptr<Executor>> executors_;
};

}  // namespace kiln::runtime
