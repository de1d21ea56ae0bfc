#include "server/core/profiler.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/api/clock.h"

namespace kiln::server {

absl::StatusOr<double> ParseProfileSeconds(std::string_view text) {
  const std::string limit = absl::StrCat("a number of seconds in (0, ", kMaxProfileSeconds, "]");
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("seconds: missing; give ", limit));
  double seconds = 0;
  if (text.size() > 32 || !absl::SimpleAtod(std::string(text), &seconds) || !std::isfinite(seconds)) {
    return absl::InvalidArgumentError(absl::StrCat("seconds: not a number; give ", limit));
  }
  if (seconds <= 0 || seconds > kMaxProfileSeconds) {
    return absl::InvalidArgumentError(
        absl::StrCat("seconds: ", seconds, " is outside the limit; give ", limit));
  }
  return seconds;
}

absl::StatusOr<Profile> KernelProfiler::Capture(const std::string& model, double seconds) {
  if (!(seconds > 0 && seconds <= kMaxProfileSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat("seconds: ", seconds, " is outside the limit; give a number of seconds in (0, ",
                                                   kMaxProfileSeconds, "]"));
  }
  absl::MutexLock l(&mu_);
  if (shutdown_) return absl::UnavailableError("the server is shutting down");
  if (windows_.size() >= static_cast<size_t>(kMaxConcurrentProfiles)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "profile: ", kMaxConcurrentProfiles, " profiles are being taken (the limit); try again later"));
  }
  auto it = windows_.emplace(windows_.end());
  it->profile.model = model;
  it->profile.start_ns = SteadyNowNs();
  armed_.fetch_add(1, std::memory_order_relaxed);
  mu_.AwaitWithTimeout(absl::Condition(&shutdown_), absl::Seconds(seconds));
  armed_.fetch_sub(1, std::memory_order_relaxed);
  Profile out = std::move(it->profile);
  windows_.erase(it);
  out.end_ns = SteadyNowNs();
  return out;
}

void KernelProfiler::Record(const ProfiledRun& run) {
  if (!armed()) return;
  absl::MutexLock l(&mu_);
  for (Window& w : windows_) {
    if (run.start_ns < w.profile.start_ns) continue;
    if (!w.profile.model.empty() && run.model != w.profile.model) continue;
    if (w.launches + run.kernels.size() > kMaxProfileLaunches) {
      ++w.profile.dropped_runs;
      continue;
    }
    w.launches += run.kernels.size();
    w.profile.runs.push_back(run);
  }
}

void KernelProfiler::Shutdown() {
  absl::MutexLock l(&mu_);
  shutdown_ = true;
}

}  // namespace kiln::server
