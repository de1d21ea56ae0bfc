// Config honesty: every config.pbtxt field kilnd does not implement is refused at load with a
// message naming it, never accepted and ignored.
//
// The rules are data (kFieldRules in config_support.cc): a field path without indices
// ("input.reshape", "dynamic_batching.priority_levels") is implemented, or refused with the
// reason. A field that is set (non-default) and not listed as implemented fails the load with
// INVALID_ARGUMENT "config <path with indices>: <reason>", e.g.
// "config sequence_batching: not implemented by kilnd (stateful sequences)".
// Field values that are the proto default (false, 0, "") count as not set: `response_cache {
// enable: false }` is accepted. `parameters` keys are checked against the platform's keys.
#pragma once

#include "absl/status/status.h"
#include "inference/model_config.pb.h"

namespace kiln::server {

// OK when every set field of `config` is implemented (see above).
absl::Status CheckImplementedFields(const inference::ModelConfig& config);

}  // namespace kiln::server
