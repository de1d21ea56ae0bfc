#include "backends/cpu/thread_pool.h"

#include <atomic>
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

}  // namespace
}  // namespace kiln::backends
