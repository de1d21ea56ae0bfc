// ThreadPool: a fixed set of std::threads, reused by every CPU kernel launch.
//
// ParallelFor(n, fn) runs fn(0..n-1) and returns when all have finished; the calling thread runs tasks too (its own
// and, while it waits, anyone's), so nested or concurrent ParallelFor calls from many request threads never deadlock.
// Thread-safe. The destructor finishes queued work and joins.
#pragma once

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

 private:
  struct Batch {
    const std::function<void(int)>* fn;
    int remaining;
  };
  struct Task {
    Batch* batch;
    int index;
  };
  void WorkerLoop();
  // Runs one task; call with the lock released.
  void RunTask(const Task& t);

  std::mutex mu_;
  std::condition_variable work_cv_;  // tasks queued or stopping
  std::condition_variable done_cv_;  // some batch finished a task
  std::deque<Task> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kiln::backends
