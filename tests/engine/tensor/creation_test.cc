// Creation ops build graphs of constants / fresh buffers; nothing is realized.
#include "engine/tensor/tensor.h"

#include "gtest/gtest.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

using testing::HasOp;
using testing::Sh;
using testing::V;

TEST(TensorCreationTest, DefaultTensorIsAnError) {
  Tensor t;
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.uop(), nullptr);
  EXPECT_EQ(t.dtype(), dtypes::kVoid);
  EXPECT_EQ(t.device(), "");
  EXPECT_FALSE(Tensor::FromStatus(absl::OkStatus()).ok());
}

TEST(TensorCreationTest, FullIsAnExpandedConst) {
  Tensor t = Tensor::Full({2, 3}, 1.5);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Sh(t), V({2, 3}));
  EXPECT_EQ(t.dtype(), dtypes::kFloat32);
  EXPECT_EQ(t.device(), "CPU");
  EXPECT_EQ(t.uop()->op(), Op::EXPAND);
  EXPECT_EQ(t.uop()->src(0)->op(), Op::RESHAPE);
  EXPECT_EQ(t.uop()->src(0)->src(0)->op(), Op::CONST);
  EXPECT_EQ(t.uop()->src(0)->src(0)->shape(), Shape{});
  EXPECT_FALSE(HasOp(t, Op::BUFFER));
  // 0-d: the CONST itself
  Tensor s = Tensor::Full({}, 3);
  EXPECT_EQ(s.uop()->op(), Op::CONST);
  EXPECT_EQ(s.dtype(), dtypes::kInt32);
  EXPECT_EQ(Tensor::Full({1}, true).dtype(), dtypes::kBool);
  EXPECT_EQ(Tensor::Full({2}, 7, dtypes::kUInt8).dtype(), dtypes::kUInt8);
  EXPECT_EQ(Tensor::Zeros({4}).dtype(), dtypes::kFloat32);
  EXPECT_EQ(Tensor::Ones({4}, dtypes::kInt64).dtype(), dtypes::kInt64);
  EXPECT_EQ(Tensor::Zeros({3}, dtypes::kFloat32, "CL:0").device(), "CL:0");
}

TEST(TensorCreationTest, HashConsing) {
  EXPECT_EQ(Tensor::Ones({2, 2}).uop(), Tensor::Ones({2, 2}).uop());
  Tensor a = Tensor::Full({3}, 2.0), b = Tensor::Arange(3).Cast(dtypes::kFloat32);
  EXPECT_EQ((a + b).uop(), (a + b).uop());
  EXPECT_EQ((a * b).Sum().uop(), (a * b).Sum().uop());
  EXPECT_NE((a + b).uop(), (a * b).uop());
}

TEST(TensorCreationTest, BadShapes) {
  EXPECT_FALSE(Tensor::Zeros({2, -1}).ok());
  EXPECT_FALSE(Tensor::Empty({-3}).ok());
  EXPECT_FALSE(Tensor::Full({2}, 1, dtypes::kVoid).ok());
  EXPECT_NE(std::string(Tensor::Zeros({-2}).status().message()).find("negative"), std::string::npos);
}

TEST(TensorCreationTest, EmptyIsAFreshBuffer) {
  Tensor a = Tensor::Empty({2, 3}, dtypes::kInt32), b = Tensor::Empty({2, 3}, dtypes::kInt32);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Sh(a), V({2, 3}));
  EXPECT_EQ(a.uop()->op(), Op::RESHAPE);
  const UOpPtr& buf = a.uop()->src(0);
  EXPECT_EQ(buf->op(), Op::BUFFER);
  EXPECT_EQ(buf->ArgInt(), 6);
  EXPECT_EQ(buf->src(1)->ArgStr(), "CPU");
  EXPECT_NE(a.uop(), b.uop());
  EXPECT_TRUE(a.IsRealized());
  EXPECT_EQ(Tensor::Empty({5}).uop()->op(), Op::BUFFER);  // 1-D: no reshape
}

TEST(TensorCreationTest, ArangeShapesAndDtypes) {
  EXPECT_EQ(Sh(Tensor::Arange(10)), V({10}));
  EXPECT_EQ(Tensor::Arange(10).dtype(), dtypes::kInt32);
  EXPECT_EQ(Sh(Tensor::Arange(2, 10, 3)), V({3}));
  EXPECT_EQ(Sh(Tensor::Arange(5, 0, -1)), V({5}));
  EXPECT_EQ(Sh(Tensor::Arange(5, 0, -2)), V({3}));
  EXPECT_EQ(Sh(Tensor::Arange(0, 0)), V({0}));
  EXPECT_EQ(Sh(Tensor::Arange(3, 1)), V({0}));
  EXPECT_EQ(Sh(Tensor::Arange(1)), V({1}));
  Tensor f = Tensor::Arange(0, 1, 0.1);
  EXPECT_EQ(Sh(f), V({10}));
  EXPECT_EQ(f.dtype(), dtypes::kFloat32);
  EXPECT_EQ(Sh(Tensor::Arange(0.5, 3)), V({3}));
  EXPECT_EQ(Tensor::Arange(0, 4, 1, dtypes::kUInt8).dtype(), dtypes::kUInt8);
  EXPECT_FALSE(Tensor::Arange(0, 4, 0).ok());
  // built from constants only: no reduction, no buffer
  Tensor big = Tensor::Arange(1000);
  EXPECT_FALSE(HasOp(big, Op::REDUCE_AXIS));
  EXPECT_FALSE(HasOp(big, Op::BUFFER));
  EXPECT_TRUE(testing::ElementwiseSourcesMatch(big));
}

