#include "backends/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::backends {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(37);
  pool.ParallelFor(37, [&](int i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  pool.ParallelFor(0, [&](int) { FAIL(); });
}

TEST(ThreadPoolTest, ConcurrentAndNestedCallersDoNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&] {
      for (int k = 0; k < 50; ++k)
        pool.ParallelFor(4, [&](int i) { pool.ParallelFor(3, [&](int j) { sum += i * 3 + j; }); });
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(sum.load(), 8 * 50 * 66);  // sum of 0..11
}

// After Rest() the workers sleep; the next ParallelFor must wake one: task 0 waits (bounded) for task 1 to start on
// another thread, which only a woken worker can do while the caller is busy with task 0. Repeated, so the rest flag
// is cleared by each ParallelFor and set again.
TEST(ThreadPoolTest, ARestingPoolWakesForTheNextBatch) {
  ThreadPool pool(2);
  for (int round = 0; round < 20; ++round) {
    pool.Rest();
    if (round % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past every spin window
    std::atomic<bool> started{false};
    std::atomic<bool> together{false};
    pool.ParallelFor(2, [&](int i) {
      if (i == 1) {
        started = true;
        return;
      }
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!started.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      together = started.load();
    });
    EXPECT_TRUE(together.load()) << "round " << round;
  }
}

}  // namespace
}  // namespace kiln::backends
