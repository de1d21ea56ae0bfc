// The tensor binder of InferenceServer (issue #18): request tensors <-> engine tensors, the same
// for every model kind (api::Model, engine/api/model.h).
//
//   BindInputs    each validated request input -> an api::NamedHostTensorView named after its
//                 config input, with the kiln dtype of the config's data type; raw contents are
//                 viewed in place, typed `contents` are packed into little-endian bytes owned by
//                 BoundInputs. UNIMPLEMENTED for a data type the engine has no dtype for (names the
//                 input, the type and the platform); INVALID_ARGUMENT for typed contents of a type
//                 that has none (BYTES).
//   BindOutputs   each requested config output <- the run's output of that name, its wire datatype
//                 from the engine's dtype. INTERNAL when the model produced no such output, or (a
//                 kiln_graph model, whose dtypes the config declares exactly) when the dtypes differ.
//
// Validation (validate.h) has already matched the request against the config: counts, shapes,
// byte sizes and the datatype of every input.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/api/engine.h"
#include "engine/api/onnx_model.h"
#include "inference/model_config.pb.h"
#include "server/core/infer_request.h"

namespace kiln::server {

struct BoundInputs {
  std::vector<api::NamedHostTensorView> views;  // point into the request's raw views or `packed`
  std::vector<std::string> packed;              // typed contents, packed (reserved: never reallocated)
};

// `platform` names the model kind in error messages ("kiln_graph", "kiln_builtin", "onnx").
absl::Status BindInputs(const inference::ModelConfig& config, const InferRequest& request,
                        const ValidatedRequest& valid, std::string_view platform, BoundInputs* out);

// Moves the requested outputs of `run` into `response` (`strict_dtypes`: a mismatch with the
// config is INTERNAL; else the engine's dtype is reported).
absl::Status BindOutputs(const inference::ModelConfig& config, const ValidatedRequest& valid,
                         bool strict_dtypes, api::RunResult& run, InferResponse* response);

}  // namespace kiln::server
