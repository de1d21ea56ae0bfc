#include "backends/cpu/thread_pool.h"

namespace kiln::backends {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads < 1) num_threads = 1;
  workers_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunTask(const Task& t) {
  (*t.batch->fn)(t.index);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --t.batch->remaining;
  }
  done_cv_.notify_all();
}

void ThreadPool::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    Task t = queue_.front();
    queue_.pop_front();
    lock.unlock();
    RunTask(t);
    lock.lock();
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
    for (int i = 1; i < n; ++i) queue_.push_back(Task{&batch, i});
  }
  work_cv_.notify_all();
  RunTask(Task{&batch, 0});
  std::unique_lock<std::mutex> lock(mu_);
  while (batch.remaining > 0) {
    if (!queue_.empty()) {  // help instead of idling (any batch's task)
      Task t = queue_.front();
      queue_.pop_front();
      lock.unlock();
      RunTask(t);
      lock.lock();
      continue;
    }
    done_cv_.wait(lock);
  }
}

}  // namespace kiln::backends
