// Elementwise ops: promotion (tinygrad/numpy), weak scalars, broadcasting, lowering, error tensors.
#include <string>

#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

using testing::ElementwiseSourcesMatch;
using testing::HasOp;
using testing::Sh;
using testing::V;

Tensor T(DType d, std::initializer_list<int64_t> shape = {3}) { return Tensor::Ones(shape, d); }

struct PromoCase {
  DType a, b, out;
};

TEST(TensorElementwiseTest, PromotionTable) {
  // tinygrad least_upper_dtype (JAX lattice)
  const PromoCase cases[] = {
      {dtypes::kInt32, dtypes::kFloat32, dtypes::kFloat32}, {dtypes::kInt8, dtypes::kUInt8, dtypes::kInt16},
      {dtypes::kInt32, dtypes::kFloat16, dtypes::kFloat16}, {dtypes::kBool, dtypes::kBool, dtypes::kBool},
      {dtypes::kUInt32, dtypes::kInt32, dtypes::kInt64},    {dtypes::kInt64, dtypes::kUInt64, dtypes::kFloat16},
      {dtypes::kFloat16, dtypes::kBFloat16, dtypes::kFloat32}, {dtypes::kBool, dtypes::kInt8, dtypes::kInt8},
      {dtypes::kUInt8, dtypes::kUInt16, dtypes::kUInt16},   {dtypes::kFloat32, dtypes::kFloat64, dtypes::kFloat64},
      {dtypes::kUInt8, dtypes::kInt8, dtypes::kInt16},      {dtypes::kBool, dtypes::kFloat16, dtypes::kFloat16},
  };
  for (const PromoCase& c : cases) {
    Tensor r = T(c.a) + T(c.b);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r.dtype(), c.out) << c.a.Name() << " + " << c.b.Name();
    EXPECT_EQ((T(c.b) * T(c.a)).dtype(), c.out);
  }
}

TEST(TensorElementwiseTest, WeakScalars) {
  EXPECT_EQ((T(dtypes::kInt32) + 2).dtype(), dtypes::kInt32);
  EXPECT_EQ((T(dtypes::kInt8) * 3).dtype(), dtypes::kInt8);
  EXPECT_EQ((T(dtypes::kInt32) + 2.5).dtype(), dtypes::kFloat32);
  EXPECT_EQ((T(dtypes::kInt64) + 2.5).dtype(), dtypes::kFloat32);
  EXPECT_EQ((T(dtypes::kFloat16) + 2.5).dtype(), dtypes::kFloat16);
  EXPECT_EQ((T(dtypes::kFloat16) + 2).dtype(), dtypes::kFloat16);
  EXPECT_EQ((T(dtypes::kBool) + 1).dtype(), dtypes::kInt32);
  EXPECT_EQ((T(dtypes::kBool) + 1.0).dtype(), dtypes::kFloat32);
  EXPECT_EQ((T(dtypes::kBool) + true).dtype(), dtypes::kBool);
  EXPECT_EQ((T(dtypes::kUInt8) + true).dtype(), dtypes::kUInt8);
  EXPECT_EQ((2 - T(dtypes::kUInt16)).dtype(), dtypes::kUInt16);
  EXPECT_EQ((2.0 * T(dtypes::kInt16)).dtype(), dtypes::kFloat32);
  EXPECT_EQ((T(dtypes::kFloat64) + 1.0f).dtype(), dtypes::kFloat64);
}

