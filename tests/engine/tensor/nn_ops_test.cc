// Matmul, convolution, pooling and nn functions: output shapes by the standard formulas.
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/engine/tensor/test_util.h"

namespace kiln {
namespace {

using testing::ElementwiseSourcesMatch;
using testing::HasOp;
using testing::Sh;
using testing::V;

struct MatmulCase {
  V a, b, out;
};

TEST(TensorNnTest, MatmulShapes) {
  const MatmulCase cases[] = {
      {{2, 3}, {3, 4}, {2, 4}},          {{3}, {3}, {}},
      {{5, 2, 3}, {3, 4}, {5, 2, 4}},    {{2, 1, 2, 3}, {4, 3, 5}, {2, 4, 2, 5}},
      {{3}, {3, 4}, {4}},                {{2, 3}, {3}, {2}},
      {{7, 1, 3}, {1, 3, 2}, {7, 1, 2}}, {{1, 1}, {1, 1}, {1, 1}},
      {{6, 3}, {2, 3, 5}, {2, 6, 5}},    {{4}, {2, 4, 3}, {2, 3}},
  };
  for (const MatmulCase& c : cases) {
    Tensor r = Tensor::Ones(c.a).Matmul(Tensor::Ones(c.b));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Sh(r), c.out);
    EXPECT_TRUE(ElementwiseSourcesMatch(r));
    EXPECT_TRUE(HasOp(r, Op::REDUCE_AXIS));
  }
  EXPECT_FALSE(Tensor::Ones({2, 3}).Matmul(Tensor::Ones({4, 2})).ok());
  EXPECT_FALSE(Tensor::Ones({}).Matmul(Tensor::Ones({3})).ok());
  EXPECT_FALSE(Tensor::Ones({2, 2, 3}).Matmul(Tensor::Ones({3, 3, 1})).ok());  // batch 2 vs 3
  EXPECT_EQ(Tensor::Ones({2, 2}, dtypes::kInt8).Dot(Tensor::Ones({2, 2}, dtypes::kInt8)).dtype(), dtypes::kInt8);
  EXPECT_EQ(Tensor::Ones({2, 2}, dtypes::kFloat16).Dot(Tensor::Ones({2, 2}, dtypes::kFloat16)).dtype(), dtypes::kFloat16);
  EXPECT_EQ(Tensor::Ones({2, 2}, dtypes::kInt32).Dot(Tensor::Ones({2, 2})).dtype(), dtypes::kFloat32);
  EXPECT_EQ(Tensor::Ones({2, 2}, dtypes::kFloat16).Dot(Tensor::Ones({2, 2}, dtypes::kFloat16), dtypes::kFloat32).dtype(),
            dtypes::kFloat32);
}

struct ConvCase {
  int64_t n, cin, h, w, cout, kh, kw;
  IntVec stride, padding, dilation;
  int64_t groups;
};

int64_t OutDim(int64_t i, int64_t k, int64_t s, int64_t pb, int64_t pa, int64_t d) {
  return (i + pb + pa - d * (k - 1) - 1) / s + 1;
}

TEST(TensorNnTest, Conv2dShapes) {
  const ConvCase cases[] = {
      {1, 1, 5, 5, 1, 3, 3, {1}, {0}, {1}, 1},          {2, 3, 8, 8, 4, 3, 3, {1}, {1}, {1}, 1},
      {2, 3, 9, 9, 6, 3, 3, {2}, {0}, {1}, 1},          {1, 4, 10, 7, 8, 3, 3, {2}, {1}, {1}, 2},
      {1, 4, 11, 11, 4, 3, 3, {1}, {2}, {2}, 4},        {3, 2, 6, 8, 5, 1, 1, {1}, {0}, {1}, 1},
      {1, 2, 7, 9, 3, 2, 4, {1, 2}, {1, 0}, {1}, 1},    {1, 1, 10, 10, 2, 2, 2, {3}, {0}, {1}, 1},
      {2, 6, 12, 12, 6, 5, 5, {2}, {2}, {1}, 3},        {1, 3, 5, 5, 2, 5, 5, {1}, {0}, {1}, 1},
      {1, 2, 8, 8, 2, 3, 3, {1}, {0, 1, 2, 0}, {1}, 1}, {1, 8, 16, 16, 16, 3, 3, {2}, {1}, {2, 1}, 8},
      {4, 1, 28, 28, 32, 5, 5, {1}, {0}, {1}, 1},       {1, 3, 7, 7, 3, 3, 3, {3}, {1}, {3}, 3},
  };
  for (const ConvCase& c : cases) {
    Tensor x = Tensor::Ones({c.n, c.cin, c.h, c.w});
    Tensor w = Tensor::Ones({c.cout, c.cin / c.groups, c.kh, c.kw});
    ConvOptions o{c.stride, c.padding, c.dilation, c.groups, std::nullopt};
    Tensor y = x.Conv2d(w, Tensor::Zeros({c.cout}), o);
    ASSERT_TRUE(y.ok()) << y.status();
    auto at = [](const IntVec& v, size_t i) { return v.size() == 1 ? v[0] : v[i]; };
    int64_t pt, pb, pl, pr;
    if (c.padding.size() == 4) {
      pt = c.padding[0], pb = c.padding[1], pl = c.padding[2], pr = c.padding[3];
    } else {
      pt = pb = at(c.padding, 0);
      pl = pr = at(c.padding, 1);
    }
    int64_t oh = OutDim(c.h, c.kh, at(c.stride, 0), pt, pb, at(c.dilation, 0));
    int64_t ow = OutDim(c.w, c.kw, at(c.stride, 1), pl, pr, at(c.dilation, 1));
    EXPECT_EQ(Sh(y), V({c.n, c.cout, oh, ow})) << "case cin=" << c.cin << " h=" << c.h << " k=" << c.kh;
    EXPECT_TRUE(ElementwiseSourcesMatch(y));
  }
}

TEST(TensorNnTest, ConvOtherRanksAndErrors) {
  // Conv1d and Conv3d shapes through the same code
  EXPECT_EQ(Sh(Tensor::Ones({2, 3, 10}).Conv2d(Tensor::Ones({4, 3, 3}), std::nullopt, {{2}, {1}, {1}, 1, {}})),
            V({2, 4, 5}));
  EXPECT_EQ(Sh(Tensor::Ones({1, 2, 4, 5, 6}).Conv2d(Tensor::Ones({3, 2, 2, 2, 2}))), V({1, 3, 3, 4, 5}));
  Tensor x = Tensor::Ones({1, 4, 8, 8});
  EXPECT_FALSE(x.Conv2d(Tensor::Ones({2, 3, 3, 3})).ok());                                  // channels
  EXPECT_FALSE(x.Conv2d(Tensor::Ones({3, 2, 3, 3}), std::nullopt, {{1}, {0}, {1}, 2, {}}).ok());  // cout % groups
  EXPECT_FALSE(x.Conv2d(Tensor::Ones({2, 4, 9, 9})).ok());                                  // kernel too large
  EXPECT_FALSE(x.Conv2d(Tensor::Ones({2, 4, 3, 3}), std::nullopt, {{0}, {0}, {1}, 1, {}}).ok());  // stride 0
  EXPECT_FALSE(x.Conv2d(Tensor::Ones({2, 4, 3, 3}), std::nullopt, {{1}, {1, 2, 3}, {1}, 1, {}}).ok());
  EXPECT_FALSE(x.Conv2d(Tensor::Ones({2, 4, 3, 3}), Tensor::Ones({3})).ok());               // bias
  EXPECT_FALSE(x.Conv2d(Tensor::Ones({2, 4, 3})).ok());                                     // rank
}

TEST(TensorNnTest, Pools) {
  Tensor x = Tensor::Ones({2, 3, 8, 6});
  EXPECT_EQ(Sh(x.MaxPool2d()), V({2, 3, 4, 3}));
  EXPECT_EQ(Sh(x.MaxPool2d({3, 3}, {{1}, {1}, {1}, true})), V({2, 3, 8, 6}));
  EXPECT_EQ(Sh(x.MaxPool2d({3, 2}, {{2, 1}, {0}, {1}, true})), V({2, 3, 3, 5}));
  EXPECT_EQ(Sh(x.MaxPool2d({2, 2}, {{1}, {0}, {2}, true})), V({2, 3, 6, 4}));
  EXPECT_EQ(Sh(x.AvgPool2d()), V({2, 3, 4, 3}));
  EXPECT_EQ(Sh(x.AvgPool2d({3, 3}, {{2}, {1}, {1}, false})), V({2, 3, 4, 3}));
  EXPECT_TRUE(HasOp(x.MaxPool2d({3, 3}, {{1}, {1}, {1}, true}), Op::WHERE));  // -inf padding
  EXPECT_EQ(Tensor::Ones({1, 1, 4, 4}, dtypes::kInt32).MaxPool2d().dtype(), dtypes::kInt32);
  EXPECT_EQ(Tensor::Ones({1, 1, 4, 4}, dtypes::kInt32).AvgPool2d().dtype(), dtypes::kFloat32);
  EXPECT_FALSE(x.MaxPool2d({9, 2}).ok());
}

TEST(TensorNnTest, SoftmaxAndNorms) {
  Tensor x = Tensor::Ones({4, 10});
  EXPECT_EQ(Sh(x.Softmax()), V({4, 10}));
  EXPECT_EQ(Sh(x.LogSoftmax(0)), V({4, 10}));
  EXPECT_EQ(Tensor::Ones({3}, dtypes::kInt32).Softmax().dtype(), dtypes::kFloat32);
  EXPECT_FALSE(x.Softmax(2).ok());
  EXPECT_EQ(Sh(x.LayerNorm(1, Tensor::Ones({10}), Tensor::Zeros({10}))), V({4, 10}));
  EXPECT_EQ(Sh(x.LayerNorm(2)), V({4, 10}));
  EXPECT_FALSE(x.LayerNorm(3).ok());
  EXPECT_FALSE(x.LayerNorm(1, Tensor::Ones({9})).ok());
  Tensor img = Tensor::Ones({2, 3, 5, 5});
  Tensor bn = img.BatchNorm(Tensor::Ones({3}), Tensor::Zeros({3}), Tensor::Zeros({3}), Tensor::Ones({3}));
  ASSERT_TRUE(bn.ok()) << bn.status();
  EXPECT_EQ(Sh(bn), V({2, 3, 5, 5}));
  EXPECT_FALSE(img.BatchNorm(std::nullopt, std::nullopt, Tensor::Zeros({4}), Tensor::Ones({3})).ok());
}

TEST(TensorNnTest, SparseCategoricalCrossentropy) {
  Tensor logits = Tensor::Ones({4, 10});
  Tensor labels = Tensor::Zeros({4}, dtypes::kInt32);
  Tensor loss = logits.SparseCategoricalCrossentropy(labels);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(Sh(loss), V({}));
  EXPECT_EQ(loss.dtype(), dtypes::kFloat32);
  EXPECT_EQ(Sh(logits.SparseCategoricalCrossentropy(labels, 0, 0.0, "none")), V({4}));
  EXPECT_EQ(Sh(logits.SparseCategoricalCrossentropy(labels, -1, 0.1, "sum")), V({}));
  EXPECT_FALSE(logits.SparseCategoricalCrossentropy(Tensor::Zeros({5}, dtypes::kInt32)).ok());
  EXPECT_FALSE(logits.SparseCategoricalCrossentropy(Tensor::Zeros({4})).ok());
  EXPECT_FALSE(logits.SparseCategoricalCrossentropy(labels, -1, 1.5).ok());
  EXPECT_FALSE(logits.SparseCategoricalCrossentropy(labels, -1, 0.0, "avg").ok());
}

}  // namespace
}  // namespace kiln
