// Movement ops and slicing: shapes, no-op elision, error tensors.
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

using testing::CountOp;
using testing::HasOp;
using testing::Sh;
using testing::V;

TEST(TensorMovementTest, Reshape) {
  Tensor x = Tensor::Ones({2, 3, 4});
  EXPECT_EQ(Sh(x.Reshape({6, -1})), V({6, 4}));
  EXPECT_EQ(Sh(x.Reshape({-1})), V({24}));
  EXPECT_EQ(x.Reshape({2, 3, 4}).uop(), x.uop());
  EXPECT_EQ(x.Reshape({4, 6}).uop()->op(), Op::RESHAPE);
  EXPECT_FALSE(x.Reshape({5, -1}).ok());
  EXPECT_FALSE(x.Reshape({-1, -1}).ok());
  EXPECT_FALSE(x.Reshape({7}).ok());
  EXPECT_FALSE(x.Reshape({-2, 12}).ok());
  EXPECT_NE(std::string(x.Reshape({7}).status().message()).find("cannot reshape"), std::string::npos);
  EXPECT_EQ(Sh(Tensor::Ones({}).Reshape({1, 1})), V({1, 1}));
}

TEST(TensorMovementTest, PermuteTransposeExpand) {
  Tensor x = Tensor::Ones({2, 3, 4});
  EXPECT_EQ(Sh(x.Permute({2, 0, 1})), V({4, 2, 3}));
  EXPECT_EQ(Sh(x.Permute({-1, 0, 1})), V({4, 2, 3}));
  EXPECT_EQ(x.Permute({0, 1, 2}).uop(), x.uop());
  EXPECT_FALSE(x.Permute({0, 0, 1}).ok());
  EXPECT_FALSE(x.Permute({0, 1}).ok());
  EXPECT_EQ(Sh(x.Transpose()), V({3, 2, 4}));
  EXPECT_EQ(Sh(x.Transpose(-1, 0)), V({4, 3, 2}));
  EXPECT_FALSE(x.Transpose(0, 3).ok());
  Tensor y = Tensor::Ones({3, 1});
  EXPECT_EQ(Sh(y.Expand({3, 5})), V({3, 5}));
  EXPECT_EQ(Sh(y.Expand({2, -1, 4})), V({2, 3, 4}));
  EXPECT_EQ(y.Expand({3, 5}).uop()->op(), Op::EXPAND);
  EXPECT_FALSE(y.Expand({4, 5}).ok());
  EXPECT_FALSE(y.Expand({5}).ok());
  EXPECT_FALSE(y.Expand({-1, 3, 1}).ok());
  EXPECT_EQ(Sh(y.BroadcastTo({2, 3, 6})), V({2, 3, 6}));
}

TEST(TensorMovementTest, PadShrinkFlip) {
  Tensor x = Tensor::Ones({2, 3});
  Tensor p = x.Pad({{1, 2}, {0, 3}});
  EXPECT_EQ(Sh(p), V({5, 6}));
  EXPECT_EQ(p.uop()->op(), Op::PAD);
  EXPECT_EQ(p.uop()->ArgVec(), IntVec({1, 2, 0, 3}));
  Tensor pv = x.Pad({{1, 1}, {1, 1}}, -1.5);
  EXPECT_EQ(Sh(pv), V({4, 5}));
  EXPECT_EQ(pv.uop()->op(), Op::WHERE);
  EXPECT_EQ(pv.dtype(), dtypes::kFloat32);
  EXPECT_EQ(Sh(x.Pad({{-1, 0}, {1, -1}})), V({1, 3}));
  EXPECT_EQ(x.Pad({{0, 0}, {0, 0}}).uop(), x.uop());
  EXPECT_FALSE(x.Pad({{1, 1}}).ok());
  EXPECT_FALSE(x.Pad({{-3, 0}, {0, 0}}).ok());
  EXPECT_EQ(Sh(x.Shrink({{0, 1}, {1, 3}})), V({1, 2}));
  EXPECT_EQ(x.Shrink({{0, 2}, {0, 3}}).uop(), x.uop());
  EXPECT_FALSE(x.Shrink({{0, 3}, {0, 3}}).ok());
  EXPECT_FALSE(x.Shrink({{2, 1}, {0, 3}}).ok());
  Tensor f = x.Flip(1);
  EXPECT_EQ(f.uop()->op(), Op::FLIP);
  EXPECT_EQ(f.uop()->ArgVec(), IntVec({0, 1}));
  EXPECT_EQ(x.Flip({}).uop()->ArgVec(), IntVec({1, 1}));  // all axes
  EXPECT_FALSE(x.Flip({1, -1}).ok());
}