TEST(TensorElementwiseTest, TrueAndFloorDivision) {
  EXPECT_EQ((T(dtypes::kInt32) / T(dtypes::kInt32)).dtype(), dtypes::kFloat32);
  EXPECT_EQ((T(dtypes::kInt32) / 2).dtype(), dtypes::kFloat32);
  EXPECT_EQ((T(dtypes::kFloat16) / 2).dtype(), dtypes::kFloat16);
  EXPECT_EQ((1 / T(dtypes::kInt8)).dtype(), dtypes::kFloat32);
  Tensor fd = T(dtypes::kInt32).FloorDiv(T(dtypes::kInt32));
  EXPECT_EQ(fd.uop()->op(), Op::FLOORDIV);
  EXPECT_EQ(fd.dtype(), dtypes::kInt32);
  EXPECT_EQ(T(dtypes::kInt32).Mod(3).uop()->op(), Op::FLOORMOD);
  EXPECT_EQ((T(dtypes::kInt32) % 3).dtype(), dtypes::kInt32);
  Tensor ff = T(dtypes::kFloat32).FloorDiv(2);
  EXPECT_FALSE(HasOp(ff, Op::FLOORDIV));
  EXPECT_TRUE(HasOp(ff, Op::TRUNC));
  EXPECT_EQ(T(dtypes::kFloat32).Mod(2.5).dtype(), dtypes::kFloat32);
  // float division is x * reciprocal(y)
  Tensor d = T(dtypes::kFloat32) / T(dtypes::kFloat32);
  EXPECT_EQ(d.uop()->op(), Op::MUL);
  EXPECT_EQ(d.uop()->src(1)->op(), Op::RECIPROCAL);
}

TEST(TensorElementwiseTest, BroadcastingIsExplicit) {
  Tensor a = Tensor::Ones({3, 1}), b = Tensor::Ones({4});
  Tensor c = a + b;
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Sh(c), V({3, 4}));
  EXPECT_EQ(c.uop()->src(0)->op(), Op::EXPAND);
  EXPECT_EQ(c.uop()->src(1)->op(), Op::EXPAND);
  EXPECT_EQ(Sh(Tensor::Ones({2, 1, 5}) * Tensor::Ones({7, 1})), V({2, 7, 5}));
  EXPECT_EQ(Sh(Tensor::Ones({}) + Tensor::Ones({2, 2})), V({2, 2}));
  EXPECT_EQ(Sh(Tensor::Ones({0, 3}) + Tensor::Ones({3})), V({0, 3}));
  Tensor g = ((a + b) * 2 - b / 3).Exp().Sigmoid().Gelu().Maximum(0.5);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(ElementwiseSourcesMatch(g));
  // equal shapes: no movement node
  Tensor e = Tensor::Ones({2, 2}) + Tensor::Zeros({2, 2});
  EXPECT_EQ(e.uop()->src(0), Tensor::Ones({2, 2}).uop());
}

TEST(TensorElementwiseTest, ComparisonsAndLogic) {
  Tensor a = Tensor::Ones({3, 1}), b = Tensor::Ones({4}, dtypes::kInt32);
  for (const Tensor& t : {a < b, a <= b, a > b, a >= b, a == b, a != b, 1 < b, 2.5 >= a}) {
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t.dtype(), dtypes::kBool);
  }
  EXPECT_EQ(Sh(a < b), V({3, 4}));
  EXPECT_EQ((a < b).uop()->op(), Op::CMPLT);
  EXPECT_EQ((a == b).uop()->op(), Op::CMPEQ);
  EXPECT_EQ((a != b).uop()->op(), Op::CMPNE);
  // a > b is CMPLT(b, a)
  Tensor gt = a > b;
  EXPECT_EQ(gt.uop()->op(), Op::CMPLT);
  EXPECT_EQ(gt.uop()->src(1)->src(0), a.uop());
  Tensor m = (a < 1).LogicalAnd(b > 0).LogicalOr(!(a == 2));
  EXPECT_EQ(m.dtype(), dtypes::kBool);
  EXPECT_EQ(a.LogicalNot().dtype(), dtypes::kBool);
  EXPECT_EQ((b & 3).uop()->op(), Op::AND);
  EXPECT_EQ((b | b).dtype(), dtypes::kInt32);
  EXPECT_EQ((b ^ 1).uop()->op(), Op::XOR);
  EXPECT_EQ((~b).uop()->op(), Op::XOR);
  EXPECT_EQ((~(a < 1)).dtype(), dtypes::kBool);
  EXPECT_FALSE((a & a).ok());
  EXPECT_FALSE((~a).ok());
  EXPECT_FALSE(a.Lshift(1).ok());
  EXPECT_EQ(b.Lshift(2).uop()->op(), Op::SHL);
  EXPECT_EQ(b.Rshift(2).uop()->op(), Op::SHR);
  EXPECT_FALSE(b.Rshift(32).ok());
}

