// Spec verifier: IR legality rules written as PatternMatchers (tinygrad's spec.py).
//
// Each spec is a PatternMatcher whose first matching rule decides a node's legality; a node that
// no rule accepts is illegal. Verification visits every node reachable from the root in toposort
// order (children first) and reports the first offender.
//
// Tensor-level spec (graphs from the Tensor API, the wire, or tensor-level passes):
//   movement ops' args agree with the source's shape (RESHAPE same numel, PERMUTE a permutation,
//   EXPAND same rank and only 1 -> n, PAD/SHRINK 2 ints per dim in range, FLIP 0/1 per dim);
//   REDUCE_AXIS arg has a reduce op (ADD/MUL/MAX) and sorted, unique, in-range axes; ALU sources
//   agree in dtype (comparisons -> bool, WHERE takes a bool condition); BUFFER has (UNIQUE, DEVICE)
//   sources and an int element count; CONST's arg kind matches its dtype; DEVICE has a string arg;
//   no internal-only ops (CUSTOM/CUSTOMI) and no kernel-only ops (PARAM, INDEX, LOAD, STORE, ...).
// Kernel-level spec (a kernel's SINK after lowering):
//   PARAM has a pointer dtype and an int slot; INDEX(ptr, index-or-int idx
//   [, bool gate]) -> ptr of the same base; LOAD's first source is an INDEX and its dtype is the
//   pointee; STORE(INDEX, value[, bool gate]) is void; RANGE's end is index/int and its dtype
//   matches; END's last source is a RANGE; DEFINE_REG/DEFINE_LOCAL have reg/local pointer
//   dtypes; ALU dtype rules as above; no tensor-only ops.
#pragma once

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/uop/uop.h"

namespace kiln {

// OK, or InvalidArgument "tensor spec: <OP> <dtype>: <why>" for the first offending node.
absl::Status VerifyTensorGraph(const UOpPtr& root);
// OK, or InvalidArgument "kernel spec: <OP> <dtype>: <why>" for the first offending node.
absl::Status VerifyKernel(const UOpPtr& sink);

// The nodes one sequence of verifications has accepted. A node's verdict depends only on the immutable subgraph
// below it, so codegen, which verifies the kernel after each of its passes, checks only the nodes a pass made: the
// walk stops at an accepted node. Holds a reference to each, so no accepted address is reused by a new node.
class SpecMemo {
 public:
  bool Accepted(const UOp* u) const { return accepted_.contains(u); }
  void Accept(const UOp* u) {
    if (accepted_.insert(u).second) held_.push_back(UOpPtr::FromRaw(u));
  }

 private:
  absl::flat_hash_set<const UOp*> accepted_;
  std::vector<UOpPtr> held_;
};
// VerifyKernel over the nodes `memo` has not accepted yet (children first); accepts them into it when all pass.
absl::Status VerifyKernel(const UOpPtr& sink, SpecMemo& memo);

// The rule tables, for composition by later layers (e.g. a schedule spec = tensor spec + more).
// Callbacks take a SpecContext* ctx and return SpecAccept() or SpecReject(ctx, why).
struct SpecContext {
  std::string why;
};
const PatternMatcher& TensorSpec();
const PatternMatcher& KernelSpec();
// Verdict helpers for spec callbacks: SpecAccept() is a sentinel node meaning "legal";
// SpecReject stores `why` in the context and returns a sentinel meaning "illegal".
UOpPtr SpecAccept();
UOpPtr SpecReject(const Bindings& b, std::string why);
// Runs a spec matcher over every node reachable from root; `what` prefixes the error message.
absl::Status VerifyWithSpec(const UOpPtr& root, const PatternMatcher& spec, const char* what);

}  // namespace kiln
