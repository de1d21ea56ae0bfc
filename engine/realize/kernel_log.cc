#include "engine/realize/kernel_log.h"

#include <algorithm>
#include <utility>

#include "engine/base/env.h"

namespace kiln {
namespace {
thread_local std::string current_label;
}  // namespace

KernelLog& KernelLog::Get() {
  static KernelLog* log = new KernelLog();
  return *log;
}

bool KernelLog::Enabled() { return GetKnob(Knob::kViz) > 0; }

int64_t KernelLog::Reserve() {
  if (!Enabled()) return 0;
  absl::MutexLock l(&mu_);
  return next_id_++;
}

void KernelLog::RecordCompile(LoggedKernel k) {
  if (k.id == 0) return;
  k.label = ScopedKernelLogLabel::Current();
  absl::MutexLock l(&mu_);
  // Ids are reserved before the compile; concurrent compiles finish out of order. Keep id order.
  auto at = std::upper_bound(kernels_.begin(), kernels_.end(), k.id,
                             [](int64_t id, const LoggedKernel& e) { return id < e.id; });
  kernels_.insert(at, std::move(k));
  while (kernels_.size() > capacity_) {
    kernels_.pop_front();
    ++dropped_;
  }
}

void KernelLog::RecordLaunch(int64_t id, int64_t start_ns, double seconds) {
  if (id == 0) return;
  absl::MutexLock l(&mu_);
  for (auto it = kernels_.rbegin(); it != kernels_.rend(); ++it) {
    if (it->id != id) continue;
    ++it->launch_count;
    it->launches.push_back({start_ns, seconds});
    while (it->launches.size() > kMaxLoggedLaunches) it->launches.pop_front();
    return;
  }
}

std::vector<LoggedKernel> KernelLog::Kernels() const {
  absl::MutexLock l(&mu_);
  return std::vector<LoggedKernel>(kernels_.begin(), kernels_.end());
}

bool KernelLog::Holds(int64_t id) const {
  absl::MutexLock l(&mu_);
  auto at = std::lower_bound(kernels_.begin(), kernels_.end(), id,
                             [](const LoggedKernel& k, int64_t v) { return k.id < v; });
  return at != kernels_.end() && at->id == id;
}

bool KernelLog::Find(int64_t id, LoggedKernel* out) const {
  absl::MutexLock l(&mu_);
  for (const LoggedKernel& k : kernels_) {
    if (k.id == id) {
      *out = k;
      return true;
    }
  }
  return false;
}

int64_t KernelLog::dropped() const {
  absl::MutexLock l(&mu_);
  return dropped_;
}

size_t KernelLog::capacity() const {
  absl::MutexLock l(&mu_);
  return capacity_;
}

void KernelLog::SetCapacity(size_t kernels) {
  absl::MutexLock l(&mu_);
  capacity_ = std::max<size_t>(1, kernels);
  while (kernels_.size() > capacity_) {
    kernels_.pop_front();
    ++dropped_;
  }
}

void KernelLog::Clear() {
  absl::MutexLock l(&mu_);
  kernels_.clear();
  dropped_ = 0;
}

ScopedKernelLogLabel::ScopedKernelLogLabel(std::string label) : previous_(std::move(current_label)) {
  current_label = std::move(label);
}

ScopedKernelLogLabel::~ScopedKernelLogLabel() { current_label = std::move(previous_); }

const std::string& ScopedKernelLogLabel::Current() { return current_label; }

}  // namespace kiln
