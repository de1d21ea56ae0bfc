// Model configuration: config.pbtxt (protobuf text) or a JSON override parsed into
// inference::ModelConfig, then checked and completed so the rest of the server can trust it.
//
// After NormalizeModelConfig succeeds: name equals the model's folder name; platform is one of
// kKnownPlatforms; 0 <= max_batch_size <= kMaxBatchSize; every input/output has a unique
// non-empty name, a valid datatype and dims of -1 or > 0 with rank <= kMaxTensorRank (batch dim
// included); every string field is valid UTF-8 (INVALID_ARGUMENT naming the first that is not,
// e.g. "config output[0].name: not valid UTF-8"); version_policy is set (default latest
// { num_versions: 1 }). Other fields (instance_group, dynamic_batching, parameters, ...) are kept
// as written for later stages.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/model_config.pb.h"

namespace kiln::server {

inline constexpr std::string_view kPlatformGraph = "kiln_graph";      // a kiln.v1.Graph
inline constexpr std::string_view kPlatformBuiltin = "kiln_builtin";  // architecture + safetensors
inline constexpr std::string_view kPlatformOnnx = "kiln_onnx";        // model.onnx
inline constexpr std::string_view kPlatformLlm = "kiln_llm";          // model.gguf, a decoder LLM

// True for a name kiln accepts for models and folders: 1..kMaxNameLength characters from
// [A-Za-z0-9_.-], not "." or "..", no leading '.'. Names are looked up in the repository
// listing, never joined into a path unchecked.
bool IsValidModelName(std::string_view name);

// Parses config.pbtxt text. INVALID_ARGUMENT names the line, column and field on a parse error.
absl::StatusOr<inference::ModelConfig> ParseModelConfigText(std::string_view text);

// Parses a JSON ModelConfig (the `config` load parameter). INVALID_ARGUMENT on error.
absl::StatusOr<inference::ModelConfig> ParseModelConfigJson(std::string_view json);

// Checks and completes `config` for the model in folder `model_name` (see the file comment).
absl::Status NormalizeModelConfig(std::string_view model_name, inference::ModelConfig* config);

// The model file a version folder must hold: default_model_filename if set, else the
// platform's default ("model.graph", "model.safetensors", "model.onnx").
std::string DefaultModelFilename(const inference::ModelConfig& config);

// A kiln_llm model's serving settings: slots = max_batch_size (concurrent generations; 0 = 4), and
// parameters max_ctx (tokens per generation, prompt included), max_queue (generations waiting for a
// slot), warm ("true": the decode step is compiled at load) and int8_activations ("true": LlamaOptions's, 8-bit
// activations times the weights' integers as llama.cpp computes). INVALID_ARGUMENT names the parameter.
struct LlmConfig {
  int64_t slots = 4;
  int64_t max_ctx = 1024;
  int64_t max_queue = 256;
  bool warm = true;
  bool int8_activations = false;
};
absl::StatusOr<LlmConfig> ReadLlmConfig(const inference::ModelConfig& config);
absl::Status CheckLlmConfig(const inference::ModelConfig& config);

// The batch bound of a symbolic batch dim (api::RunOptions::max_batch): max_batch_size for kiln_builtin and ONNX
// models that batch, unless parameters { key: "symbolic_batch" value: { string_value: "false" } } turns it off (then
// 0: a trace per batch size). CheckParameters refuses values other than "true" and "false".
int64_t SymbolicBatchRows(const inference::ModelConfig& config);

}  // namespace kiln::server
