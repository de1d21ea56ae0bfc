// ONNX models in a Triton repository: platform spellings and config completion from the graph.
//
// A version folder holding model.onnx is served on kiln's engine when the config says platform "onnxruntime_onnx"
// or backend "onnxruntime" (Triton's spellings) or platform "kiln_onnx"; a model folder without config.pbtxt whose
// versions hold model.onnx is such a model too. Like Triton without --strict-model-config, a missing or partial
// config is completed from the graph of the newest version: the inputs and outputs (name, data_type, dims; symbolic
// dims -1) when the config lists none, a missing data_type or dims of a listed one, and max_batch_size (Triton's
// default 4) when the config sets none and every input and output has a symbolic first dim -- the batch dim is then
// left out of dims. The completed config is what /v2/models/NAME/config returns.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "inference/model_config.pb.h"
#include "server/core/repository_files.h"

namespace kiln::server {

inline constexpr std::string_view kPlatformOnnxruntime = "onnxruntime_onnx";
inline constexpr std::string_view kBackendOnnxruntime = "onnxruntime";
inline constexpr int kOnnxDefaultMaxBatchSize = 4;  // Triton's default-max-batch-size

// Whether the config names an ONNX model (any of the spellings above).
bool IsOnnxConfig(const inference::ModelConfig& config);

// Whether some version folder of model `name` holds model.onnx (for a folder without config.pbtxt).
// Reads through `files`, so nothing outside the repository is looked at.
bool HasOnnxVersion(const RepositoryFiles& files, const std::string& name);
// Likewise <name>/<version>/model.gguf: a folder with one and no config.pbtxt is a kiln_llm model.
bool HasGgufVersion(const RepositoryFiles& files, const std::string& name);

// Completes `config` from the newest version's model.onnx (see above). INVALID_ARGUMENT when the graph cannot be
// read (the message is the loader's: node, op, opset) or a config tensor names no graph input/output.
absl::Status CompleteOnnxConfig(const RepositoryFiles& files, const std::string& name,
                                inference::ModelConfig* config);

}  // namespace kiln::server
