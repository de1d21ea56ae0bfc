// Triton's classification extension: a requested output with parameter `classification: k`
// (gRPC int64_param, REST a JSON integer) is answered as a BYTES tensor of the k largest values
// of each batch item, "value:index" (value as std::to_string writes it, 6 decimals), largest
// first; equal values keep index order. Shape [batch, min(k, n)] for a batching model, else
// [min(k, n)], where n is the output's element count per batch item. Numeric outputs only
// (FP16/BF16 and BOOL/BYTES: INVALID_ARGUMENT naming outputs[i].parameters.classification).
// Labels (output label_filename) are not implemented: the config field is refused at load.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "inference/model_config.pb.h"
#include "server/core/infer_request.h"

namespace kiln::server {

// Rewrites the outputs of `response` that `request` asked to classify (request.classification,
// parallel to requested_outputs; 0 = the raw tensor).
absl::Status ApplyClassification(const inference::ModelConfig& config, const InferRequest& request,
                                 InferResponse* response);

}  // namespace kiln::server
