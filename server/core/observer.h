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
  bool rejected = false;       // refused by the model's full queue (Triton reason REJECTED)
  // Dropped from the queue without running: its client cancelled, its deadline passed, or its
  // dynamic-batching queue timeout expired under REJECT (the code tells which).
  bool dropped = false;
  // The one request of each execution that reports it: the execution's rows (a dynamic batch's
  // summed batch dims); 0 on the other requests of a batch and on requests that did not run.
  uint64_t executed_rows = 0;
  uint64_t batch_size = 0;
  uint64_t duration_ns = 0;    // whole request
  uint64_t queue_ns = 0;
  uint64_t compute_input_ns = 0;   // request tensors -> engine inputs
  uint64_t compute_infer_ns = 0;
  uint64_t compute_output_ns = 0;  // engine outputs -> response tensors
  bool cache_hit = false;   // answered from the response cache (no execution)
  bool cache_miss = false;  // the model caches responses and this one was not cached
  uint64_t cache_ns = 0;    // lookup (hit) or lookup + insert (miss)
};

// One engine execution (a model's Infer or a kiln.v1 graph run).
struct EngineRunObservation {
  std::string model;            // "" for kiln.v1 graph runs
  uint64_t compile_ns = 0;      // lowering + compiling of this run's new kernels
  int kernels_compiled = 0;
  bool jit = false;             // ran through the JIT trace cache (builtin models)
  bool jit_hit = false;         // ... and the signature's trace existed
  int64_t jit_evictions = 0;    // traces evicted since the previous observation
  std::vector<api::DeviceMemoryUsage> device_memory;  // after the run
  // The run's engine caches after the run (api::EngineStats: prepared graphs and JIT traces of
  // this device's engine; loaded kernels and compiled binaries process-wide).
  std::string device;
  api::EngineStats engine;
};

// Device memory a loaded model version holds (api::BuiltinModel::device_bytes; 0 for kiln_graph
// versions, which hold no device buffers between requests).
struct ModelMemoryObservation {
  std::string model;
  std::string version;
  std::string device;
  uint64_t bytes = 0;
};

// One finished generation of a kiln_llm model (llm_generation.h).
struct GenerationObservation {
  std::string model;
  std::string version;
  std::string route;          // "completions", "chat", "generate", "infer", "stream_infer"
  std::string finish_reason;  // "stop", "length", "cancelled", "error"
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  uint64_t first_token_ns = 0;          // arrival to the first token; 0 when none came
  std::vector<uint64_t> inter_token_ns;  // gaps between successive tokens
  uint64_t duration_ns = 0;              // arrival to the end
};

// A kiln_llm model's KV-cache slots and queue, after a generation starts or ends.
struct LlmOccupancy {
  std::string model;
  std::string version;
  int64_t slots = 0, active = 0, queued = 0;
};

class InferObserver {
 public:
  virtual ~InferObserver() = default;
  virtual void ObserveInfer(const InferObservation& observation) = 0;
  // The launches of one engine run of model `model` ("" for a kiln.v1 graph run), in launch order.
  virtual void ObserveKernels(const std::string& model, absl::Span<const api::KernelTiming> kernels) = 0;
  virtual void ObserveEngineRun(const EngineRunObservation&) {}
  // A request entered (+1) or left (-1) the queue of model `model` version `version`.
  virtual void ObservePending(const std::string& /*model*/, const std::string& /*version*/,
                              int /*delta*/) {}
  // The set of loaded versions changed (start, load, unload): `loaded` lists every READY version;
  // versions no longer listed are gone. `devices` is the memory of every device with an engine.
  virtual void ObserveModels(absl::Span<const ModelMemoryObservation> /*loaded*/,
                             absl::Span<const api::DeviceMemoryUsage> /*devices*/) {}
  // One loaded version's memory changed (a run captured a JIT trace). Ignored for a version not
  // in the latest ObserveModels (it was unloaded meanwhile).
  virtual void ObserveModelMemory(const ModelMemoryObservation& /*memory*/) {}
  virtual void ObserveGeneration(const GenerationObservation& /*generation*/) {}
  virtual void ObserveLlmOccupancy(const LlmOccupancy& /*occupancy*/) {}
};

}  // namespace kiln::server
