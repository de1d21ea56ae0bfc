#include "engine/uop/uop.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

UOpPtr Buf(int64_t n, int64_t id) {
  UOpPtr u = UOp::Make(Op::UNIQUE, dtypes::kVoid, {}, id);
  UOpPtr d = UOp::Make(Op::DEVICE, dtypes::kVoid, {}, std::string("CPU"));
  return UOp::Make(Op::BUFFER, dtypes::kFloat32, {u, d}, n);
}

TEST(UOpTest, InterningReturnsSamePointer) {
  UOpPtr x = UOp::Variable("x", 0, 10);
  UOpPtr a = x + 4;
  UOpPtr b = x + 4;
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE((x + 5).get(), a.get());
  EXPECT_NE(a->WithTag(1).get(), a.get());
}

TEST(UOpTest, ConstCanonicalisation) {
  EXPECT_EQ(UOp::Const(dtypes::kFloat32, std::nan("")).get(),
            UOp::Const(dtypes::kFloat32, -std::nan("1")).get());
  EXPECT_NE(UOp::Const(dtypes::kFloat32, 0.0).get(), UOp::Const(dtypes::kFloat32, -0.0).get());
  EXPECT_EQ(UOp::Const(dtypes::kFloat32, int64_t{2}).get(), UOp::Const(dtypes::kFloat32, 2.0).get());
  EXPECT_NE(UOp::Const(dtypes::kInt32, int64_t{2}).get(), UOp::Const(dtypes::kFloat32, 2.0).get());
}

TEST(UOpTest, TableForgetsDeadNodes) {
  size_t before = UOp::LiveCount();
  {
    UOpPtr x = UOp::Variable("tfd", 0, 100);
    UOpPtr e = x;
    for (int i = 0; i < 1000; ++i) e = e * 3 + i;
    EXPECT_GT(UOp::LiveCount(), before + 1000);
  }
  EXPECT_EQ(UOp::LiveCount(), before);
}

TEST(UOpTest, DeepChainDestroysWithoutRecursion) {
  size_t before = UOp::LiveCount();
  {
    UOpPtr e = UOp::Variable("deep", 0, 1);
    for (int i = 0; i < 300000; ++i) e = e + 1;
    EXPECT_EQ(Toposort(e).size(), 300000u + 2u);  // variable, const 1, and the adds
  }
  EXPECT_EQ(UOp::LiveCount(), before);
}

TEST(UOpTest, ConcurrentOverlappingGraphs) {
  size_t before = UOp::LiveCount();
  std::vector<const UOp*> roots(8);
  {
    std::vector<UOpPtr> keep(8);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([t, &keep] {
        for (int round = 0; round < 20; ++round) {
          UOpPtr e = UOp::Variable("shared", 0, 7);
          for (int i = 0; i < 500; ++i) e = (e + i) * 2;  // identical across threads
          if (round == 19) keep[t] = e;
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 1; t < 8; ++t) EXPECT_EQ(keep[t].get(), keep[0].get());
  }
  EXPECT_EQ(UOp::LiveCount(), before);
}

TEST(UOpTest, KeyIsStructuralAndIgnoresTag) {
  UOpPtr x = UOp::Variable("k", 0, 3);
  UOpPtr a = x * 2;
  EXPECT_EQ(a->Key(), a->WithTag(7)->Key());
  EXPECT_NE(a->Key(), (x * 3)->Key());
  EXPECT_EQ(DigestHex(a->Key()).size(), 64u);
}

TEST(UOpTest, ShapeInference) {
  UOpPtr b = Buf(12, 1);
  EXPECT_EQ(b->shape(), (Shape{12}));
  auto r = UOp::Create(Op::RESHAPE, dtypes::kFloat32, {b}, IntVec{3, 4});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->shape(), (Shape{3, 4}));
  auto p = UOp::Create(Op::PERMUTE, dtypes::kFloat32, {*r}, IntVec{1, 0});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->shape(), (Shape{4, 3}));
  auto e = UOp::Create(Op::RESHAPE, dtypes::kFloat32, {*r}, IntVec{3, 1, 4});
  auto x = UOp::Create(Op::EXPAND, dtypes::kFloat32, {*e}, IntVec{3, 5, 4});
  ASSERT_TRUE(x.ok());
  auto add = UOp::Create(Op::ADD, dtypes::kFloat32, {*x, Buf(4, 9)});  // (3,5,4) + (4,) broadcast
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ((*add)->shape(), (Shape{3, 5, 4}));
  auto red = UOp::Create(Op::REDUCE_AXIS, dtypes::kFloat32, {*add}, ReduceArg{Op::ADD, {1}});
  ASSERT_TRUE(red.ok());
  EXPECT_EQ((*red)->shape(), (Shape{3, 1, 4}));
  auto pad = UOp::Create(Op::PAD, dtypes::kFloat32, {*r}, IntVec{1, 2, 0, 0});
  EXPECT_EQ((*pad)->shape(), (Shape{6, 4}));
  auto shr = UOp::Create(Op::SHRINK, dtypes::kFloat32, {*r}, IntVec{1, 2, 0, 4});
  EXPECT_EQ((*shr)->shape(), (Shape{1, 4}));
}

TEST(UOpTest, CreateRejectsMalformedInput) {
  UOpPtr b = Buf(12, 2);
  auto r = UOp::Create(Op::RESHAPE, dtypes::kFloat32, {b}, IntVec{5, 3});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot reshape"), std::string::npos) << r.status();
  auto arity = UOp::Create(Op::ADD, dtypes::kFloat32, {b});
  ASSERT_FALSE(arity.ok());
  EXPECT_NE(arity.status().message().find("wrong number of sources"), std::string::npos);
  UOpPtr i = UOp::Const(dtypes::kInt32, int64_t{1});
  UOpPtr f = UOp::Const(dtypes::kFloat32, 1.0);
  auto mixed = UOp::Create(Op::ADD, dtypes::kFloat32, {i, f});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("share one dtype"), std::string::npos);
  auto cmp = UOp::Create(Op::CMPLT, dtypes::kFloat32, {f, f});
  EXPECT_FALSE(cmp.ok());
  auto badarg = UOp::Create(Op::PERMUTE, dtypes::kFloat32, {b}, int64_t{3});
  EXPECT_FALSE(badarg.ok());
  auto perm = UOp::Create(Op::PERMUTE, dtypes::kFloat32, {b}, IntVec{1});
  EXPECT_FALSE(perm.ok());
  auto null_src = UOp::Create(Op::NEG, dtypes::kFloat32, {UOpPtr()});
  EXPECT_FALSE(null_src.ok());
  auto bc = UOp::Create(Op::ADD, dtypes::kFloat32,
                        {*UOp::Create(Op::RESHAPE, dtypes::kFloat32, {b}, IntVec{3, 4}),
                         *UOp::Create(Op::RESHAPE, dtypes::kFloat32, {b}, IntVec{4, 3})});
  ASSERT_FALSE(bc.ok());
  EXPECT_NE(bc.status().message().find("do not broadcast"), std::string::npos);
}

}  // namespace
}  // namespace kiln
