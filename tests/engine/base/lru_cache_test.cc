// engine/base/lru_cache.h: the one bounded LRU (entries, bytes, counters, newest always stays).
#include "engine/base/lru_cache.h"

#include <string>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(LruCacheTest, EvictsLeastRecentPastTheEntryBound) {
  LruCache<std::string, int> c(2, 0);
  c.Put("a", 1, 0);
  c.Put("b", 2, 0);
  ASSERT_NE(c.Get("a"), nullptr);  // a is now the most recent
  c.Put("c", 3, 0);                // evicts b
  EXPECT_EQ(c.Peek("b"), nullptr);
  EXPECT_EQ(*c.Peek("a"), 1);
  EXPECT_EQ(*c.Peek("c"), 3);
  const LruCacheStats s = c.stats();
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 0);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(c.Get("b"), nullptr);
  EXPECT_EQ(c.stats().misses, 1);
}

TEST(LruCacheTest, ByteBoundKeepsTheNewestEvenWhenItAloneIsOver) {
  LruCache<int, int> c(10, 100);
  c.Put(1, 10, 60);
  c.Put(2, 20, 30);
  EXPECT_EQ(c.bytes(), 90u);
  c.Put(3, 30, 20);  // 110 > 100: evicts 1
  EXPECT_FALSE(c.Contains(1));
  EXPECT_EQ(c.bytes(), 50u);
  c.Put(4, 40, 500);  // over alone: everything older goes, it stays
  EXPECT_EQ(c.size(), 1u);
  EXPECT_TRUE(c.Contains(4));
  EXPECT_EQ(c.stats().evictions, 3);
}

TEST(LruCacheTest, PutKeepsTheFirstValueUnlessReplacing) {
  LruCache<int, int> c(4, 0);
  EXPECT_EQ(c.Put(1, 10, 5), 10);
  EXPECT_EQ(c.Put(1, 11, 7), 10);  // first writer wins
  EXPECT_EQ(c.bytes(), 5u);
  EXPECT_EQ(c.Put(1, 12, 7, /*replace=*/true), 12);
  EXPECT_EQ(c.bytes(), 7u);
  EXPECT_TRUE(c.Erase(1));
  EXPECT_FALSE(c.Erase(1));
  EXPECT_EQ(c.bytes(), 0u);
  EXPECT_EQ(c.stats().evictions, 0);
}

TEST(LruCacheTest, NewLimitsEvictAtOnce) {
  LruCache<int, int> c(0, 0);  // 0 entries is 1
  EXPECT_EQ(c.max_entries(), 1u);
  c.SetLimits(3, 0);
  for (int i = 0; i < 3; ++i) c.Put(i, i, 1);
  c.SetLimits(1, 0);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_TRUE(c.Contains(2));
}

}  // namespace
}  // namespace kiln
