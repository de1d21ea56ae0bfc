// Block-quantized linear layers as llama.cpp computes them on CPUs: the activations are quantized to 8 bits per
// block of 32 as well, and each block's 32 products are one integer dot product, scaled afterwards.
//
// For a weight of 32-wide blocks (Q4_0, Q4_1, Q8_0) whose block b of row n holds d[n, b] * (q + offset) + m[n, b]
// with q unsigned, and an activation row x quantized per block (llama.cpp's quantize_row_q8_1: amax = max |x|,
// dx = fp16(amax / 127), qx = round-half-even(x * 127 / amax) as int8, sx = fp16(amax / 127 * sum qx)):
//
//   y[r, n] = sum_b dx[r, b] * d[n, b] * float(sum_i qx[r, 32b + i] * q[n, 32b + i] + offset * sum_i qx[r, 32b + i])
//             + m[n, b] * sx[r, b]
//
// The inner sum is exact in int32 and runs on the CPU's integer tensor core (codegen/tc.cc: AVX-512 VNNI
// vpdpbusd, 64 multiply-adds per instruction) where a float matmul would decode every weight and multiply-add in
// float; Q4_0 and Q8_0 (offset -8, -128; no m) are then exact integer dot products of the 8-bit values, as in
// llama.cpp. The weights keep their 4 bits per value in memory: two 4-bit values per byte, in the order the tensor
// core reads them (see LoadBlockWeight), unpacked by a shift and a mask in the kernel.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/nn/state/gguf.h"
#include "engine/tensor/tensor.h"

namespace kiln::llm {

struct BlockWeight {
  Tensor q;  // uint8 [N, K]: 0..15 (Q4_0, Q4_1) or int8 + 128 (Q8_0), a view of the packed buffer
  Tensor d;  // float32 [N, K / 32]: the block scales (the file's fp16 values, kept as fp16 in memory)
  Tensor m;  // float32 [N, K / 32]: Q4_1's block mins (has_min), likewise
  bool has_min = false;
  int offset = 0;  // -8 (Q4_0), -128 (Q8_0), 0 (Q4_1)
  int64_t rows() const { return q.size(0); }
};

// The 2-D tensors `names` of one 32-wide block type (Q4_0, Q4_1, Q8_0) and one row length K, stacked by rows into
// one [N, K] weight (as GgufModel::LoadRows). The values are packed at load, 16 rows at a time: Q8_0's as
// [N/16][K/4][4][16] bytes (a tensor-core B operand, 4 k of 16 rows, is one 64-byte run), Q4's as [N/16][K/8][4][16]
// bytes whose low nibbles are the values of k-group 2j and high nibbles k-group 2j + 1, so one 64-byte load gives
// two operands. InvalidArgument when a type is not one of the three, the types or row lengths differ, or N is not a
// multiple of 16; NotFound for an unknown name.
absl::StatusOr<BlockWeight> LoadBlockWeight(const nn::GgufModel& gguf, const std::vector<std::string_view>& names,
                                            const std::string& device);

// x [R, K] (float32) times w^T: [R, N] float32, with x quantized per block as described above (three small
// kernels: the block maxima, the 8-bit values, their sums) and the product one kernel whose inner sums take the
// tensor core.
Tensor BlockLinear(const Tensor& x, const BlockWeight& w);

}  // namespace kiln::llm
