// TraceCache: per-signature JITs in a bounded LRU with hit/miss/eviction counters.
#include "engine/jit/trace_cache.h"

#include <gtest/gtest.h>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"

namespace kiln::jit {
namespace {

class TraceCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice("CPU").ok()) GTEST_SKIP() << "CPU backend not available";
  }
};

absl::StatusOr<std::vector<Tensor>> PlusOne(const JitArgs& a) {
  return std::vector<Tensor>{a.positional[0] + 1};
}

JitArgs Args(int64_t n, float value) {
  JitArgs a;
  a.positional.push_back(Tensor::FromVector(std::vector<float>(n, value), {n}));
  return a;
}

void ExpectPlusOne(const absl::StatusOr<std::vector<Tensor>>& r, int64_t n, float value) {
  ASSERT_TRUE(r.ok()) << r.status();
  auto v = (*r)[0].ToVector<float>();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, std::vector<float>(n, value + 1));
}

TEST_F(TraceCacheTest, HitsMissesAndLruEviction) {
  TraceCache cache(2);
  ExpectPlusOne(cache.Run("m", Args(4, 1), PlusOne), 4, 1);  // miss (A)
  ExpectPlusOne(cache.Run("m", Args(4, 2), PlusOne), 4, 2);  // hit: capture
  ExpectPlusOne(cache.Run("m", Args(4, 3), PlusOne), 4, 3);  // hit: replay
  ExpectPlusOne(cache.Run("m", Args(8, 4), PlusOne), 8, 4);  // miss (B)
  auto s = cache.stats();
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.evictions, 0);
  EXPECT_EQ(s.size, 2);
  ExpectPlusOne(cache.Run("m", Args(4, 5), PlusOne), 4, 5);  // hit: A becomes most recent
  ExpectPlusOne(cache.Run("m", Args(16, 6), PlusOne), 16,
                6);  // miss (C): evicts B, the least recent
  s = cache.stats();
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.misses, 3);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.size, 2);
  ExpectPlusOne(cache.Run("m", Args(4, 7), PlusOne), 4, 7);  // A still cached
  EXPECT_EQ(cache.stats().hits, 4);
  ExpectPlusOne(cache.Run("m", Args(8, 8), PlusOne), 8, 8);  // B was evicted: miss, evicts C
  s = cache.stats();
  EXPECT_EQ(s.misses, 4);
  EXPECT_EQ(s.evictions, 2);
}

TEST_F(TraceCacheTest, KeyHasModelDtypeAndNames) {
  auto k1 = TraceCache::KeyOf("m", Args(4, 0));
  auto k2 = TraceCache::KeyOf("n", Args(4, 0));
  JitArgs ints;
  ints.positional.push_back(Tensor::FromVector(std::vector<int32_t>(4, 0), {4}));
  auto k3 = TraceCache::KeyOf("m", ints);
  JitArgs named;
  named.named.emplace("x", Tensor::FromVector(std::vector<float>(4, 0), {4}));
  auto k4 = TraceCache::KeyOf("m", named);
  ASSERT_TRUE(k1.ok() && k2.ok() && k3.ok() && k4.ok());
  EXPECT_NE(*k1, *k2);
  EXPECT_NE(*k1, *k3);
  EXPECT_NE(*k1, *k4);
  EXPECT_EQ(*k1, *TraceCache::KeyOf("m", Args(4, 9)));  // values do not matter
}

TEST_F(TraceCacheTest, EraseAndClear) {
  TraceCache cache(4);
  ASSERT_TRUE(cache.Run("a", Args(4, 0), PlusOne).ok());
  ASSERT_TRUE(cache.Run("a", Args(8, 0), PlusOne).ok());
  ASSERT_TRUE(cache.Run("b", Args(4, 0), PlusOne).ok());
  EXPECT_EQ(cache.Erase("a"), 2);
  EXPECT_EQ(cache.stats().size, 1);
  cache.Clear();
  EXPECT_EQ(cache.stats().size, 0);
}

}  // namespace
}  // namespace kiln::jit
