// Value: what flows along an ONNX graph edge while the runner builds kiln Tensor ops for a model.
//
// A tensor value has a dtype and a shape and is held as a lazy kiln Tensor, as host data, or both:
//   * `host` set, `host_constant` true: the values are known without input data (initializers, Constant nodes,
//     Shape/Size results, and shape arithmetic the runner folded on the host). Ops that need concrete values
//     (Reshape's shape, Slice's starts, ...) read them; the Tensor is built from them only when a device op needs it.
//   * `host` set, `host_constant` false: a graph input's data. Reading it makes the trace depend on the input's
//     values (the runner records the input as a value input), so it is read only where an op needs concrete values.
//   * only `tensor`: computed on the device.
// A sequence holds its elements in `seq`; an empty optional (and an omitted optional input) is kind kNone.
#pragma once

#include <string>
#include <vector>

#include "engine/onnx/host_array.h"
#include "engine/tensor/tensor.h"

namespace kiln::onnx {

struct Value {
  enum class Kind : uint8_t { kNone, kTensor, kSequence };
  Kind kind = Kind::kNone;
  Tensor tensor;  // valid when materialized (kind kTensor)
  HostArrayPtr host;
  bool host_constant = false;
  bool persistent = false;  // `host` is owned by the model (initializer, Constant attribute): device copies are cached
  int input_index = -1;  // a graph input's position when this is (an alias of) that input's value
  std::vector<Value> seq;
  DType seq_dtype = dtypes::kFloat32;  // element dtype of a sequence (also when empty)

  bool is_tensor() const { return kind == Kind::kTensor; }
  bool is_sequence() const { return kind == Kind::kSequence; }
  bool is_none() const { return kind == Kind::kNone; }
  bool has_tensor() const { return tensor.ok(); }
  DType dtype() const { return host ? host->dtype : tensor.dtype(); }
  Shape shape() const { return host ? host->shape : tensor.shape(); }
  int64_t ndim() const { return static_cast<int64_t>(shape().size()); }

  static Value Of(Tensor t) {
    Value v;
    v.kind = Kind::kTensor;
    v.tensor = std::move(t);
    return v;
  }
  static Value Constant(HostArray a) {
    Value v;
    v.kind = Kind::kTensor;
    v.host = std::make_shared<const HostArray>(std::move(a));
    v.host_constant = true;
    return v;
  }
  static Value Constant(HostArrayPtr a) {
    Value v;
    v.kind = Kind::kTensor;
    v.host = std::move(a);
    v.host_constant = true;
    return v;
  }
  static Value Sequence(std::vector<Value> items, DType dtype) {
    Value v;
    v.kind = Kind::kSequence;
    v.seq = std::move(items);
    v.seq_dtype = dtype;
    return v;
  }
  static Value None() { return Value(); }
};

}  // namespace kiln::onnx
