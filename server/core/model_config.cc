#include "server/core/model_config.h"

#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "server/core/config_support.h"
#include "server/core/datatype.h"
#include "server/core/limits.h"
#include "server/core/onnx_config.h"

namespace kiln::server {
namespace {

// What a TextFormat error is about, in fixed words: protobuf's messages quote the offending
// tokens, and a config file is not the client's to read (a file linked to a secret would leak its
// first token), so no text of the file reaches a message.
std::string_view ErrorKind(const std::string& message) {
  if (message.find("has no field named") != std::string::npos) return "unknown field name";
  if (message.find("nknown enumeration value") != std::string::npos) return "unknown enum value";
  if (message.find("specified multiple times") != std::string::npos ||
      message.find("Non-repeated field") != std::string::npos) {
    return "a non-repeated field is given twice";
  }
  if (message.find("Invalid") != std::string::npos || message.find("ould not parse") != std::string::npos ||
      message.find("out of range") != std::string::npos) {
    return "invalid value";
  }
  if (message.find("Expected") != std::string::npos) return "syntax error";
  return "parse error";
}

// Collects TextFormat errors as "line L:C: <kind>" (first few only; see ErrorKind).
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (errors_.size() < 5)
      errors_.push_back(absl::StrCat("line ", line + 1, ":", column + 1, ": ", std::string(ErrorKind(message))));
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  std::string Text() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::vector<std::string> errors_;
};

template <typename Tensor>
absl::Status CheckTensors(std::string_view field,
                          const google::protobuf::RepeatedPtrField<Tensor>& tensors, bool batching,
                          std::set<std::string>* names) {
  if (tensors.size() > kMaxTensorsPerModel) {
    return absl::InvalidArgumentError(absl::StrCat("config ", std::string(field), ": ",
                                                   tensors.size(), " entries exceed the limit ",
                                                   kMaxTensorsPerModel));
  }
  for (int i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string where = absl::StrCat("config ", std::string(field), "[", i, "]");
    if (t.name().empty() || t.name().size() > static_cast<size_t>(kMaxNameLength)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".name: must have 1..", kMaxNameLength, " characters"));
    }
    if (!names->insert(t.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".name: duplicate tensor name '", t.name(), "'"));
    }
    if (t.data_type() == inference::TYPE_INVALID || DataTypeName(t.data_type()) == "INVALID") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".data_type: tensor '", t.name(), "' needs a valid TYPE_*"));
    }
    const int rank = t.dims_size() + (batching ? 1 : 0);
    if (rank > kMaxTensorRank) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".dims: rank ", rank, " exceeds the limit ", kMaxTensorRank));
    }
    for (int d = 0; d < t.dims_size(); ++d) {
      if (t.dims(d) < -1 || t.dims(d) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".dims[", d, "]: ", t.dims(d), " is not -1 or a positive size"));
      }
    }
  }
  return absl::OkStatus();
}

// The path ("output[0].name", "parameters[1].key") of the first string field of `m` that is not
// valid UTF-8, or "" if there is none. Protobuf strings must be UTF-8: the text and JSON parsers
// let escapes through, but serializing such a field is an error and proto3 clients (and kilnd's
// own JSON printer) refuse or mangle it, so a config holding one would break every response that
// names its tensors.
std::string FirstInvalidUtf8(const google::protobuf::Message& m, const std::string& prefix) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const FD*> fields;
  r->ListFields(m, &fields);
  for (const FD* f : fields) {
    const std::string name = prefix + f->name();
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string where = f->is_repeated() ? absl::StrCat(name, "[", i, "]") : name;
      if (f->type() == FD::TYPE_STRING) {
        const std::string& v = f->is_repeated() ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
        if (!google::protobuf::internal::IsStructurallyValidUTF8(v.data(), static_cast<int>(v.size()))) {
          return where;
        }
      } else if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
        const google::protobuf::Message& sub =
            f->is_repeated() ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f);
        std::string bad = FirstInvalidUtf8(sub, where + ".");
        if (!bad.empty()) return bad;
      }
    }
  }
  return "";
}

}  // namespace

