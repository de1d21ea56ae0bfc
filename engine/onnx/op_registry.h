// The ONNX operator table: one OpDef per (domain, op, opset range) kiln implements, each a composition of kiln
// Tensor ops (no per-op kernels). Rules as data: the table is built once from an explicit list of registration
// functions (one per op family file) and looked up by LoadModel (every node must resolve) and by the runner.
//
// An OpDef lists the attributes its implementation reads: a node setting any other attribute is a load error, so a
// model never runs with an attribute kiln would silently ignore. `check` validates attribute values that kiln does
// not support (e.g. Resize antialias=1) at load time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/onnx/model.h"
#include "engine/onnx/value.h"

namespace kiln::onnx {

class OpContext;  // runner.h

using OpImpl = std::function<absl::StatusOr<std::vector<Value>>(OpContext&)>;

struct OpDef {
  std::string domain;  // "" = ai.onnx
  std::string op;
  int64_t since = 1;                // lowest opset version this entry implements
  int64_t until = kMaxOnnxOpset;    // highest, inclusive
  std::vector<std::string> attrs;   // attribute names the implementation reads
  OpImpl impl;
  // Load-time check of attribute values; returns InvalidArgument("<what is unsupported>") or OK.
  std::function<absl::Status(const Node&)> check;
};

using OpTable = std::vector<OpDef>;

// Appends an ai.onnx entry.
inline void Reg(OpTable* t, const char* op, int64_t since, int64_t until, std::vector<std::string> attrs, OpImpl impl,
                std::function<absl::Status(const Node&)> check = nullptr) {
  t->push_back(OpDef{"", op, since, until, std::move(attrs), std::move(impl), std::move(check)});
}

// The entry for (domain, op) at `opset`, or nullptr. `domain` "ai.onnx" is the same as "".
const OpDef* FindOp(std::string_view domain, std::string_view op, int64_t opset);
// Whether any entry exists for (domain, op) at some opset (to tell "unknown op" from "unsupported opset").
bool KnowsOp(std::string_view domain, std::string_view op);
// Every entry, in registration order.
const OpTable& AllOps();

// Registration functions, one per op family file (called in this order by op_registry.cc).
void RegisterElementwiseOps(OpTable* table);  // ops_elementwise.cc
void RegisterMathOps(OpTable* table);         // ops_math.cc
void RegisterMovementOps(OpTable* table);     // ops_movement.cc
void RegisterReduceOps(OpTable* table);       // ops_reduce.cc
void RegisterNnOps(OpTable* table);           // ops_nn.cc
void RegisterIndexOps(OpTable* table);        // ops_index.cc
void RegisterMiscOps(OpTable* table);         // ops_misc.cc
void RegisterAttentionOps(OpTable* table);    // ops_attention.cc
void RegisterExtraOps(OpTable* table);        // ops_extra.cc
void RegisterQuantOps(OpTable* table);        // ops_quant.cc
void RegisterRnnOps(OpTable* table);          // ops_rnn.cc

}  // namespace kiln::onnx
