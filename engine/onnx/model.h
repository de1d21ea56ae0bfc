// ONNX model import: a ModelProto (parsed with the real ONNX schema, compiled from the onnx==1.22.0 wheel's
// onnx-ml.proto) decoded into a validated, immutable Model that engine/onnx/runner.h turns into kiln Tensor ops.
//
// LoadModel checks everything that can be checked without input data, so that a model which loads fails later only
// on shape errors of a particular input:
//   * the file parses as a ModelProto (a truncated or corrupt file is an error, never a crash);
//   * IR version 3..kMaxIrVersion; every opset import of a domain kiln knows lies in its range (ai.onnx 1..27);
//   * every node's (domain, op) has a kiln implementation for the imported opset, and every attribute the node sets
//     is one that implementation understands (OpDef, op_registry.h) -- the error names the node, op, opset and what
//     is missing; nested graphs (If/Loop/Scan bodies) are checked the same way;
//   * the graph is acyclic and every node input is produced by an earlier node, a graph input, an initializer or an
//     enclosing graph (nodes are sorted topologically; a cycle is an error naming a node on it);
//   * every initializer and graph input/output has a dtype kiln has (no string, complex, float8, int4, ...), its
//     dims are non-negative with at most kMaxElements elements, and an initializer's data covers its shape;
//   * external data (TensorProto.data_location = EXTERNAL) is read from a file named relative to the model's folder:
//     an absolute path, a path with a `..` component, or one whose real path leaves the folder (a symlink) is an
//     error, as is an offset/length outside the file.
// Model-local functions (ModelProto.functions) are not expanded yet: a node calling one fails as an unknown op.
//
// Thread safety: a loaded Model is immutable and may be run from many threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dtype/dtype.h"
#include "engine/onnx/host_array.h"

namespace kiln::onnx {

inline constexpr int64_t kMinIrVersion = 3;
inline constexpr int64_t kMaxIrVersion = 13;   // onnx 1.22
inline constexpr int64_t kMaxOnnxOpset = 27;   // ai.onnx in onnx 1.22
inline constexpr int64_t kMaxElements = int64_t{1} << 34;  // per tensor (initializers, declared inputs)

struct Graph;
struct OpDef;

struct Attribute {
  enum class Type : uint8_t { kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kTensors, kGraphs,
                              kOther };
  std::string name;
  Type type = Type::kOther;
  double f = 0.0;
  int64_t i = 0;
  std::string s;
  HostArrayPtr t;
  std::shared_ptr<const Graph> g;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<HostArrayPtr> tensors;
  std::vector<std::shared_ptr<const Graph>> graphs;
};

struct Node {
  std::string name;    // may be empty in the file; then "#<index>" for messages
  std::string op;      // op_type
  std::string domain;  // "" for ai.onnx
  int64_t opset = 0;   // the opset version imported for `domain`
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an omitted optional output
  std::vector<Attribute> attributes;
  const OpDef* def = nullptr;  // resolved at load

  const Attribute* Find(const std::string& attr) const;
  // "node 'name' (Op, opset N)" for messages.
  std::string Describe() const;
};

// A declared graph input or output. dims[i] is the static size, or -1 with dim_params[i] naming a symbolic dim
// ("" when the dim is unknown and unnamed). has_shape is false when the file declares no shape at all.
struct ValueInfo {
  enum class Kind : uint8_t { kTensor, kSequence, kOptional, kOther };
  std::string name;
  Kind kind = Kind::kTensor;
  DType dtype = dtypes::kFloat32;  // the tensor (or element) dtype
  int32_t onnx_type = 1;           // TensorProto.DataType of the tensor (or element)
  bool has_shape = false;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_params;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;  // topologically sorted
  std::map<std::string, HostArrayPtr> initializers;
  std::vector<ValueInfo> inputs;  // graph inputs without an initializer of the same name
  std::vector<ValueInfo> outputs;
  // Inputs that also have an initializer (a default the caller may override, IR < 4 style).
  std::vector<ValueInfo> overridable_inputs;
};

struct Model {
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  std::string producer_name;
  std::string producer_version;
  std::shared_ptr<const Graph> graph;
  // Every (domain, op) the graph uses, nested graphs included, with the opset it is imported at.
  struct OpUse {
    std::string domain;
    std::string op;
    int64_t opset = 0;
    int count = 0;
  };
  std::vector<OpUse> op_uses;
};

struct LoadOptions {
  // When false, LoadModel checks only the container (parse, IR version, graph structure, data) and records the ops
  // without requiring kiln to implement them: `kiln onnx inspect` uses it to list what is missing.
  bool require_supported_ops = true;
};

// Reads and validates `path`. Errors are InvalidArgument (or NotFound for a missing file) and never name more of
// the file system than the model's own file names.
absl::StatusOr<std::shared_ptr<const Model>> LoadModel(const std::string& path, const LoadOptions& options = {});
// The same from bytes; external data is resolved against `base_dir` ("" = external data is an error).
absl::StatusOr<std::shared_ptr<const Model>> LoadModelFromBytes(const std::string& bytes, const std::string& base_dir,
                                                                const LoadOptions& options = {});

// The unsupported (domain, op, opset) uses of a model loaded with require_supported_ops = false, one message each.
std::vector<std::string> UnsupportedOps(const Model& model);

// ONNX TensorProto.DataType <-> kiln DType. OnnxToDType fails for types kiln lacks (string, complex, float8, int4,
// ...) with a message naming the type.
absl::StatusOr<DType> OnnxToDType(int32_t onnx_type);
int32_t DTypeToOnnx(DType dtype);
// "FLOAT", "INT64", "FLOAT8E4M3FN", ... ("UNDEFINED(<n>)" for unknown numbers).
std::string OnnxTypeName(int32_t onnx_type);

}  // namespace kiln::onnx
