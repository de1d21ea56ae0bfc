// Reductions: axes, keepdim, accumulator dtypes, derived ops.
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

using testing::CountOp;
using testing::HasOp;
using testing::Sh;
using testing::V;

TEST(TensorReduceTest, SumAxesAndKeepdim) {
  Tensor x = Tensor::Ones({2, 3, 4});
  EXPECT_EQ(Sh(x.Sum(1)), V({2, 4}));
  EXPECT_EQ(Sh(x.Sum(1, true)), V({2, 1, 4}));
  EXPECT_EQ(Sh(x.Sum()), V({}));
  EXPECT_EQ(Sh(x.Sum({}, true)), V({1, 1, 1}));
  EXPECT_EQ(Sh(x.Sum({0, -1})), V({3}));
  EXPECT_EQ(Sh(x.Sum(-1)), V({2, 3}));
  Tensor k = x.Sum({2, 0}, true);
  ASSERT_EQ(k.uop()->op(), Op::REDUCE_AXIS);
  const ReduceArg& r = std::get<ReduceArg>(k.uop()->arg());
  EXPECT_EQ(r.op, Op::ADD);
  EXPECT_EQ(r.axes, IntVec({0, 2}));
  // keepdim=false reshapes the kept-as-1 dims away
  EXPECT_EQ(x.Sum(1).uop()->op(), Op::RESHAPE);
  EXPECT_EQ(x.Sum(1).uop()->src(0)->op(), Op::REDUCE_AXIS);
  EXPECT_EQ(x.Sum(Axes(IntVec{})).uop(), x.uop());  // no axes: no-op
}

TEST(TensorReduceTest, InvalidAxes) {
  Tensor x = Tensor::Ones({2, 3});
  EXPECT_FALSE(x.Sum(2).ok());
  EXPECT_FALSE(x.Sum(-3).ok());
  EXPECT_FALSE(x.Sum({0, 0}).ok());
  EXPECT_FALSE(x.Sum({1, -1}).ok());
  EXPECT_FALSE(x.Max(5).ok());
  EXPECT_FALSE(x.Mean(7).ok());
  EXPECT_FALSE(x.Argmax(2).ok());
  EXPECT_EQ(x.Sum(3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(x.Sum(3).status().message()).find("out of range"), std::string::npos);
}

TEST(TensorReduceTest, AccumulatorDtypes) {
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kInt8).Sum().dtype(), dtypes::kInt32);
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kUInt8).Sum().dtype(), dtypes::kUInt32);
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kBool).Sum().dtype(), dtypes::kInt32);
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kInt64).Sum().dtype(), dtypes::kInt64);
  Tensor h = Tensor::Ones({4}, dtypes::kFloat16).Sum();
  EXPECT_EQ(h.dtype(), dtypes::kFloat16);  // accumulates in float32, casts back
  EXPECT_EQ(h.uop()->op(), Op::CAST);
  EXPECT_EQ(h.uop()->src(0)->src(0)->dtype(), dtypes::kFloat32);
  EXPECT_EQ(Tensor::Ones({4}).Sum({}, false, dtypes::kFloat64).dtype(), dtypes::kFloat64);
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kInt8).Max().dtype(), dtypes::kInt8);
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kInt8).Prod().dtype(), dtypes::kInt8);
  EXPECT_EQ(std::get<ReduceArg>(Tensor::Ones({4}).Prod().uop()->src(0)->arg()).op, Op::MUL);
}

TEST(TensorReduceTest, DerivedReductions) {
  Tensor x = Tensor::Ones({2, 3, 4});
  EXPECT_EQ(Sh(x.Max(0)), V({3, 4}));
  EXPECT_EQ(Sh(x.Min({1, 2}, true)), V({2, 1, 1}));
  EXPECT_EQ(CountOp(x.Min(), Op::REDUCE_AXIS), 1);
  EXPECT_EQ(Sh(x.Mean(-1)), V({2, 3}));
  EXPECT_EQ(x.Mean().dtype(), dtypes::kFloat32);
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kInt32).Mean().dtype(), dtypes::kFloat32);
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kFloat16).Mean().dtype(), dtypes::kFloat16);
  EXPECT_EQ(Sh(x.Var(1)), V({2, 4}));
  EXPECT_EQ(Sh(x.Std({0, 2}, true)), V({1, 3, 1}));
  EXPECT_EQ(Tensor::Ones({5}, dtypes::kInt32).Var().dtype(), dtypes::kFloat32);
  EXPECT_TRUE(HasOp(x.Std(), Op::SQRT));
  EXPECT_EQ(x.Any().dtype(), dtypes::kBool);
  EXPECT_EQ(Sh(x.All(1)), V({2, 4}));
}

TEST(TensorReduceTest, Argmax) {
  Tensor x = Tensor::Ones({2, 3, 4});
  Tensor a = x.Argmax(1);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Sh(a), V({2, 4}));
  EXPECT_EQ(a.dtype(), dtypes::kInt32);
  EXPECT_EQ(Sh(x.Argmax(-1, true)), V({2, 3, 1}));
  EXPECT_EQ(Sh(x.Argmax()), V({}));
  EXPECT_EQ(Sh(x.Argmin(0)), V({3, 4}));
  EXPECT_EQ(Tensor::Ones({3}, dtypes::kUInt8).Argmin().dtype(), dtypes::kInt32);
  EXPECT_EQ(CountOp(x.Argmax(2), Op::REDUCE_AXIS), 2);  // max, then max of the masked reversed arange
}

}  // namespace
}  // namespace kiln
