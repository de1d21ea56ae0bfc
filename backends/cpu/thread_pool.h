// ThreadPool: a fixed set of std::threads, reused by every CPU kernel launch.
//
// ParallelFor(n, fn) runs fn(0..n-1) and returns when all have finished; the calling thread runs tasks too (its own
// and, while it waits, anyone's), so nested or concurrent ParallelFor calls from many request threads never deadlock.
// Thread-safe. The destructor finishes queued work and joins.
//
// Hand-off latency: a replayed JIT step launches hundreds of kernels a few tens of microseconds apart, and waking a
// worker blocked on a condition variable costs about as much as a small kernel (a futex wake, on a VM an IPI), so a
// worker that finished a task spins for a short window (kSpinWindow) before it sleeps, as ggml's and OpenMP's pools
// do, and the caller spins briefly for the other tasks of its batch. At most size() - 1 workers spin at once (at
// least one), so on a 2-core machine the caller and one spinning worker never compete with a third runnable thread.
// When a run of kernels ends (the device's Synchronize: a JIT replay or a schedule done) the pool rests: a spinning
// worker spins at most kRestWindow more, then sleeps, instead of holding a core for the rest of its 200 us. Under
// serving load that window after each execution was CPU the gRPC threads and the client needed (kilnd batched,
// Fashion-MNIST CNN, perf_analyzer at concurrency 8 on the same 2 cores, interleaved runs: 2936-3241 -> 3334-3654
// infer/s; at 32 within the noise). 50 us rather than 0 bridges the host's work between an LLM's decode steps (one
// slot: 6.45-6.75 ms per step resting at once, 6.25-6.26 with 50 us, 5.98-6.59 never resting). A worker's spin
// yields the core between its checks (thread_pool.cc, SpinUntil), so a thread woken onto that core runs at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::backends {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  void ParallelFor(int n, const std::function<void(int)>& fn);
  // No more work is coming soon (a run of kernels ended): workers spin at most kRestWindow, then sleep until the next
  // ParallelFor.
  void Rest() { resting_.store(true, std::memory_order_release); }

  static constexpr std::chrono::microseconds kSpinWindow{200};
  static constexpr std::chrono::microseconds kRestWindow{50};  // the spin while resting

 private:
  struct Batch {
    const std::function<void(int)>* fn;
    std::atomic<int> remaining;
  };
  struct Task {
    Batch* batch;
    int index;
  };
  void WorkerLoop();
  // Runs one task; call with the lock released.
  void RunTask(const Task& t);
  // Runs the queue's first task, if any, releasing `lock` (held on entry and on return) while it runs.
  bool RunQueued(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable work_cv_;  // tasks queued or stopping
  std::condition_variable done_cv_;  // some batch finished its last task
  std::deque<Task> queue_;           // guarded by mu_
  std::atomic<int> queued_{0};       // queue_.size(), for lock-free peeking while spinning
  std::atomic<bool> stop_{false};
  std::atomic<bool> resting_{false};  // Rest() was called and no ParallelFor since
  int spinners_ = 0;  // guarded by mu_
  int max_spinners_ = 1;
  std::vector<std::thread> workers_;
};

}  // namespace kiln::backends
