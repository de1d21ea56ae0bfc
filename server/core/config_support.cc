#include "server/core/config_support.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "server/core/model_config.h"
#include "server/core/onnx_config.h"

namespace kiln::server {
namespace {

struct FieldRule {
  const char* path;    // field names joined by '.', no indices
  const char* reason;  // "" = implemented; else why it is refused
};

// Every field kilnd reads or whose meaning it keeps. dynamic_batching is implemented whole
// (dynamic_batcher.h); instance_group.count -- one instance per model and device -- is accepted.
constexpr FieldRule kFieldRules[] = {
    {"name", ""},
    {"platform", ""},
    {"backend", ""},
    {"version_policy", ""},
    {"version_policy.latest", ""},
    {"version_policy.latest.num_versions", ""},
    {"version_policy.all", ""},
    {"version_policy.specific", ""},
    {"version_policy.specific.versions", ""},
    {"max_batch_size", ""},
    {"input", ""},
    {"input.name", ""},
    {"input.data_type", ""},
    {"input.format", ""},
    {"input.dims", ""},
    {"input.optional", ""},
    {"input.reshape", "not implemented by kilnd (tensor reshape)"},
    {"input.is_shape_tensor", "not implemented by kilnd (shape tensors)"},
    {"input.allow_ragged_batch", "not implemented by kilnd (ragged batching)"},
    {"output", ""},
    {"output.name", ""},
    {"output.data_type", ""},
    {"output.dims", ""},
    {"output.label_filename", ""},  // classification.h
    {"output.reshape", "not implemented by kilnd (tensor reshape)"},
    {"output.is_shape_tensor", "not implemented by kilnd (shape tensors)"},
    {"dynamic_batching", ""},
    {"dynamic_batching.preferred_batch_size", ""},
    {"dynamic_batching.max_queue_delay_microseconds", ""},
    {"dynamic_batching.preserve_ordering", ""},
    {"dynamic_batching.default_queue_policy", ""},
    {"dynamic_batching.default_queue_policy.max_queue_size", ""},
    {"dynamic_batching.default_queue_policy.timeout_action", ""},
    {"dynamic_batching.default_queue_policy.default_timeout_microseconds", ""},
    {"dynamic_batching.default_queue_policy.allow_timeout_override", ""},
    {"dynamic_batching.priority_levels", ""},
    {"dynamic_batching.default_priority_level", ""},
    {"dynamic_batching.priority_queue_policy", ""},
    {"sequence_batching", "not implemented by kilnd (stateful sequences, sequence_id)"},
    {"ensemble_scheduling", "not implemented by kilnd (ensembles)"},
    {"instance_group", ""},
    {"instance_group.name", ""},
    {"instance_group.kind", ""},
    {"instance_group.count", ""},
    {"instance_group.gpus", ""},
    {"instance_group.rate_limiter", "not implemented by kilnd (rate limiter)"},
    {"instance_group.profile", "not implemented by kilnd (TensorRT profiles)"},
    {"instance_group.passive", "not implemented by kilnd (passive instances)"},
    {"instance_group.host_policy", "not implemented by kilnd (host policies)"},
    {"default_model_filename", ""},
    {"cc_model_filenames", "not implemented by kilnd (per-GPU model files)"},
    {"metric_tags", "not implemented by kilnd (metric tags)"},
    {"parameters", ""},  // keys checked by CheckParameters
    {"runtime", "not implemented by kilnd (backend runtimes)"},
    {"model_warmup", ""},  // warmup.h
    {"model_warmup.name", ""},
    {"model_warmup.batch_size", ""},
    {"model_warmup.inputs", ""},
    {"model_warmup.count", ""},
    {"model_transaction_policy", ""},
    {"model_transaction_policy.decoupled", "not implemented by kilnd (decoupled models)"},
    {"response_cache", ""},
    {"response_cache.enable", ""},  // response_cache.h
};

const FieldRule* FindRule(std::string_view path) {
  for (const FieldRule& rule : kFieldRules) {
    if (std::string_view(rule.path) == path) return &rule;
  }
  return nullptr;
}

// The `parameters` keys each platform reads.
std::vector<std::string> KnownParameters(const inference::ModelConfig& config) {
  if (config.platform() == kPlatformBuiltin) return {"architecture", "symbolic_batch"};
  if (config.platform() == kPlatformOnnx || config.platform() == kPlatformOnnxruntime ||
      config.platform() == kPlatformGraph)
    return {"symbolic_batch"};
  if (config.platform() == kPlatformLlm) return {"max_ctx", "max_queue", "warm", "int8_activations"};  // ReadLlmConfig
  return {};
}

absl::Status CheckParameters(const inference::ModelConfig& config) {
  const std::vector<std::string> known = KnownParameters(config);
  for (const auto& [key, value] : config.parameters()) {
    bool ok = false;
    for (const std::string& k : known) ok = ok || k == key;
    if (ok && key == "symbolic_batch" && value.string_value() != "true" && value.string_value() != "false")
      return absl::InvalidArgumentError("config parameters[\"symbolic_batch\"]: neither \"true\" nor \"false\"");
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config parameters[\"", key.substr(0, 64), "\"]: not a parameter kilnd reads for platform ",
          config.platform(), known.empty() ? " (it reads none)"
                                           : absl::StrCat(" (it reads: ", absl::StrJoin(known, ", "), ")")));
    }
  }
  return absl::OkStatus();
}

absl::Status Walk(const google::protobuf::Message& m, const std::string& rule_prefix,
                  const std::string& where_prefix) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const FD*> fields;
  r->ListFields(m, &fields);
  for (const FD* f : fields) {
    const std::string path = rule_prefix + f->name();
    const std::string where = where_prefix + f->name();
    const FieldRule* rule = FindRule(path);
    if (rule == nullptr || *rule->reason != '\0') {
      return absl::InvalidArgumentError(absl::StrCat(
          "config ", where, ": ",
          rule == nullptr ? "not implemented by kilnd" : rule->reason,
          " -- remove it; kilnd refuses config it would not honour"));
    }
    if (f->cpp_type() != FD::CPPTYPE_MESSAGE || f->is_map()) continue;
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      const google::protobuf::Message& sub =
          f->is_repeated() ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f);
      const std::string sub_where = f->is_repeated() ? absl::StrCat(where, "[", i, "]") : where;
      if (absl::Status s = Walk(sub, path + ".", sub_where + "."); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckImplementedFields(const inference::ModelConfig& config) {
  if (absl::Status s = Walk(config, "", ""); !s.ok()) return s;
  return CheckParameters(config);
}

}  // namespace kiln::server
