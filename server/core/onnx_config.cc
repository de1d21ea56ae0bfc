#include "server/core/onnx_config.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/api/onnx_model.h"
#include "server/core/datatype.h"
#include "server/core/model_config.h"

namespace kiln::server {
namespace {

// The newest numeric version folder of model `name` holding the model file (0: none).
int64_t NewestVersion(const RepositoryFiles& files, const std::string& name, const std::string& file) {
  int64_t best = 0;
  for (const std::string& folder : files.ListFolders(name)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(folder, &v) || v <= 0 || v <= best) continue;
    if (files.Stat(absl::StrCat(name, "/", folder, "/", file)) == RepositoryFiles::Kind::kFile) best = v;
  }
  return best;
}

// Fills one config tensor from the graph's; `batched` drops the first dim.
absl::Status Fill(const api::OnnxTensorInfo& g, bool batched, inference::ModelInput* in, inference::ModelOutput* out) {
  std::optional<inference::DataType> dt = DataTypeFromKiln(g.dtype);
  if (!dt) return absl::InvalidArgumentError(absl::StrCat("'", g.name, "': dtype ", g.dtype, " cannot be served"));
  auto set = [&](auto* t) {
    if (t->data_type() == inference::TYPE_INVALID) t->set_data_type(*dt);
    if (t->dims_size() == 0 && g.has_shape) {
      for (size_t i = batched ? 1 : 0; i < g.dims.size(); ++i) t->add_dims(g.dims[i]);
    }
  };
  if (in != nullptr) set(in);
  if (out != nullptr) set(out);
  return absl::OkStatus();
}

bool SymbolicFirst(const api::OnnxTensorInfo& t) { return t.has_shape && !t.dims.empty() && t.dims[0] < 0; }

}  // namespace

bool IsOnnxConfig(const inference::ModelConfig& config) {
  return config.platform() == kPlatformOnnx || config.platform() == kPlatformOnnxruntime ||
         config.backend() == kBackendOnnxruntime;
}

bool HasOnnxVersion(const RepositoryFiles& files, const std::string& name) {
  return NewestVersion(files, name, "model.onnx") > 0;
}

bool HasGgufVersion(const RepositoryFiles& files, const std::string& name) {
  return NewestVersion(files, name, "model.gguf") > 0;
}

absl::Status CompleteOnnxConfig(const RepositoryFiles& files, const std::string& name,
                                inference::ModelConfig* config) {
  if (config->platform().empty()) config->set_platform(std::string(kPlatformOnnxruntime));
  const std::string file = DefaultModelFilename(*config);
  const int64_t version = NewestVersion(files, name, file);
  if (version == 0) return absl::OkStatus();  // the version checks report the missing file
  absl::StatusOr<api::OnnxSignature> sig =
      api::InspectOnnx((files.root() / name / std::to_string(version) / file).string());
  if (!sig.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model.onnx (version ", version, "): ", sig.status().message()));
  }
  if (config->max_batch_size() == 0 && config->input_size() == 0 && config->output_size() == 0) {
    bool all = !sig->inputs.empty() && !sig->outputs.empty();
    for (const auto& t : sig->inputs) all = all && SymbolicFirst(t);
    for (const auto& t : sig->outputs) all = all && SymbolicFirst(t);
    if (all) config->set_max_batch_size(kOnnxDefaultMaxBatchSize);
  }
  const bool batched = config->max_batch_size() > 0;
  if (config->input_size() == 0) {
    for (const auto& t : sig->inputs) config->add_input()->set_name(t.name);
  }
  if (config->output_size() == 0) {
    for (const auto& t : sig->outputs) config->add_output()->set_name(t.name);
  }
  for (int i = 0; i < config->input_size(); ++i) {
    auto it = std::find_if(sig->inputs.begin(), sig->inputs.end(),
                           [&](const api::OnnxTensorInfo& t) { return t.name == config->input(i).name(); });
    if (it == sig->inputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config input[", i, "]: '", config->input(i).name(), "' is not an input of model.onnx"));
    }
    if (absl::Status s = Fill(*it, batched, config->mutable_input(i), nullptr); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("config input[", i, "]: ", s.message()));
    }
  }
  for (int i = 0; i < config->output_size(); ++i) {
    auto it = std::find_if(sig->outputs.begin(), sig->outputs.end(),
                           [&](const api::OnnxTensorInfo& t) { return t.name == config->output(i).name(); });
    if (it == sig->outputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config output[", i, "]: '", config->output(i).name(), "' is not an output of model.onnx"));
    }
    if (absl::Status s = Fill(*it, batched, nullptr, config->mutable_output(i)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("config output[", i, "]: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
