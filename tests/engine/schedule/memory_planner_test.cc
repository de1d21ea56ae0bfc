// MemoryPlanner: placeholders are planned into shared buffers once every lifetime is known.
#include "engine/schedule/memory_planner.h"

#include <gtest/gtest.h>

#include "engine/dtype/dtype.h"

namespace kiln::schedule {
namespace {

constexpr char kDev[] = "CPU";

TEST(MemoryPlanner, LargestFirstKeepsASmallTensorOutOfALargeBuffer) {
  // a (1000) dies, b (10) lives on while c (1000) is made. Planned as they came, b took a's released buffer and c
  // needed a new one (2000 elements); planned largest first, c reuses a's and b gets its own (1010).
  MemoryPlanner p;
  UOpPtr a = p.Acquire(dtypes::kFloat32, 1000, kDev);
  p.Release(a);
  UOpPtr b = p.Acquire(dtypes::kFloat32, 10, kDev);
  UOpPtr c = p.Acquire(dtypes::kFloat32, 1000, kDev);
  p.Release(b);
  p.Release(c);
  UOpMap<UOpPtr> plan = p.Finish();
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[a], plan[c]);
  EXPECT_NE(plan[b], plan[c]);
  EXPECT_EQ(plan[b]->ArgInt(), 10);
  EXPECT_EQ(p.requested_bytes(), 2010 * 4);
  EXPECT_EQ(p.allocated_bytes(), 1010 * 4);
}

TEST(MemoryPlanner, OverlappingLifetimesNeverShare) {
  // Every pair of these overlaps somewhere (a chain where each is released after the next is made), and one is never
  // released: all distinct except across the gaps.
  MemoryPlanner p;
  UOpPtr x = p.Acquire(dtypes::kFloat32, 64, kDev);
  UOpPtr y = p.Acquire(dtypes::kFloat32, 32, kDev);
  p.Release(x);
  UOpPtr z = p.Acquire(dtypes::kFloat32, 64, kDev);  // x is dead: may take its buffer; y is live
  p.Release(y);
  UOpPtr w = p.Acquire(dtypes::kFloat32, 16, kDev);  // never released
  UOpMap<UOpPtr> plan = p.Finish();
  EXPECT_NE(plan[x], plan[y]);
  EXPECT_NE(plan[y], plan[z]);
  EXPECT_NE(plan[z], plan[w]);
  EXPECT_EQ(plan[x], plan[z]);
  for (const UOpPtr& u : {x, y, z, w}) EXPECT_GE(plan[u]->ArgInt(), u->ArgInt());
}

TEST(MemoryPlanner, DtypesAndDevicesStayApart) {
  MemoryPlanner p;
  UOpPtr f = p.Acquire(dtypes::kFloat32, 100, kDev);
  p.Release(f);
  UOpPtr i = p.Acquire(dtypes::kInt32, 100, kDev);
  p.Release(i);
  UOpPtr g = p.Acquire(dtypes::kFloat32, 100, "CPU:1");
  p.Release(g);
  UOpMap<UOpPtr> plan = p.Finish();
  EXPECT_NE(plan[f], plan[i]);
  EXPECT_NE(plan[f], plan[g]);
  EXPECT_EQ(plan[i]->dtype(), dtypes::kInt32);
  EXPECT_EQ(p.allocated_bytes(), 3 * 400);
}

}  // namespace
}  // namespace kiln::schedule
