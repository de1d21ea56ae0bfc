// BlockLinear (block_linear.h).
#include "engine/llm/block_linear.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace kiln::llm {
namespace {

constexpr int64_t kBlock = 32;
constexpr int64_t kLanes = 16;  // the tensor core's columns (here: weight rows) per operand

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("llama: ", what)); }

}  // namespace

absl::StatusOr<BlockWeight> LoadBlockWeight(const nn::GgufModel& gguf, const std::vector<std::string_view>& names,
                                            const std::string& device) {
  if (names.empty()) return Bad("a block weight of no tensor");
  const nn::GgufTensorInfo* first = nullptr;
  int64_t n_rows = 0;
  for (std::string_view name : names) {
    const nn::GgufTensorInfo* t = gguf.file().FindTensor(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat("gguf: no tensor named ", std::string(name)));
    if (first == nullptr) first = t;
    if (t->type != nn::GgmlType::kQ4_0 && t->type != nn::GgmlType::kQ4_1 && t->type != nn::GgmlType::kQ8_0)
      return Bad(absl::StrCat(t->name, " is ", nn::GgmlTypeName(t->type), ", not Q4_0, Q4_1 or Q8_0"));
    if (t->shape().size() != 2 || t->type != first->type || t->shape()[1] != first->shape()[1])
      return Bad(absl::StrCat(t->name, ": the tensors of one block weight must be 2-D with one type and row length"));
    n_rows += t->shape()[0];
  }
  const nn::GgmlType type = first->type;
  const int64_t N = n_rows, K = first->shape()[1], nb = K / kBlock;
  if (N % kLanes != 0) return Bad(absl::StrCat(first->name, ": ", N, " rows is not a multiple of ", kLanes));
  const bool q4 = type != nn::GgmlType::kQ8_0;
  const int64_t bb = nn::GgmlBlockBytes(type);
  const int64_t q_at = type == nn::GgmlType::kQ4_1 ? 4 : 2;  // after d (and m)
  std::vector<uint8_t> packed(static_cast<size_t>(q4 ? N * K / 2 : N * K), 0);
  // The block scales and mins as the file holds them, fp16, stored [K/32, N]: a tensor-core tile's 16 rows read one
  // 32-byte run per block. (As float32 they were a third of a Q4_1 product's bytes, which one slot's step is bound by.)
  std::vector<uint16_t> d(static_cast<size_t>(N * nb)), m(type == nn::GgmlType::kQ4_1 ? N * nb : 0);
  int64_t n = 0;
  for (std::string_view name : names) {
    absl::StatusOr<std::string_view> raw = gguf.RawBytes(name);
    if (!raw.ok()) return raw.status();
    const int64_t rows = static_cast<int64_t>(raw->size()) / (nb * bb);
    for (int64_t r = 0; r < rows; ++r, ++n) {
      for (int64_t b = 0; b < nb; ++b) {
        const auto* blk = reinterpret_cast<const unsigned char*>(raw->data() + (r * nb + b) * bb);
        d[b * N + n] = static_cast<uint16_t>(blk[0] | (blk[1] << 8));
        if (!m.empty()) m[b * N + n] = static_cast<uint16_t>(blk[2] | (blk[3] << 8));
        for (int64_t i = 0; i < kBlock; ++i) {
          const int64_t k = b * kBlock + i, g = k / 4;
          // Q4: a block's low nibbles are its elements 0..15, the high nibbles 16..31.
          const uint8_t v = q4 ? static_cast<uint8_t>(i < 16 ? blk[q_at + i] & 15 : blk[q_at + i - 16] >> 4)
                               : static_cast<uint8_t>(static_cast<int8_t>(blk[q_at + i]) + 128);
          if (q4) {
            packed[((n / kLanes) * (K / 8) + g / 2) * 64 + (k % 4) * kLanes + n % kLanes] |=
                static_cast<uint8_t>(v << (4 * (g % 2)));
          } else {
            packed[((n / kLanes) * (K / 4) + g) * 64 + (k % 4) * kLanes + n % kLanes] = v;
          }
        }
      }
    }
  }
  BlockWeight w;
  if (q4) {
    // [N/16, K/8, 1, 4, 16] bytes -> [N/16, K/8, 2, 4, 16] nibbles (low for k-group 2j, high for 2j + 1), chosen by
    // a Where on a [1, 1, 2, 1, 1] selector (a padded constant, as GgufModel's BlockNibbles).
    const Tensor bytes = Tensor::FromVector(packed, {N / kLanes, K / 8, 1, 4, kLanes}, device);
    const Tensor high = Tensor::Full({1}, true, dtypes::kBool, device).Pad({{1, 0}}).Reshape({1, 1, 2, 1, 1});
    w.q = high.Where(bytes.Rshift(4), bytes.BitwiseAnd(Scalar(int64_t{15})))
              .Reshape({N / kLanes, K / 4, 4, kLanes})
              .Permute({0, 3, 1, 2})
              .Reshape({N, K});
    w.offset = type == nn::GgmlType::kQ4_0 ? -8 : 0;
  } else {
    w.q = Tensor::FromVector(packed, {N / kLanes, K / 4, 4, kLanes}, device).Permute({0, 3, 1, 2}).Reshape({N, K});
    w.offset = -128;
  }
  auto transposed = [&](const std::vector<uint16_t>& v) {
    return Tensor::FromHost(v.data(), dtypes::kFloat16, {nb, N}, device).Cast(dtypes::kFloat32).Transpose();
  };
  w.d = transposed(d);
  if (!m.empty()) {
    w.m = transposed(m);
    w.has_min = true;
  }
  return w;
}

