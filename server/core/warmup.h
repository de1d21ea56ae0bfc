// model_warmup with Triton's semantics: before a version is published READY, each
// config.model_warmup sample runs `count` times (0 = once) with `batch_size` (0 = 1) rows of its
// inputs -- zero_data (zeros), random_data (a fixed-seed PRNG: uniform [0, 1) for floats,
// 0..99 for integers, 0/1 for BOOL) or input_data_file (raw row-major bytes of one batch item
// from <model>/warmup/<file>, exactly the input's size; read through RepositoryFiles). A sample
// that is malformed or fails to run fails the load: "model_warmup[i] ('name'): <why>".
// Warm-up runs are not inference requests: they count in no statistics or nv_* metric; the
// engine's own metrics (kiln_compile_duration_seconds, kiln_jit_cache_*) show their compiles.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/model_config.pb.h"
#include "server/core/infer_request.h"
#include "server/core/repository_files.h"

namespace kiln::server {

// One sample, ready to run: `request` views `buffers` and `shapes` (owned here, never moved).
struct WarmupSample {
  std::string label;  // "model_warmup[i] ('name')"
  int64_t count = 1;
  InferRequest request;
  std::vector<std::string> buffers;
  std::vector<std::vector<int64_t>> shapes;
};

// The samples of `config.model_warmup` for model folder `model` (names and sizes checked;
// request validation happens when they run). INVALID_ARGUMENT naming the sample and field.
absl::StatusOr<std::vector<std::unique_ptr<WarmupSample>>> BuildWarmupSamples(
    const inference::ModelConfig& config, const std::string& model, const RepositoryFiles& files);

}  // namespace kiln::server
