// BlockLinear (engine/llm/block_linear.h) on SmolLM2's own Q4_1 and Q8_0 weights against a direct loop over the
// file's raw blocks: the activations quantized per block of 32 as llama.cpp's quantize_row_q8_1 does, each block's
// products summed in int64, the scales applied in double. On the CPU (the tensor core where the host has AVX-512
// VNNI) and on INTERP. The differences allowed are float rounding of the scaled sums (the 8-bit values and block
// sums are exact).
#include "engine/llm/block_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/nn/state/gguf.h"
#include "engine/realize/realize.h"
#include "gtest/gtest.h"

namespace kiln::llm {
namespace {

float Half(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

// y [R, N] for x [R, K] and the GGUF tensor `name` ([N, K], Q4_0 / Q4_1 / Q8_0), straight from its blocks.
std::vector<double> Reference(const nn::GgufModel& g, const std::string& name, const std::vector<float>& x,
                              int64_t R) {
  const nn::GgufTensorInfo* t = g.file().FindTensor(name);
  const int64_t N = t->shape()[0], K = t->shape()[1], nb = K / 32, bb = nn::GgmlBlockBytes(t->type);
  const std::string_view raw = *g.RawBytes(name);
  auto f16 = [](const unsigned char* p) { return nn::GgufHalfToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8))); };
  std::vector<double> y(R * N, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x.data() + r * K + b * 32;
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(xb[i]));
      const float inv = amax == 0 ? 0.0f : 127.0f / amax;
      int q[32];
      int64_t qsum = 0;
      for (int i = 0; i < 32; ++i) qsum += q[i] = static_cast<int>(std::nearbyint(xb[i] * inv));  // half to even
      const double dx = Half(amax / 127.0f), sx = Half(amax / 127.0f * static_cast<float>(qsum));
      for (int64_t n = 0; n < N; ++n) {
        const auto* blk = reinterpret_cast<const unsigned char*>(raw.data() + (n * nb + b) * bb);
        int64_t dot = 0;
        for (int i = 0; i < 32; ++i) {
          int w;
          if (t->type == nn::GgmlType::kQ8_0) w = static_cast<int8_t>(blk[2 + i]);
          else {
            const int at = t->type == nn::GgmlType::kQ4_1 ? 4 : 2;
            w = i < 16 ? blk[at + i] & 15 : blk[at + i - 16] >> 4;
            if (t->type == nn::GgmlType::kQ4_0) w -= 8;
          }
          dot += static_cast<int64_t>(q[i]) * w;
        }
        const double m = t->type == nn::GgmlType::kQ4_1 ? f16(blk + 2) : 0.0;
        y[r * N + n] += dx * f16(blk) * static_cast<double>(dot) + m * sx;
      }
    }
  }
  return y;
}

TEST(BlockLinearTest, SmolLM2WeightsMatchAnIntegerLoopOverTheRawBlocks) {
  backends::RegisterAllBackends();
  absl::StatusOr<std::unique_ptr<nn::GgufModel>> g = nn::GgufModel::Open(KILN_SMOLLM2_GGUF);
  ASSERT_TRUE(g.ok()) << g.status();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::string device : {"CPU", "INTERP"}) {
    RealizeContext ctx;
    ScopedRealizeContext scope(ctx);
    // Q4_1 [576, 576] and [576, 1536]; Q8_0 [49152, 576] (the output embedding, on the CPU only: the interpreter's
    // time).
    // And two stacked by rows (the gate and up projections, as LlamaModel multiplies them: one [3072, 576] weight).
    const std::vector<std::vector<std::string>> weights = {{"blk.0.attn_q.weight"},
                                                           {"blk.3.ffn_down.weight"},
                                                           {"blk.1.ffn_gate.weight", "blk.1.ffn_up.weight"},
                                                           {"token_embd.weight"}};
    for (const std::vector<std::string>& names : weights) {
      const std::string name = names[0];
      if (device == "INTERP" && name == "token_embd.weight") continue;
      absl::StatusOr<BlockWeight> w =
          LoadBlockWeight(**g, std::vector<std::string_view>(names.begin(), names.end()), device);
      ASSERT_TRUE(w.ok()) << w.status();
      const int64_t N = w->rows(), K = w->q.size(1);
      for (int64_t R : {1, 3, 8, 16, 29, 32, 64}) {
        // (The interpreter's time, and the reference loop's over the output embedding: the CPU takes every tile
        // shape on the projections.)
        if ((device == "INTERP" || name == "token_embd.weight") && R > 8) continue;
        std::vector<float> x(R * K);
        for (float& v : x) v = normal(rng);
        x[5] = 0;  // an exact zero, and a block of zeros (amax 0)
        if (R > 1) std::fill(x.begin() + K, x.begin() + K + 32, 0.0f);
        absl::StatusOr<std::vector<float>> got = BlockLinear(Tensor::FromVector(x, {R, K}, device), *w).ToVector<float>();
        ASSERT_TRUE(got.ok()) << got.status();
        std::vector<double> want(R * N);
        int64_t at = 0;  // the rows of the stacked tensors before this one
        for (const std::string& part : names) {
          const std::vector<double> y = Reference(**g, part, x, R);
          const int64_t n = static_cast<int64_t>(y.size()) / R;
          for (int64_t r = 0; r < R; ++r) std::copy(y.begin() + r * n, y.begin() + (r + 1) * n, want.begin() + r * N + at);
          at += n;
        }
        ASSERT_EQ(got->size(), want.size());
        double top = 0;
        for (double v : want) top = std::max(top, std::abs(v));
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR((*got)[i], want[i], 1e-5 * top) << device << " " << name << " R=" << R << " element " << i;
      }
    }
  }
}

TEST(BlockLinearTest, RefusesWhatItCannotPack) {
  absl::StatusOr<std::unique_ptr<nn::GgufModel>> g = nn::GgufModel::Open(KILN_SMOLLM2_GGUF);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(LoadBlockWeight(**g, {"blk.0.attn_norm.weight"}, "CPU").status().code(),
            absl::StatusCode::kInvalidArgument);  // F32
  EXPECT_EQ(LoadBlockWeight(**g, {"blk.0.attn_q.weight", "blk.0.ffn_down.weight"}, "CPU").status().code(),
            absl::StatusCode::kInvalidArgument);  // row lengths differ
  EXPECT_EQ(LoadBlockWeight(**g, {"no.such.weight"}, "CPU").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::llm
