#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::backends {
namespace {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or the window passes; true when done() was seen. A worker waiting for work (`yield`) yields
// its core every 64 pauses: without it, the first kernel of each replay in kilnd (the Fashion-MNIST CNN at batch 1,
// dynamic batching, perf_analyzer at concurrency 1, 2-core Zen 4) took 232-236 us against 22 us in its profile (its
// second half, it seems, queued behind a spinning worker on one core), and the run 360-388 us; yielding, 26 us and
// 175 us, and perf_analyzer 829-904 against 663-844 infer/s (concurrency 8 and 32 within the noise; the training
// step, SmolLM2 decode and the CNN in process unchanged). The caller waiting for its batch's other tasks does not
// yield: the same run then took 492 us (the core went to the gRPC threads).
template <typename Done>
bool SpinUntil(Done done, std::chrono::microseconds window, bool yield) {
  const auto deadline = std::chrono::steady_clock::now() + window;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
    if (yield) sched_yield();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads < 1) num_threads = 1;
  max_spinners_ = std::max(1, num_threads - 1);
  workers_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunTask(const Task& t) {
  Batch* b = t.batch;
  (*b->fn)(t.index);
  if (b->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // The lock orders this notify after a waiter's check of `remaining` (no lost wake-up); `b` may be gone once
    // the lock is released, so nothing touches it after.
    std::lock_guard<std::mutex> lock(mu_);
    done_cv_.notify_all();
  }
}

bool ThreadPool::RunQueued(std::unique_lock<std::mutex>& lock) {
  if (queue_.empty()) return false;
  Task t = queue_.front();
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_relaxed);
  lock.unlock();
  RunTask(t);
  lock.lock();
  return true;
}

void ThreadPool::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  bool may_spin = false;  // only right after a task: one window, then sleep until work comes
  while (true) {
    if (RunQueued(lock)) {
      may_spin = true;
      continue;
    }
    if (stop_.load()) return;  // stopping and drained
    if (may_spin && spinners_ < max_spinners_) {
      may_spin = false;
      ++spinners_;
      lock.unlock();
      const auto start = std::chrono::steady_clock::now();
      SpinUntil(
          [this, start] {
            return queued_.load(std::memory_order_acquire) > 0 || stop_.load() ||
                   (resting_.load(std::memory_order_acquire) &&
                    std::chrono::steady_clock::now() - start >= kRestWindow);
          },
          kSpinWindow, /*yield=*/true);
      lock.lock();
      --spinners_;
      continue;  // re-check the queue under the lock either way
    }
    may_spin = false;
    work_cv_.wait(lock, [this] { return stop_.load() || !queue_.empty(); });
    may_spin = false;
  }
}

void ThreadPool::ParallelFor(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (n == 1) {
    fn(0);
    return;
  }
  Batch batch{&fn, n};
  {
    std::lock_guard<std::mutex> lock(mu_);
    resting_.store(false, std::memory_order_relaxed);
    for (int i = 1; i < n; ++i) queue_.push_back(Task{&batch, i});
    queued_.fetch_add(n - 1, std::memory_order_release);
    // Spinning workers re-check the queue under the lock before they sleep, so only the tasks beyond them need a
    // sleeping worker woken.
    if (n - 1 > spinners_) work_cv_.notify_all();
  }
  RunTask(Task{&batch, 0});
  // The other tasks usually finish within a kernel's time of this one: spin for them first (unless some are still
  // queued, which this thread then runs itself).
  SpinUntil(
      [&] {
        return batch.remaining.load(std::memory_order_acquire) == 0 || queued_.load(std::memory_order_acquire) > 0;
      },
      kSpinWindow, /*yield=*/false);
  std::unique_lock<std::mutex> lock(mu_);
  while (batch.remaining.load(std::memory_order_acquire) > 0) {
    if (RunQueued(lock)) continue;  // help instead of idling (any batch's task)
    done_cv_.wait(lock);
  }
}

}  // namespace kiln::backends
