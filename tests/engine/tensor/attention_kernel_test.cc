// Scaled-dot-product attention at the shapes of all-MiniLM-L6-v2 (batch 2, 12 heads of 32, sequence 8/64/128): the
// softmax of the scores times the values plus their bias, in the head-split layout the ONNX import produces
// (values [B, S, 384] + bias, reshaped to [B, S, 12, 32] and permuted to [B, 12, S, 32]). Issue #17: on an AVX-512
// machine the CPU backend compiled the fused "softmax @ (V + b)" kernel with LLVM 19's SLP vectorizer at 512-bit
// width, which rewrote it wrongly (LLVM's opt-bisect names SLPVectorizerPass; the same IR at -O0, or vectorized at
// 256 bits, is right), and MiniLM's embeddings came out with cosine 0.72-0.91 against onnxruntime. The expected values
// here are plain float64 loops over the inputs; every executing backend is checked.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

constexpr int64_t kBatch = 2, kHeads = 12, kHeadDim = 32, kHidden = kHeads * kHeadDim;

class AttentionKernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(GetParam()).ok())
      GTEST_SKIP() << GetParam() << " backend not available";
  }
};

std::vector<float> Uniform(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// out[b, h, i, d] = sum_j softmax_j(scores[b, h, i, :]) * (values[b, j, h * 32 + d] + bias[h * 32 + d])
std::vector<double> Reference(const std::vector<float>& scores, const std::vector<float>& values,
                              const std::vector<float>& bias, int64_t seq) {
  std::vector<double> out(kBatch * kHeads * seq * kHeadDim);
  std::vector<double> p(seq);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        const float* row = &scores[((b * kHeads + h) * seq + i) * seq];
        double mx = row[0], sum = 0;
        for (int64_t j = 1; j < seq; ++j) mx = std::max<double>(mx, row[j]);
        for (int64_t j = 0; j < seq; ++j) sum += p[j] = std::exp(row[j] - mx);
        for (int64_t d = 0; d < kHeadDim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < seq; ++j)
            acc += p[j] / sum *
                   (static_cast<double>(values[(b * seq + j) * kHidden + h * kHeadDim + d]) +
                    bias[h * kHeadDim + d]);
          out[((b * kHeads + h) * seq + i) * kHeadDim + d] = acc;
        }
      }
  return out;
}

TEST_P(AttentionKernelTest, SoftmaxTimesBiasedValuesAtMiniLmShapes) {
  for (int64_t seq : {8, 64, 128}) {
    const auto scores =
        Uniform(kBatch * kHeads * seq * seq, -4.0f, 4.0f, 17 + static_cast<uint32_t>(seq));
    const auto values =
        Uniform(kBatch * seq * kHidden, -2.0f, 2.0f, 29 + static_cast<uint32_t>(seq));
    const auto bias = Uniform(kHidden, -1.0f, 1.0f, 31);
    const std::vector<double> want = Reference(scores, values, bias, seq);

    Tensor s = Tensor::FromVector(scores, {kBatch, kHeads, seq, seq}, GetParam());
    Tensor v = Tensor::FromVector(values, {kBatch, seq, kHidden}, GetParam());
    Tensor bv = Tensor::FromVector(bias, {kHidden}, GetParam());
    Tensor vh = (v + bv).Reshape({kBatch, seq, kHeads, kHeadDim}).Permute({0, 2, 1, 3});
    auto got = s.Softmax(-1).Matmul(vh).ToVector<float>();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want.size());
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::abs((*got)[i] - want[i]) > 1e-4 * (std::abs(want[i]) + 1.0)) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++bad;
      }
    }
    EXPECT_EQ(bad, 0) << "seq " << seq << ": " << bad << " of " << want.size()
                      << " outputs wrong; first at " << first << ": got "
                      << (*got)[first < 0 ? 0 : first] << ", want " << want[first < 0 ? 0 : first];
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionKernelTest, ::testing::Values("CPU", "INTERP", "CL"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
