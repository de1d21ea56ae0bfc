// UOp::id() and UOpKey (engine/uop/uop_key.h): ids are never reused, and a map keyed by the address of a node that
// died answers a lookup of the node built at the same address with a KILN_CHECK failure (debug and test builds) rather
// than with the dead node's entry: the check that catches issue #17's stale kernel-builder memo.
#include "engine/uop/uop_key.h"

#include <vector>

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(UOpId, DistinctForDistinctNodesAndNeverReused) {
  UOpPtr x = UOp::ConstInt(1), y = UOp::ConstInt(2);
  EXPECT_NE(x->id(), y->id());
  EXPECT_EQ(UOp::ConstInt(1)->id(), x->id());  // the same live node
  const uint64_t old = x->id();
  x = nullptr;
  UOpPtr again = UOp::ConstInt(1);  // rebuilt after death: a new node, a new id
  EXPECT_GT(again->id(), old);
}

TEST(UOpKey, FindsLiveNodes) {
  UOpPtr a = UOp::ConstInt(7), b = UOp::ConstInt(8);
  UOpMap<int> m;
  m[a.get()] = 1;
  m[b] = 2;
  EXPECT_EQ(m.at(a.get()), 1);
  EXPECT_EQ(m.at(b.get()), 2);
  EXPECT_FALSE(m.contains(UOp::ConstInt(9).get()));
  UOpSet s{a.get()};
  EXPECT_TRUE(s.contains(a));
  EXPECT_EQ(s.begin()->get(), a.get());
}

TEST(UOpKeyDeathTest, StaleEntryIsCaughtAtLookup) {
  UOpPtr second;
  uint64_t first_id = 0;
  const UOp* addr = nullptr;
  // The entry is made while the node lives, as a map of a graph's nodes would make it.
  UOpMap<int> m;
  {
    UOpPtr a = UOp::ConstInt(424242) + UOp::ConstInt(1);
    m[a.get()] = 1;
    addr = a.get();
    first_id = a->id();
  }
  // Build nodes until one lands where the dead node was.
  std::vector<UOpPtr> keep;
  for (int i = 0; i < 100000 && second == nullptr; ++i) {
    UOpPtr b = UOp::ConstInt(555000000 + i) * UOp::ConstInt(3);
    if (b.get() == addr) second = b;
    else keep.push_back(b);
  }
  if (second == nullptr) GTEST_SKIP() << "the allocator did not reuse the dead node's address";
  EXPECT_NE(second->id(), first_id);
#ifndef NDEBUG
  EXPECT_DEATH((void)m.contains(second.get()), "stale UOpKey");
#else
  EXPECT_FALSE(m.contains(second.get()));  // with NDEBUG the stale entry is simply never found
#endif
}

}  // namespace
}  // namespace kiln
