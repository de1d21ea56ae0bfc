// InferTask: one admitted inference request on its way through InferenceServer -- the resolved
// model version, its device lane, the request (views into the transport's message), what
// validation established, the timestamps, the observation and the callback that answers it.
// Moved, never copied; owned by whoever holds it (a lane's queue or a model's batch queue).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "server/core/infer_request.h"
#include "server/core/inference_lanes.h"
#include "server/core/model_repository.h"
#include "server/core/observer.h"

namespace kiln::server {

using InferCallback = std::function<void(absl::StatusOr<InferResponse>)>;

struct InferTask {
  std::shared_ptr<const ModelVersion> model;
  DeviceLane* lane = nullptr;  // the device the version runs on
  InferRequest request;
  ValidatedRequest valid;
  std::chrono::steady_clock::time_point start;     // arrival
  std::chrono::steady_clock::time_point admitted;  // queue time starts here
  InferObservation obs;
  InferCallback done;
  // Triton's trace extension (trace.h): the trace id (0 = not traced) and the run's bounds.
  uint64_t trace_id = 0;
  std::chrono::steady_clock::time_point compute_start{};
  std::chrono::steady_clock::time_point compute_end{};
};

}  // namespace kiln::server
