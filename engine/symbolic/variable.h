// Symbolic Variables: binding values, substitution and evaluation (tinygrad's Variable.bind /
// unbind, UOp.substitute, sym_infer).
//
// A Variable is a DEFINE_VAR (UOp::Variable(name, min, max)) with an index dtype. A bound variable
// is BIND(DEFINE_VAR, CONST value): the value is known for one run, but range analysis still uses
// the variable's [min, max], so a graph (and a JIT trace) built with a bound variable serves every
// value in range.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/uop/uop.h"

namespace kiln {

// Variable name -> value, as passed to a launch (tinygrad var_vals).
using VarVals = absl::flat_hash_map<std::string, int64_t>;

// BIND(var, CONST value). InvalidArgument if `var` is not a DEFINE_VAR or the value is outside
// [min, max] (the message names the variable, the value and the range).
absl::StatusOr<UOpPtr> Bind(const UOpPtr& var, int64_t value);
// (DEFINE_VAR, value) of a BIND. InvalidArgument if `bound` is not a BIND of a CONST.
absl::StatusOr<std::pair<UOpPtr, int64_t>> Unbind(const UOpPtr& bound);

// Rebuilds `root` with every node that is a key of `subs` replaced by its value (the replacement
// is not itself searched). Iterative; shared subgraphs are rebuilt once.
UOpPtr Substitute(const UOpPtr& root, const absl::flat_hash_map<UOpPtr, UOpPtr>& subs);
// Replaces every BIND in `root` by its DEFINE_VAR and records the bound values in `var_vals`
// (name -> value). InvalidArgument if one variable is bound to two different values.
absl::StatusOr<UOpPtr> UnbindAll(const UOpPtr& root, VarVals* var_vals);
// Replaces each DEFINE_VAR named in `var_vals` by the CONST of its value (index dtype).
// InvalidArgument if a value is outside the variable's range.
absl::StatusOr<UOpPtr> SubstituteValues(const UOpPtr& root, const VarVals& var_vals);

// The value of an integer/bool expression (bools as 0/1) given values for its variables: BIND
// gives its own value, DEFINE_VAR and SPECIAL are looked up by name in `var_vals`. Semantics are
// const_fold.h's (wrapping per dtype). Errors, never traps: InvalidArgument for an integer
// division or modulo by zero ("division by zero in ..."), a variable without a value or with a
// value outside its range, an undefined shift, or a node that is not integer arithmetic (floats,
// RANGE, LOAD, ...). Iterative.
absl::StatusOr<int64_t> Evaluate(const UOpPtr& expr, const VarVals& var_vals = {});

}  // namespace kiln
