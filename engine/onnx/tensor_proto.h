// Decoding ONNX TensorProto / SequenceProto / OptionalProto into host values (internal to engine/onnx, plus the
// file readers the conformance harness and the CLI use).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/onnx/host_array.h"
#include "engine/onnx/value.h"

namespace onnx {
class TensorProto;
}  // namespace onnx

namespace kiln::onnx {

// Where external data may be read from: files under `dir` only ("" = external data is an error).
struct ExternalDataPolicy {
  std::string dir;
};

// Decodes `proto` (typed fields, raw_data, or external data under `policy`). `what` names the tensor in errors
// ("initializer 'w'"). Errors: an unsupported dtype, data that does not cover the shape (or is longer), more than
// kMaxElements elements, an external path that escapes the model's folder or a range outside the file.
absl::StatusOr<HostArray> DecodeTensorProto(const ::onnx::TensorProto& proto, const ExternalDataPolicy& policy,
                                            const std::string& what);

// Reads a serialized TensorProto, SequenceProto or OptionalProto file (the backend test data format). `kind` is the
// declared graph value kind (ValueInfo::Kind) telling which message the file holds. The result's tensors carry host
// data only (host_constant false).
absl::StatusOr<Value> ReadValueFile(const std::string& path, int kind);

}  // namespace kiln::onnx
