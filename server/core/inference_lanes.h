// The scheduling module of InferenceServer (issue #18): one lane per device in use, each with its
// engine, a FIFO queue and an executor thread; where a dynamic batcher will later group requests.
//
//   DeviceLane::Submit(work, may_inline)   runs `work` after everything submitted before it: at
//       once on the calling thread when `may_inline` and the device is idle (nothing running,
//       nothing queued) -- the caller then holds the device --, else queued for the executor
//       thread. Exactly one piece of work holds a device at a time; `work` must call Release()
//       once it no longer needs the device (before it answers, so the next request starts).
//   DeviceLanes   the lanes by device and instance, created on first use through the engine
//       factory (one engine per lane); lanes are never removed. Instance 0 of a device is the
//       device's lane (kiln.v1 graphs, warm-up, single-instance models); a model whose
//       instance_group counts N instances also runs on instances 1..N-1 of its device, each an
//       executor with its own engine (on the CPU their kernels share the device's one thread pool,
//       so instances split the cores rather than oversubscribe them). StopAll() drains every queue
//       and joins the executors.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/engine.h"

namespace kiln::server {

class DeviceLane {
 public:
  using Work = absl::AnyInvocable<void()>;
  DeviceLane(std::string device, std::unique_ptr<api::Engine> engine, int instance = 0);
  ~DeviceLane();  // Stop()
  DeviceLane(const DeviceLane&) = delete;
  DeviceLane& operator=(const DeviceLane&) = delete;

  const std::string& device() const { return device_; }
  int instance() const { return instance_; }
  // Work running or queued here (0 = idle): how InferenceServer picks an instance.
  int64_t load() const;
  api::Engine& engine() const { return *engine_; }
  // The engine's JIT evictions already reported (for deltas in observations).
  std::atomic<int64_t>& seen_jit_evictions() { return seen_jit_evictions_; }

  void Submit(Work work, bool may_inline);
  void Release();
  // Runs what is queued, then stops the executor (idempotent).
  void Stop();

 private:
  void ExecutorLoop();

  const std::string device_;
  const int instance_;
  const std::unique_ptr<api::Engine> engine_;
  std::atomic<int64_t> seen_jit_evictions_{0};
  mutable absl::Mutex mu_;
  std::deque<Work> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread executor_;
};

class DeviceLanes {
 public:
  using EngineFactory = std::function<absl::StatusOr<std::unique_ptr<api::Engine>>(const std::string& device)>;
  explicit DeviceLanes(EngineFactory factory) : factory_(std::move(factory)) {}
  ~DeviceLanes() { StopAll(); }

  // Starts the lane of `device` with `engine` (at construction of the server: the default device).
  DeviceLane* Start(const std::string& device, std::unique_ptr<api::Engine> engine);
  DeviceLane* Find(const std::string& device, int instance = 0) const;
  // The lane of `device`'s `instance`, created (engine and executor) on first use. Errors from
  // the factory.
  absl::StatusOr<DeviceLane*> For(const std::string& device, int instance = 0);
  std::vector<std::string> Devices() const;  // devices with a lane, sorted, each once
  std::vector<DeviceLane*> All() const;      // every lane, instances included
  void StopAll();

 private:
  const EngineFactory factory_;
  mutable absl::Mutex mu_;
  // By (device, instance).
  std::map<std::pair<std::string, int>, std::unique_ptr<DeviceLane>> lanes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
