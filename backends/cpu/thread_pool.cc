#include "backends/cpu/thread_pool.h"

#include <algorithm>

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

// Spins until done() or the window passes; true when done() was seen.
template <typename Done>
bool SpinUntil(Done done, std::chrono::microseconds window) {
  const auto deadline = std::chrono::steady_clock::now() + window;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
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
          kSpinWindow);
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
      kSpinWindow);
  std::unique_lock<std::mutex> lock(mu_);
  while (batch.remaining.load(std::memory_order_acquire) > 0) {
    if (RunQueued(lock)) continue;  // help instead of idling (any batch's task)
    done_cv_.wait(lock);
  }
}

}  // namespace kiln::backends