TEST(TensorCreationTest, Eye) {
  EXPECT_EQ(Sh(Tensor::Eye(3)), V({3, 3}));
  EXPECT_EQ(Sh(Tensor::Eye(2, 4)), V({2, 4}));
  EXPECT_EQ(Sh(Tensor::Eye(4, 2)), V({4, 2}));
  EXPECT_EQ(Sh(Tensor::Eye(0)), V({0, 0}));
  EXPECT_EQ(Tensor::Eye(2, std::nullopt, dtypes::kInt32).dtype(), dtypes::kInt32);
  EXPECT_FALSE(Tensor::Eye(-1).ok());
}

TEST(TensorCreationTest, LikeOps) {
  Tensor x = Tensor::Zeros({2, 5}, dtypes::kInt16);
  EXPECT_EQ(x.OnesLike().dtype(), dtypes::kInt16);
  EXPECT_EQ(Sh(x.FullLike(2.5, dtypes::kFloat32)), V({2, 5}));
  EXPECT_EQ(x.ZerosLike(dtypes::kBool).dtype(), dtypes::kBool);
}

TEST(TensorCreationTest, RandomIsDeterministicAndDeviceFree) {
  Tensor::ManualSeed(42);
  Tensor a = Tensor::Rand({3, 4});
  Tensor a2 = Tensor::Rand({3, 4});
  Tensor::ManualSeed(42);
  Tensor b = Tensor::Rand({3, 4});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Sh(a), V({3, 4}));
  EXPECT_EQ(a.dtype(), dtypes::kFloat32);
  EXPECT_EQ(a.uop(), b.uop());   // same seed and counter: the same graph
  EXPECT_NE(a.uop(), a2.uop());  // the counter advances per call
  EXPECT_FALSE(HasOp(a, Op::BUFFER));
  EXPECT_TRUE(HasOp(a, Op::XOR));
  EXPECT_TRUE(HasOp(a, Op::SHR));
  Tensor::ManualSeed(43);
  EXPECT_NE(Tensor::Rand({3, 4}).uop(), a.uop());
  EXPECT_EQ(Tensor::Rand({2}, dtypes::kFloat16).dtype(), dtypes::kFloat16);
  EXPECT_FALSE(Tensor::Rand({2}, dtypes::kInt32).ok());
  Tensor n = Tensor::Randn({5, 2});
  EXPECT_EQ(Sh(n), V({5, 2}));
  EXPECT_TRUE(HasOp(n, Op::SIN));
  Tensor r = Tensor::RandInt(-3, 7, {8});
  EXPECT_EQ(Sh(r), V({8}));
  EXPECT_EQ(r.dtype(), dtypes::kInt32);
  EXPECT_FALSE(Tensor::RandInt(3, 3, {2}).ok());
  EXPECT_FALSE(Tensor::RandInt(0, 2, {2}, dtypes::kFloat32).ok());
  EXPECT_EQ(Sh(Tensor::Rand({0, 3})), V({0, 3}));
  EXPECT_EQ(Sh(Tensor::Uniform({4}, -1, 1)), V({4}));
}

TEST(TensorCreationTest, MarkersAndAssign) {
  Tensor x = Tensor::Ones({2, 2});
  EXPECT_EQ(x.Contiguous().uop()->op(), Op::CONTIGUOUS);
  EXPECT_EQ(x.Detach().uop()->op(), Op::DETACH);
  Tensor buf = Tensor::Empty({2, 2});
  Tensor v = buf.Assign(x * 2);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_EQ(buf.uop()->op(), Op::ASSIGN);
  EXPECT_EQ(v.uop(), buf.uop());
  Tensor buf2 = Tensor::Empty({2, 2});
  buf2.Assign(3);  // scalar: broadcast
  EXPECT_TRUE(buf2.ok());
  Tensor buf3 = Tensor::Empty({2, 2});
  buf3.Assign(Tensor::Ones({2, 2}, dtypes::kInt32));  // dtype mismatch
  EXPECT_FALSE(buf3.ok());
  Tensor buf4 = Tensor::Empty({2, 2});
  buf4.Assign(Tensor::Ones({3}));  // shape mismatch
  EXPECT_FALSE(buf4.ok());
  EXPECT_NE(x.ToString().find("shape=(2, 2)"), std::string::npos);
}

}  // namespace
}  // namespace kiln