TEST(TensorMovementTest, Slicing) {
  using S = SliceArg;
  Tensor x = Tensor::Arange(10);
  EXPECT_EQ(Sh(x.Slice({S::Range(2, 8, 2)})), V({3}));
  EXPECT_EQ(Sh(x.Slice({S::Range(std::nullopt, std::nullopt, -1)})), V({10}));
  EXPECT_TRUE(HasOp(x.Slice({S::Range(std::nullopt, std::nullopt, -1)}), Op::FLIP));
  EXPECT_EQ(Sh(x.Slice({S::Range(std::nullopt, std::nullopt, -3)})), V({4}));
  EXPECT_EQ(Sh(x.Slice({S::Range(-3, std::nullopt)})), V({3}));
  EXPECT_EQ(Sh(x.Slice({S::Range(5, 2)})), V({0}));
  EXPECT_EQ(Sh(x.Slice({S::Range(2, 5, -1)})), V({0}));
  EXPECT_EQ(Sh(x.Slice({S::Range(8, 2, -2)})), V({3}));
  EXPECT_EQ(Sh(x.Slice({S::Range(-100, 100)})), V({10}));
  EXPECT_EQ(x.Slice({S::All()}).uop(), x.uop());
  EXPECT_EQ(Sh(x.Slice({S::Index(3)})), V({}));
  EXPECT_EQ(Sh(x.Slice({S::Index(-1)})), V({}));
  EXPECT_FALSE(x.Slice({S::Index(10)}).ok());
  EXPECT_FALSE(x.Slice({S::Range(0, 5, 0)}).ok());
  EXPECT_FALSE(x.Slice({S::Index(0), S::Index(0)}).ok());
  Tensor y = Tensor::Ones({4, 5, 6});
  EXPECT_EQ(Sh(y.Slice({S::Index(1), S::All(), S::Range(std::nullopt, std::nullopt, 2)})), V({5, 3}));
  EXPECT_EQ(Sh(y.Slice({S::NewAxis(), S::Range(1, 3)})), V({1, 2, 5, 6}));
  EXPECT_EQ(Sh(y.Slice({S::All(), S::NewAxis(), S::Index(2), S::Range(5, 0, -2)})), V({4, 1, 3}));
  EXPECT_EQ(Sh(y.Slice({S::Range(std::nullopt, std::nullopt, 3), S::Range(1, std::nullopt, 4)})), V({2, 1, 6}));
}

TEST(TensorMovementTest, SqueezeUnsqueezeFlatten) {
  Tensor x = Tensor::Ones({1, 3, 1, 4});
  EXPECT_EQ(Sh(x.Squeeze()), V({3, 4}));
  EXPECT_EQ(Sh(x.Squeeze(2)), V({1, 3, 4}));
  EXPECT_EQ(x.Squeeze(1).uop(), x.uop());  // not size 1: no-op
  EXPECT_FALSE(x.Squeeze(4).ok());
  EXPECT_EQ(Sh(x.Unsqueeze(0)), V({1, 1, 3, 1, 4}));
  EXPECT_EQ(Sh(x.Unsqueeze(-1)), V({1, 3, 1, 4, 1}));
  EXPECT_FALSE(x.Unsqueeze(6).ok());
  EXPECT_EQ(Sh(x.Flatten()), V({12}));
  EXPECT_EQ(Sh(x.Flatten(1)), V({1, 12}));
  EXPECT_EQ(Sh(x.Flatten(1, 2)), V({1, 3, 4}));
  EXPECT_EQ(Sh(Tensor::Ones({}).Flatten()), V({1}));
  EXPECT_FALSE(x.Flatten(2, 1).ok());
}

TEST(TensorMovementTest, CatStackRepeat) {
  Tensor a = Tensor::Ones({2, 3}), b = Tensor::Zeros({4, 3}), c = Tensor::Ones({2, 5}, dtypes::kInt32);
  Tensor ab = Tensor::Cat({a, b});
  ASSERT_TRUE(ab.ok()) << ab.status();
  EXPECT_EQ(Sh(ab), V({6, 3}));
  EXPECT_EQ(CountOp(ab, Op::PAD), 2);
  EXPECT_EQ(Sh(Tensor::Cat({a, c}, 1)), V({2, 8}));
  EXPECT_EQ(Tensor::Cat({a, c}, -1).dtype(), dtypes::kFloat32);
  EXPECT_EQ(Tensor::Cat({c}, 0).uop(), c.uop());
  EXPECT_FALSE(Tensor::Cat({a, b}, 1).ok());
  EXPECT_FALSE(Tensor::Cat({a, Tensor::Ones({3})}).ok());
  EXPECT_FALSE(Tensor::Cat({}).ok());
  EXPECT_FALSE(Tensor::Cat({a, a}, 2).ok());
  EXPECT_EQ(Tensor::Cat({a < 1, a > 1}).dtype(), dtypes::kBool);
  EXPECT_EQ(Sh(Tensor::Stack({a, a, a})), V({3, 2, 3}));
  EXPECT_EQ(Sh(Tensor::Stack({a, a}, -1)), V({2, 3, 2}));
  EXPECT_EQ(Sh(Tensor::Stack({a, a}, 1)), V({2, 2, 3}));
  EXPECT_FALSE(Tensor::Stack({a, b}).ok());
  EXPECT_EQ(Sh(a.Repeat({2, 2})), V({4, 6}));
  EXPECT_EQ(Sh(a.Repeat({3, 1, 1})), V({3, 2, 3}));
  EXPECT_FALSE(a.Repeat({2}).ok());
}

TEST(TensorMovementTest, GatherAndOneHot) {
  Tensor x = Tensor::Ones({3, 4, 5});
  Tensor idx = Tensor::Zeros({3, 2, 5}, dtypes::kInt32);
  Tensor g = x.Gather(1, idx);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Sh(g), V({3, 2, 5}));
  EXPECT_EQ(g.dtype(), dtypes::kFloat32);
  EXPECT_EQ(Sh(x.Gather(-1, Tensor::Zeros({2, 4, 7}, dtypes::kInt64))), V({2, 4, 7}));
  EXPECT_FALSE(x.Gather(1, Tensor::Zeros({3, 2, 5})).ok());                      // float index
  EXPECT_FALSE(x.Gather(1, Tensor::Zeros({3, 2}, dtypes::kInt32)).ok());          // rank
  EXPECT_FALSE(x.Gather(1, Tensor::Zeros({4, 2, 5}, dtypes::kInt32)).ok());       // too large
  EXPECT_FALSE(x.Gather(3, idx).ok());
  Tensor oh = Tensor::Zeros({2, 3}, dtypes::kInt32).OneHot(10);
  EXPECT_EQ(Sh(oh), V({2, 3, 10}));
  EXPECT_EQ(oh.dtype(), dtypes::kBool);
}

}  // namespace
}  // namespace kiln