TEST(TensorElementwiseTest, Lowering) {
  Tensor x = Tensor::Ones({4});
  EXPECT_EQ((-x).uop()->op(), Op::MUL);                     // neg = x * -1
  EXPECT_EQ((x - x).uop()->op(), Op::ADD);                  // sub = x + (-y)
  EXPECT_EQ(x.Exp().uop()->op(), Op::EXP2);                 // exp = exp2(x / ln2)
  EXPECT_EQ(x.Exp().uop()->src(0)->op(), Op::MUL);
  EXPECT_EQ(x.Log().uop()->op(), Op::MUL);                  // log = log2(x) * ln2
  EXPECT_EQ(x.Log().uop()->src(0)->op(), Op::LOG2);
  EXPECT_EQ(x.Cos().uop()->op(), Op::SIN);                  // cos = sin(pi/2 - x)
  EXPECT_EQ(x.Sqrt().uop()->op(), Op::SQRT);
  EXPECT_EQ(x.Rsqrt().uop()->op(), Op::RECIPROCAL);
  EXPECT_EQ(x.Relu().uop()->op(), Op::WHERE);
  EXPECT_EQ(x.Maximum(x).uop()->op(), Op::MAX);
  EXPECT_EQ(x.Sigmoid().uop()->op(), Op::WHERE);             // x >= 0 ? 1 / (1 + e) : e / (1 + e), e = exp(-|x|)
  EXPECT_TRUE(HasOp(x.Sigmoid(), Op::RECIPROCAL));
  EXPECT_TRUE(HasOp(x.Tanh(), Op::EXP2));
  EXPECT_TRUE(HasOp(x.Silu(), Op::RECIPROCAL));
  EXPECT_EQ(x.Square().uop()->op(), Op::MUL);
  EXPECT_EQ(x.Pow(2).uop()->op(), Op::MUL);
  EXPECT_EQ(x.Pow(1).uop(), x.uop());
  EXPECT_TRUE(HasOp(x.Pow(0.5), Op::SQRT));
  EXPECT_TRUE(HasOp(x.Pow(x), Op::EXP2));
  EXPECT_TRUE(HasOp(x.Pow(1.7), Op::LOG2));
  EXPECT_TRUE(HasOp(x.Pow(-2), Op::RECIPROCAL));
  EXPECT_TRUE(HasOp(x.RPow(2.0), Op::EXP2));
  // min of ints via bitwise not, of floats via negation
  Tensor i = Tensor::Ones({4}, dtypes::kInt32);
  EXPECT_TRUE(HasOp(i.Minimum(i), Op::XOR));
  EXPECT_TRUE(HasOp(x.Minimum(x), Op::MUL));
  EXPECT_EQ(i.Clip(0, 3).dtype(), dtypes::kInt32);
  EXPECT_EQ(i.Clip(0.5, 3).dtype(), dtypes::kFloat32);
  EXPECT_EQ(i.Pow(3).dtype(), dtypes::kInt32);
  EXPECT_FALSE(HasOp(i.Pow(3), Op::EXP2));
  EXPECT_FALSE(i.Pow(-1).ok());
  EXPECT_EQ(i.Pow(i).dtype(), dtypes::kInt32);
  EXPECT_EQ(i.Pow(0.5).dtype(), dtypes::kFloat32);
  EXPECT_EQ(i.Abs().dtype(), dtypes::kInt32);
  EXPECT_EQ(Tensor::Ones({2}, dtypes::kUInt8).Abs().uop(), Tensor::Ones({2}, dtypes::kUInt8).uop());
  EXPECT_EQ(i.Sign().dtype(), dtypes::kInt32);
  EXPECT_EQ(i.Trunc().uop(), i.uop());
  EXPECT_EQ(x.Floor().uop()->op(), Op::WHERE);
  EXPECT_TRUE(HasOp(x.Round(), Op::TRUNC));
  EXPECT_EQ(x.Tan().dtype(), dtypes::kFloat32);
  EXPECT_EQ((-Tensor::Ones({2}, dtypes::kBool)).dtype(), dtypes::kBool);
  EXPECT_FALSE((Tensor::Ones({2}, dtypes::kBool) - Tensor::Ones({2}, dtypes::kBool)).ok());
}

