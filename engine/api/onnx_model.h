// ONNX models behind the engine facade (engine/onnx does the import; this is the seam the server sees, plain structs
// only). A small interface so the model paths can later be unified behind one api::Model (issue #18).
//
//   InspectOnnx(path)          reads and validates model.onnx (no engine, no device): its inputs and outputs
//                              (kiln dtype names, dims with -1 for symbolic dims and their names). Used to complete a
//                              Triton config.pbtxt from the graph.
//   Engine::LoadOnnx(path)     the same plus a handle that runs on the engine's device; weights are uploaded on the
//                              first run and kept (OnnxModel::device_bytes).
//   Engine::RunOnnx(m, in)     one run: inputs by name (every graph input, dtype and rank as declared, symbolic dims
//                              bound to the given sizes). Runs under the engine's per-signature JIT trace cache
//                              (run, capture, replay, as RunBuiltin): each distinct input shape gets its own trace.
//                              A graph whose structure depends on an input's values (a Reshape whose shape is an
//                              input) keys its traces by those values too; a graph whose shapes depend on computed
//                              data (NonZero) runs eagerly, without the JIT, every time.
// Errors: NOT_FOUND (no file), INVALID_ARGUMENT (a bad or unsupported model, or bad inputs; the message names the
// node, op and opset, or the input), INTERNAL (an engine failure). Thread safety: as Engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/engine.h"

namespace kiln::api {

struct OnnxTensorInfo {
  std::string name;
  std::string dtype;  // kiln wire name ("float32", "int64", ...)
  bool has_shape = false;
  std::vector<int64_t> dims;             // -1 = symbolic
  std::vector<std::string> dim_params;   // the symbolic dims' names ("" for static dims)
};

struct OnnxSignature {
  std::vector<OnnxTensorInfo> inputs;
  std::vector<OnnxTensorInfo> outputs;
};

absl::StatusOr<OnnxSignature> InspectOnnx(const std::string& path);

struct NamedHostTensorView {
  std::string name;
  HostTensorView view;
};

class OnnxModel {
 public:
  ~OnnxModel();
  const OnnxSignature& signature() const;
  const std::string& device() const;
  // Device bytes this model keeps alive: uploaded weights plus what its JIT traces captured.
  uint64_t device_bytes() const;

  struct Impl;
  explicit OnnxModel(std::unique_ptr<Impl> impl);
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::api
