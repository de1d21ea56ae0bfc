// api::Model: the one model path (issue #18). Every model the engine serves -- a prepared graph
// (kiln_graph), a builtin architecture with its weights (kiln_builtin), an ONNX model -- is run
// through the same call:
//
//   Model::Run(inputs by name, RunOptions{deadline, cancellation, priority, limits, budget})
//
// and every kind runs under its engine's per-signature TinyJit trace cache (engine/jit
// TraceCache): a signature's first call runs, the second captures, later ones replay the captured
// kernels without scheduling (RunResult::schedules == 0, jit_event "replay"). A run past its
// deadline or cancelled stops between kernels -- eagerly run or replayed -- and returns
// DEADLINE_EXCEEDED / CANCELLED; RESOURCE_EXHAUSTED refuses a run over its limits before anything
// is allocated (engine.h, RunOptions).
//
// Inputs: by name. A graph takes every input of its spec (any order; a missing or unknown name is
// INVALID_ARGUMENT naming it); a builtin architecture takes exactly one float32 input (N, ...),
// whatever its name, and names its one output `output_name` (ModelIo); an ONNX model takes its
// graph's inputs by name. Outputs come back named.
//
// Lifetime: a Model refers to its Engine, which must outlive it. Thread safety: Run may be called
// from any thread; runs of one engine execute one at a time (engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/api/engine.h"
#include "engine/api/onnx_model.h"

namespace kiln::api {

class Model {
 public:
  virtual ~Model() = default;
  // "kiln_graph", "kiln_builtin" or "onnx".
  virtual std::string_view kind() const = 0;
  virtual absl::StatusOr<RunResult> Run(absl::Span<const NamedHostTensorView> inputs,
                                        const RunOptions& options = {}) = 0;
  // Device bytes the model keeps alive beyond its engine's caches (weights, captured traces).
  virtual uint64_t device_bytes() const = 0;
};

// Names a builtin model's tensors for the Model interface (its engine call has no names).
struct ModelIo {
  std::string output_name = "output";
};

// Models over what an Engine loaded; `engine` must outlive them. Null arguments give null.
std::shared_ptr<Model> OpenGraphModel(Engine& engine, std::shared_ptr<const PreparedGraph> graph);
std::shared_ptr<Model> OpenBuiltinModel(Engine& engine, std::shared_ptr<const BuiltinModel> model,
                                        ModelIo io = {});
std::shared_ptr<Model> OpenOnnxModel(Engine& engine, std::shared_ptr<const OnnxModel> model);

}  // namespace kiln::api
