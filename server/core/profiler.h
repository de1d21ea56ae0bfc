// KernelProfiler: profiles of the kernel launches kilnd makes over a window of time (issue #22;
// REST GET /v2/profile, written as Chrome trace / Perfetto JSON by server/rest/profile_json.h).
//
// Capture(model, seconds) arms a window and blocks for it. While at least one window is armed,
// every engine run the server makes is timed launch by launch (RunPolicy::For sets
// api::RunOptions::time_kernels from armed(); JIT replays of builtin and ONNX models are untimed
// otherwise, so outside a window profiling costs one relaxed atomic load per run), and the run's
// launches are handed to Record. A run belongs to a window when it started inside it (and, with a
// model named, ran that model); a run still going when the window closes is left out.
//
// Bounded memory: at most kMaxProfileLaunches launches per window (later runs are counted in
// dropped_runs, not kept) and kMaxConcurrentProfiles windows at once (RESOURCE_EXHAUSTED past it).
// Shutdown() closes every window at once, so a profile never holds up kilnd's shutdown.
// Thread safety: every method may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/engine.h"

namespace kiln::server {

inline constexpr double kMaxProfileSeconds = 60;
inline constexpr size_t kMaxProfileLaunches = 50000;
inline constexpr int kMaxConcurrentProfiles = 4;

// One engine run seen by a window: the engine call (the request's compute_infer time) and its
// launches in launch order.
struct ProfiledRun {
  std::string model;    // "" = a kiln.v1 graph run
  std::string version;  // "" for graph runs
  std::string device;
  int instance = 0;     // the model instance (lane) on `device` that ran it
  int64_t start_ns = 0;  // steady clock (SteadyNowNs), when the engine call began
  uint64_t duration_ns = 0;
  std::string jit_event;  // "run", "capture", "replay" or "" (eager)
  std::vector<api::KernelTiming> kernels;
};

struct Profile {
  std::string model;  // the window's filter ("" = every run)
  int64_t start_ns = 0;  // steady clock
  int64_t end_ns = 0;
  std::vector<ProfiledRun> runs;  // in the order they were recorded
  int64_t dropped_runs = 0;       // runs left out past kMaxProfileLaunches
};

// Parses the `seconds` of a profile request: a decimal number in (0, kMaxProfileSeconds].
// INVALID_ARGUMENT naming the field and the limit.
absl::StatusOr<double> ParseProfileSeconds(std::string_view text);

class KernelProfiler {
 public:
  KernelProfiler() = default;
  KernelProfiler(const KernelProfiler&) = delete;
  KernelProfiler& operator=(const KernelProfiler&) = delete;

  // Arms a window of `seconds` (checked as ParseProfileSeconds does) for runs of `model` ("" = all
  // runs), waits it out (or until Shutdown) and returns what it saw. RESOURCE_EXHAUSTED when
  // kMaxConcurrentProfiles windows are armed; UNAVAILABLE after Shutdown.
  absl::StatusOr<Profile> Capture(const std::string& model, double seconds);

  // Whether any window is armed (runs should time their launches).
  bool armed() const { return armed_.load(std::memory_order_relaxed) > 0; }

  // Adds `run` to every armed window it belongs to. Cheap when none is armed.
  void Record(const ProfiledRun& run);

  // Closes every window now and refuses new ones.
  void Shutdown();

 private:
  struct Window {
    Profile profile;
    size_t launches = 0;
  };
  std::atomic<int> armed_{0};
  absl::Mutex mu_;
  std::list<Window> windows_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kiln::server
