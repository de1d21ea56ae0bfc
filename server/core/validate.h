// Request validation against a model's config, before any allocation for tensor data.
//
// Checks, in this order, each failing with INVALID_ARGUMENT and a message that names the field
// ("inputs[1].shape[0]: ...") and the limit or expectation:
//   input names (empty, duplicate, unknown); datatypes (unknown string, config mismatch);
//   shapes (rank <= kMaxTensorRank, no negative dim, element count and byte size computed with
//   overflow checks, rank and dims vs config with -1 wildcards, batch dim 1..max_batch_size and
//   equal across inputs); missing inputs; raw vs typed contents (raw for every input or none,
//   never both on one input, raw byte size or BYTES framing exact, typed element counts exact,
//   FP16/BF16 raw only); requested outputs (unknown, duplicate).
// The sum of input bytes above `max_request_bytes` fails with RESOURCE_EXHAUSTED.
// Pure function; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "inference/model_config.pb.h"
#include "server/core/infer_request.h"

namespace kiln::server {

absl::StatusOr<ValidatedRequest> ValidateInferRequest(const inference::ModelConfig& config,
                                                      const InferRequest& request,
                                                      int64_t max_request_bytes);

}  // namespace kiln::server
