// RunControl: what bounds one run of the engine -- a deadline, a cancellation token, work and
// memory limits, and an optional process-wide memory budget. The engine checks the limits against
// its estimate of a schedule (engine/realize/estimate.h) BEFORE it allocates or launches anything,
// and checks the deadline and the token between kernels (a kernel in flight is never interrupted,
// which is why the work limits exist: one kernel can be arbitrarily long).
//
//   CancellationToken   shared between the party that cancels (a transport whose client went away,
//                       a stream cancelled for backpressure) and the run. Cancel() is sticky; an
//                       optional poll function lets a token follow another source (gRPC's
//                       ServerContext::IsCancelled) without a callback.
//   WorkLimits          per-run caps; 0 or negative means "no cap" for that quantity.
//   MemoryBudget        a process-wide cap on bytes held by device buffers plus bytes reserved by
//                       runs in flight; a run reserves its estimated new allocations before it
//                       allocates and releases the reservation when it ends.
//   RunControl          the bundle a run obeys; Check() is the between-kernels test.
//
// Thread safety: CancellationToken and MemoryBudget are thread-safe. A RunControl is a value; the
// objects it points to must outlive the run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

class CancellationToken {
 public:
  CancellationToken() = default;
  // A token that also reports cancelled whenever `poll()` returns true (poll must be thread-safe
  // and cheap; it is called between kernels).
  explicit CancellationToken(std::function<bool()> poll) : poll_(std::move(poll)) {}

  void Cancel() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const {
    return cancelled_.load(std::memory_order_acquire) || (poll_ && poll_());
  }

 private:
  std::atomic<bool> cancelled_{false};
  std::function<bool()> poll_;
};

// Library defaults: generous enough for any legitimate single run on one machine (a 4096^3 matmul
// is 1.4e11 FLOPs), small enough that `Full({2^40}, 1).Sum()` (1.1e12 FLOPs) is refused at once.
// kilnd sets its own per request from flags (README "Limits").
inline constexpr int64_t kDefaultMaxRunFlops = int64_t{1} << 38;        // 2.7e11
inline constexpr int64_t kDefaultMaxRunBytesMoved = int64_t{1} << 38;   // 256 GiB touched
inline constexpr int64_t kDefaultMaxRunMemoryBytes = int64_t{64} << 30; // 64 GiB peak

struct WorkLimits {
  int64_t max_flops = kDefaultMaxRunFlops;              // estimated ALU operations of the run
  int64_t max_bytes_moved = kDefaultMaxRunBytesMoved;   // bytes of the buffers its kernels touch
  int64_t max_memory_bytes = kDefaultMaxRunMemoryBytes; // peak bytes: buffers read + allocated
};

// A process-wide cap on memory: live device buffers (as the caller measures them) plus the
// reservations of runs in flight may not exceed `limit` bytes. limit <= 0 = no cap.
class MemoryBudget {
 public:
  explicit MemoryBudget(int64_t limit) : limit_(limit) {}
  int64_t limit() const { return limit_; }
  int64_t reserved() const {
    absl::MutexLock l(&mu_);
    return reserved_;
  }
  // Reserves `bytes` if live_bytes + reserved + bytes <= limit; else RESOURCE_EXHAUSTED naming
  // the three figures. Each successful Reserve must be matched by one Release of the same bytes.
  absl::Status Reserve(int64_t bytes, int64_t live_bytes) {
    if (bytes <= 0) return absl::OkStatus();
    absl::MutexLock l(&mu_);
    if (limit_ > 0 && live_bytes + reserved_ + bytes > limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the run needs an estimated ", bytes, " bytes of new memory; ", live_bytes,
          " bytes are held and ", reserved_, " reserved by runs in flight, over the global memory"
          " budget of ", limit_, " bytes"));
    }
    reserved_ += bytes;
    return absl::OkStatus();
  }
  void Release(int64_t bytes) {
    if (bytes <= 0) return;
    absl::MutexLock l(&mu_);
    reserved_ -= bytes;
  }

 private:
  const int64_t limit_;
  mutable absl::Mutex mu_;
  int64_t reserved_ = 0;
};

struct RunControl {
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<const CancellationToken> cancellation;  // null = cannot be cancelled
  WorkLimits limits;
  MemoryBudget* memory_budget = nullptr;  // not owned; null = no global budget
  // Called after each kernel (or copy) of a run completes: (items done, items in the schedule).
  // For progress reports and tests; runs on the run's thread; must not throw.
  std::function<void(int done, int total)> progress;

  // OK, or CANCELLED / DEADLINE_EXCEEDED. Cheap (one atomic load, one clock read); callers add
  // where the run stopped to the message.
  absl::Status Check() const {
    if (cancellation != nullptr && cancellation->cancelled()) {
      return absl::CancelledError("the run was cancelled");
    }
    if (deadline != absl::InfiniteFuture() && absl::Now() >= deadline) {
      return absl::DeadlineExceededError("the run passed its deadline");
    }
    return absl::OkStatus();
  }
};

}  // namespace kiln
