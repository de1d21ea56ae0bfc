// HostArray: a tensor value held on the host (an initializer, a Constant, a Shape result, a graph input's data, or
// the result of folding shape arithmetic on the host). The bytes are row-major and in the dtype's own little-endian
// layout (bool is one byte 0/1, float16/bfloat16 are their 16-bit patterns), so they can be handed to
// Tensor::FromHost unchanged. Immutable once built; shared between threads through shared_ptr<const HostArray>.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dtype/dtype.h"
#include "engine/uop/uop.h"

namespace kiln::onnx {

struct HostArray {
  DType dtype = dtypes::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;  // numel() * dtype.ItemSize()

  int64_t numel() const;
  // Element i converted to double / int64 (floats truncate toward zero for GetInt; bool is 0/1).
  double GetDouble(int64_t i) const;
  int64_t GetInt(int64_t i) const;
  std::vector<int64_t> Ints() const;
  std::vector<double> Doubles() const;
  // Stores v converted to the dtype (ints wrap as a C cast would after truncation; floats round to nearest).
  void SetDouble(int64_t i, double v);
  void SetInt(int64_t i, int64_t v);

  // A zero-filled array.
  static HostArray Zeros(DType dtype, Shape shape);
  static HostArray FromInts(DType dtype, Shape shape, const std::vector<int64_t>& values);
  static HostArray FromDoubles(DType dtype, Shape shape, const std::vector<double>& values);
};

using HostArrayPtr = std::shared_ptr<const HostArray>;

// "(2, 3)"
std::string ShapeString(const Shape& shape);
// Element count of `shape`, or an error when a dim is negative or the product exceeds `limit`.
absl::StatusOr<int64_t> CheckedNumel(const Shape& shape, int64_t limit);

// IEEE binary16 and bfloat16 conversions (round to nearest even).
uint16_t DoubleToHalf(double v);
double HalfToDouble(uint16_t h);
uint16_t DoubleToBFloat16(double v);
double BFloat16ToDouble(uint16_t b);

}  // namespace kiln::onnx
