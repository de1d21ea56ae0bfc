// GraphSpec: a tensor-level graph as plain data, the engine-facing mirror of kiln.v1.Graph
// (proto/kiln/v1/graph.proto). Transports fill it from the wire; Engine::Prepare validates it.
//
//   * `nodes` are in topological order: every `src` entry names an EARLIER node.
//   * `op` is an UPPER tinygrad op name from the allowlist (Engine::IsAllowedOp): "INPUT", "CONST",
//     the ALU ops, CAST, the movement ops, REDUCE_AXIS, CONTIGUOUS.
//   * `dtype` is a kiln dtype name ("float32", "int32", "bool", ...): the dtype of the node's value.
//   * INPUT: no sources, arg.kind kInt = index into `inputs`. CONST: no sources, a scalar arg
//     (kInt, kFloat or kBool), shape (); ALU ops broadcast their sources numpy-style.
//   * RESHAPE/EXPAND: arg.ints = the new shape; PERMUTE: the axis order; PAD/SHRINK: flattened
//     (begin, end) pairs per axis; FLIP: 0/1 per axis; REDUCE_AXIS: arg.kind kReduce.
//   * input shapes may hold -1: that dim is bound per run from the given tensor.
// Plain structs: copyable, no engine types, no invariants until Prepare checks them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::api {

struct NodeArgSpec {
  enum class Kind { kNone, kInt, kFloat, kBool, kString, kInts, kReduce };
  Kind kind = Kind::kNone;
  int64_t int_value = 0;
  double float_value = 0.0;
  bool bool_value = false;
  std::string string_value;
  std::vector<int64_t> ints;        // kInts
  std::string reduce_op;            // kReduce: "ADD", "MAX", "MUL"
  std::vector<int64_t> reduce_axes; // kReduce
};

struct NodeSpec {
  std::string op;
  std::string dtype;
  std::vector<uint32_t> src;
  NodeArgSpec arg;
};

struct InputSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;  // -1 = bound per run
  // Empty, or one name per dim ("" = unnamed; a name only on a -1 dim): the dims of one name, across the inputs,
  // carry one size per run (ONNX's dim_param).
  std::vector<std::string> dim_names = {};
};

struct OutputSpec {
  std::string name;
  uint32_t node = 0;
};

struct GraphSpec {
  std::string name;  // informational only
  std::vector<InputSpec> inputs;
  std::vector<NodeSpec> nodes;
  std::vector<OutputSpec> outputs;
};

// Limits Prepare and Run enforce; violations are INVALID_ARGUMENT naming the field and the limit.
struct GraphLimits {
  int64_t max_nodes = 1 << 20;
  int64_t max_inputs = 1 << 12;   // graph inputs (and tensors bound per run)
  int64_t max_outputs = 1 << 12;
  int max_rank = 64;
  int64_t max_dim = int64_t{1} << 31;
  int64_t max_elements = int64_t{1} << 28;  // per node value (inputs, intermediates, outputs)
};

}  // namespace kiln::api