bool IsValidModelName(std::string_view name) {
  if (name.empty() || name.size() > static_cast<size_t>(kMaxNameLength)) return false;
  if (name.front() == '.') return false;  // also rejects "." and ".."
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<inference::ModelConfig> ParseModelConfigText(std::string_view text) {
  if (static_cast<int64_t>(text.size()) > kMaxConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.pbtxt: ", text.size(), " bytes exceed the limit ", kMaxConfigBytes));
  }
  inference::ModelConfig config;
  ErrorCollector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(absl::StrCat("config.pbtxt: ", errors.Text()));
  }
  return config;
}

absl::StatusOr<inference::ModelConfig> ParseModelConfigJson(std::string_view json) {
  if (static_cast<int64_t>(json.size()) > kMaxConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat("parameters[config]: ", json.size(),
                                                   " bytes exceed the limit ", kMaxConfigBytes));
  }
  inference::ModelConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(std::string(json), &config, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameters[config]: invalid JSON ModelConfig: ",
                     std::string(status.message().data(), status.message().size())));
  }
  return config;
}

absl::Status NormalizeModelConfig(std::string_view model_name, inference::ModelConfig* config) {
  if (config->name().empty()) {
    config->set_name(std::string(model_name));
  } else if (config->name() != model_name) {
    return absl::InvalidArgumentError(absl::StrCat("config name: '", config->name(),
                                                   "' differs from the model folder '",
                                                   std::string(model_name), "'"));
  }
  if (config->backend() == "onnxruntime" && config->platform().empty()) config->set_platform("onnxruntime_onnx");
  const std::string& platform = config->platform();
  if (platform.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config platform: required (one of ", std::string(kPlatformGraph), ", ",
                     std::string(kPlatformBuiltin), ", ", std::string(kPlatformOnnx), ", ",
                     std::string(kPlatformLlm), ")"));
  }
  if (platform != kPlatformGraph && platform != kPlatformBuiltin && platform != kPlatformOnnx &&
      platform != kPlatformLlm && platform != "onnxruntime_onnx") {
    return absl::InvalidArgumentError(absl::StrCat("config platform: unknown platform '", platform,
                                                   "' (kiln serves ", std::string(kPlatformGraph),
                                                   ", ", std::string(kPlatformBuiltin), ", ",
                                                   std::string(kPlatformOnnx), ", ",
                                                   std::string(kPlatformLlm), ")"));
  }
  if (platform == kPlatformLlm) {
    // A text generator: Triton's LLM tensors (its vLLM backend's names), for metadata; the KServe
    // inference calls read them (llm_infer.cc) as the generate and OpenAI routes read their
    // bodies, one generation per request (slots = max_batch_size).
    if (absl::Status s = CheckLlmConfig(*config); !s.ok()) return s;
    if (config->input_size() == 0) {
      auto add = [config](const char* name, inference::DataType type, bool optional) {
        inference::ModelInput* in = config->add_input();
        in->set_name(name);
        in->set_data_type(type);
        in->add_dims(1);
        in->set_optional(optional);
      };
      add("text_input", inference::TYPE_STRING, false);
      add("stream", inference::TYPE_BOOL, true);
      add("sampling_parameters", inference::TYPE_STRING, true);
      add("exclude_input_in_output", inference::TYPE_BOOL, true);
    }
    if (config->output_size() == 0) {
      inference::ModelOutput* out = config->add_output();
      out->set_name("text_output");
      out->set_data_type(inference::TYPE_STRING);
      out->add_dims(-1);
    }
  }
  if (config->max_batch_size() < 0 || config->max_batch_size() > kMaxBatchSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config max_batch_size: ", config->max_batch_size(), " is outside 0..", kMaxBatchSize));
  }
  if (config->input_size() == 0) {
    return absl::InvalidArgumentError("config input: a model needs at least one input");
  }
  if (config->output_size() == 0) {
    return absl::InvalidArgumentError("config output: a model needs at least one output");
  }
  if (const std::string bad = FirstInvalidUtf8(*config, ""); !bad.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("config ", bad, ": not valid UTF-8"));
  }
  // Config honesty: a field kilnd would not honour fails the load, naming it.
  if (absl::Status s = CheckImplementedFields(*config); !s.ok()) return s;
  const bool batching = config->max_batch_size() > 0;
  std::set<std::string> input_names;
  std::set<std::string> output_names;
  if (absl::Status s = CheckTensors("input", config->input(), batching, &input_names); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTensors("output", config->output(), batching, &output_names); !s.ok()) {
    return s;
  }
  if (platform == kPlatformGraph || platform == kPlatformBuiltin) {
    // A graph binds every input, an architecture takes its one input: nothing runs without one.
    for (int i = 0; i < config->input_size(); ++i) {
      if (config->input(i).optional()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config input[", i, "].optional: platform ", platform, " needs every input ('",
            config->input(i).name(), "' cannot be optional)"));
      }
    }
  }

  if (!config->has_version_policy() || config->version_policy().policy_choice_case() ==
                                           inference::ModelVersionPolicy::POLICY_CHOICE_NOT_SET) {
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  const auto& policy = config->version_policy();
  if (policy.has_latest() && policy.latest().num_versions() == 0) {
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  if (policy.has_specific()) {
    if (policy.specific().versions_size() == 0) {
      return absl::InvalidArgumentError(
          "config version_policy.specific.versions: lists no version");
    }
    for (int64_t v : policy.specific().versions()) {
      if (v <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config version_policy.specific.versions: ", v, " is not a positive version"));
      }
    }
  }
  if (!config->default_model_filename().empty() &&
      !IsValidModelName(config->default_model_filename())) {
    return absl::InvalidArgumentError(
        absl::StrCat("config default_model_filename: '", config->default_model_filename(),
                     "' must be a plain file name ([A-Za-z0-9_.-], no leading '.')"));
  }
  for (int i = 0; i < config->instance_group_size(); ++i) {
    if (config->instance_group(i).count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("config instance_group[", i, "].count: must not be negative"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LlmConfig> ReadLlmConfig(const inference::ModelConfig& config) {
  LlmConfig c;
  if (config.max_batch_size() > 0) c.slots = config.max_batch_size();
  for (const auto& [key, value] : config.parameters()) {
    int64_t* field = key == "max_ctx" ? &c.max_ctx : key == "max_queue" ? &c.max_queue : nullptr;
    if (field != nullptr) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(value.string_value(), &v) || v < 1 || v > (int64_t{1} << 20)) {
        return absl::InvalidArgumentError(absl::StrCat("config parameters[", key, "]: '", value.string_value(),
                                                       "' is not an integer in 1..1048576"));
      }
      *field = v;
    } else if (key == "warm" || key == "int8_activations") {
      if (value.string_value() != "true" && value.string_value() != "false") {
        return absl::InvalidArgumentError(
            absl::StrCat("config parameters[", key, "]: neither \"true\" nor \"false\""));
      }
      (key == "warm" ? c.warm : c.int8_activations) = value.string_value() == "true";
    }  // other keys: CheckParameters (config_support.cc) refuses them, naming what kiln_llm reads
  }
  return c;
}

absl::Status CheckLlmConfig(const inference::ModelConfig& config) { return ReadLlmConfig(config).status(); }

int64_t SymbolicBatchRows(const inference::ModelConfig& config) {
  if (config.max_batch_size() < 2 ||
      (config.platform() != kPlatformBuiltin && config.platform() != kPlatformOnnx &&
       config.platform() != kPlatformOnnxruntime && config.platform() != kPlatformGraph))
    return 0;
  auto it = config.parameters().find("symbolic_batch");
  if (it != config.parameters().end() && it->second.string_value() == "false") return 0;
  return config.max_batch_size();
}

std::string DefaultModelFilename(const inference::ModelConfig& config) {
  if (!config.default_model_filename().empty()) return config.default_model_filename();
  if (config.platform() == kPlatformLlm) return "model.gguf";
  if (config.platform() == kPlatformGraph) return "model.graph";
  if (config.platform() == kPlatformBuiltin) return "model.safetensors";
  return "model.onnx";
}

}  // namespace kiln::server
