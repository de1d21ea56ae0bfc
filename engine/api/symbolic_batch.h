// A symbolic batch dim for the engine's model paths (RunOptions::max_batch, issue #20): a batch of n rows runs in
// buffers of max_batch rows (only the n rows copied in: Tensor::FromHostPrefix), with n bound to the Variable
// kBatchVar on the inputs (Tensor::Rows), so one captured trace of a model serves every n. Internal to engine/api.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/jit/tiny_jit.h"
#include "engine/symbolic/variable.h"
#include "engine/uop/uop.h"

namespace kiln::api {

inline constexpr char kBatchVar[] = "batch";

// BIND(Variable(kBatchVar, 1, rows), n) with n from the jitted call's `vars`; inputs are padded to `rows`.
inline absl::StatusOr<UOpPtr> BindBatch(const jit::JitArgs& args, int64_t rows) {
  auto it = args.vars.find(kBatchVar);
  if (it == args.vars.end()) return absl::InternalError("symbolic batch: the run passed no batch size");
  return Bind(UOp::Variable(kBatchVar, 1, rows), it->second);
}

// Whether a run failed because Tensor::Rows refused the model's graph (it mixes the batch's rows): the model then runs
// with a trace per batch size.
inline bool IsRowsRefusal(const absl::Status& st) {
  return absl::IsInvalidArgument(st) && st.message().find("Tensor::Rows") != absl::string_view::npos;
}

}  // namespace kiln::api
