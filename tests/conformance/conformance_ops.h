// The op table of the conformance suite: manifest op name -> the kiln::Tensor calls that compute it.
// gen_cases.py documents each op's attribute layout next to the case that uses it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/tensor/tensor.h"

namespace kiln::conformance {

// What an op gets: its inputs (realized on the backend under test), the manifest attributes (as
// integers and as doubles), and the expected output's dtype, shape and the backend (creation ops).
struct OpArgs {
  const std::vector<Tensor>& x;
  const IntVec& a;
  const std::vector<double>& f;
  DType out_dtype;
  const IntVec& out_shape;
  const std::string& device;
};

using OpFn = std::function<Tensor(const OpArgs&)>;

const absl::flat_hash_map<std::string, OpFn>& Ops();

}  // namespace kiln::conformance