Tensor BlockLinear(const Tensor& x, const BlockWeight& w) {
  const int64_t R = x.size(0), K = x.size(1), nb = K / kBlock, N = w.rows();
  const Tensor xb = x.Reshape({R, nb, kBlock});
  const Tensor amax = xb.Abs().Max(-1, /*keepdim=*/true);  // [R, nb, 1]
  const Tensor inv = amax.Eq(Scalar(0.0)).Where(Scalar(0.0), 127.0f / amax);
  const Tensor qx = (xb * inv).Round().Cast(dtypes::kInt8).Contiguous();  // [R, nb, 32]
  const Tensor scale = amax / 127.0f;  // [R, nb, 1]
  // Each block's two scalars, rounded to fp16 as llama.cpp's blocks hold them, in one small buffer: dx, and sx (with
  // mins) or the sum of the 8-bit values (with an offset; exact in float32). Left to fuse into the product, every
  // output tile's per-block epilogue redid the conversions for each row: half the instructions of the 8-slot gate/up
  // kernel, whose inner loop is 2 loads, 3 unpacking ops and 16 vpdpbusd per two k-slices. One kernel: the block sums
  // are taken once per channel (the 8-bit values broadcast before the sum, not the sum after it, which the scheduler
  // would store on its own) and a [1, 1, 2] selector (a padded constant) picks dx or the second scalar.
  const Tensor qsum = qx.Reshape({R, nb, 1, kBlock}).Expand({R, nb, 2, kBlock}).Cast(dtypes::kInt32).Sum(-1);
  const Tensor second = w.has_min ? (scale * qsum.Cast(dtypes::kFloat32)).Cast(dtypes::kFloat16).Cast(dtypes::kFloat32)
                                  : qsum.Cast(dtypes::kFloat32);  // [R, nb, 2]
  const Tensor second_channel =
      Tensor::Full({1}, true, dtypes::kBool, x.device()).Pad({{1, 0}}).Reshape({1, 1, 2});  // [false, true]
  const Tensor stats =
      second_channel.Where(second, scale.Cast(dtypes::kFloat16).Cast(dtypes::kFloat32)).Contiguous();  // [R, nb, 2]
  auto stat = [&](int64_t i) { return stats.Shrink({{0, R}, {0, nb}, {i, i + 1}}).Reshape({R, 1, nb}); };
  Tensor isum = (qx.Reshape({R, 1, nb, kBlock}).Cast(dtypes::kInt32) *
                 w.q.Reshape({1, N, nb, kBlock}).Cast(dtypes::kInt32))
                    .Sum(-1);  // [R, N, nb]
  if (w.offset != 0) isum = isum + stat(1).Cast(dtypes::kInt32) * Scalar(int64_t{w.offset});
  Tensor term = isum.Cast(dtypes::kFloat32) * (stat(0) * w.d.Reshape({1, N, nb}));
  if (w.has_min) term = term + w.m.Reshape({1, N, nb}) * stat(1);
  return term.Sum(-1);
}

}  // namespace kiln::llm
