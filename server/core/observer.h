// InferObserver: how server/core reports finished requests and kernel launches to whoever
// exports them (server/metrics), without depending on it. Set once at start-up, before serving;
// Observe* run on the request's thread after the answer is known and must be thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/api/engine.h"

namespace kiln::server {

struct InferObservation {
  std::string model;     // resolved model name; "" when the request named no known model
  std::string version;   // resolved version; "" when unresolved
  std::string protocol;  // "grpc", "http"
  absl::StatusCode code = absl::StatusCode::kOk;
  bool reached_model = false;  // the request resolved to a READY model version
  bool engine_failure = false; // failed inside execution (not validation)
  uint64_t batch_size = 0;
  uint64_t duration_ns = 0;    // whole request
  uint64_t queue_ns = 0;
  uint64_t compute_infer_ns = 0;
};

class InferObserver {
 public:
  virtual ~InferObserver() = default;
  virtual void ObserveInfer(const InferObservation& observation) = 0;
  virtual void ObserveKernels(absl::Span<const api::KernelTiming> kernels) = 0;
};

}  // namespace kiln::server