TEST(TensorElementwiseTest, FloatOnlyUnaryOpsCastInts) {
  Tensor i = Tensor::Ones({2}, dtypes::kInt32);
  for (const Tensor& t : {i.Sqrt(), i.Exp(), i.Log(), i.Sin(), i.Cos(), i.Exp2(), i.Log2(), i.Reciprocal(),
                          i.Sigmoid(), i.Tanh(), i.Gelu(), i.Silu(), i.Rsqrt()}) {
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t.dtype(), dtypes::kFloat32);
  }
  Tensor h = Tensor::Ones({2}, dtypes::kFloat16);
  EXPECT_EQ(h.Exp().dtype(), dtypes::kFloat16);
  EXPECT_EQ(h.Sqrt().dtype(), dtypes::kFloat16);
  EXPECT_EQ(Tensor::Ones({2}, dtypes::kInt64).Sqrt().dtype(), dtypes::kFloat32);
}

TEST(TensorElementwiseTest, Where) {
  Tensor c = Tensor::Ones({3, 1}, dtypes::kBool), x = Tensor::Ones({4}, dtypes::kInt32);
  Tensor w = c.Where(x, 1.5);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w.uop()->op(), Op::WHERE);
  EXPECT_EQ(Sh(w), V({3, 4}));
  EXPECT_EQ(w.dtype(), dtypes::kFloat32);
  EXPECT_EQ(c.Where(x, 2).dtype(), dtypes::kInt32);
  EXPECT_EQ(c.Where(1, 0).dtype(), dtypes::kInt32);
  EXPECT_EQ(c.Where(1.0, 0).dtype(), dtypes::kFloat32);
  EXPECT_EQ(Sh(c.Where(1, 0)), V({3, 1}));
  EXPECT_EQ(x.Where(x, x).uop()->src(0)->dtype(), dtypes::kBool);  // non-bool condition is cast
  EXPECT_FALSE(c.Where(Tensor::Ones({2, 5}), 0).ok());
  EXPECT_TRUE(ElementwiseSourcesMatch(w));
}

TEST(TensorElementwiseTest, CastAndBitcast) {
  Tensor x = Tensor::Ones({2, 4});
  EXPECT_EQ(x.Cast(dtypes::kFloat32).uop(), x.uop());
  EXPECT_EQ(x.Cast(dtypes::kInt8).uop()->op(), Op::CAST);
  EXPECT_EQ(x.Cast(dtypes::kInt8).dtype(), dtypes::kInt8);
  EXPECT_FALSE(x.Cast(dtypes::kVoid).ok());
  Tensor b = x.Bitcast(dtypes::kInt32);
  EXPECT_EQ(b.uop()->op(), Op::BITCAST);
  EXPECT_EQ(Sh(b), V({2, 4}));
  EXPECT_EQ(Sh(x.Bitcast(dtypes::kFloat16)), V({2, 8}));
  EXPECT_EQ(Sh(x.Bitcast(dtypes::kFloat64)), V({2, 2}));
  EXPECT_FALSE(Tensor::Ones({3}).Bitcast(dtypes::kFloat64).ok());
}

TEST(TensorElementwiseTest, ErrorTensorsPropagate) {
  Tensor bad = Tensor::Ones({2, 3}) + Tensor::Ones({4});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("do not broadcast"), std::string::npos) << bad.status();
  EXPECT_EQ(bad.uop(), nullptr);
  EXPECT_TRUE(bad.shape().empty());
  Tensor good = Tensor::Ones({4});
  // the first error wins, on either side and through later ops
  for (const Tensor& t : {bad + good, good + bad, bad.Exp(), (bad * 2).Sum(), good.Where(bad, 1), bad.Reshape({6}),
                          bad.Matmul(good), 1 - bad, bad.Softmax(), Tensor::Cat({good, bad})}) {
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status(), bad.status());
  }
  // a different device
  Tensor cl = Tensor::Ones({4}, dtypes::kFloat32, "CL:0");
  EXPECT_FALSE((good + cl).ok());
  EXPECT_NE(std::string((good + cl).status().message()).find("different devices"), std::string::npos);
}

}  // namespace
}  // namespace kiln
