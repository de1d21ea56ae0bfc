#include "server/grpc/codec.h"

#include <string>
#include <variant>

#include "absl/strings/match.h"

namespace kiln::server {
namespace {

void CountContents(const inference::InferTensorContents& c, InferInput* in) {
  auto set = [in](ContentsField f, int n) { in->typed_counts[static_cast<int>(f)] = n; };
  set(ContentsField::kBool, c.bool_contents_size());
  set(ContentsField::kInt, c.int_contents_size());
  set(ContentsField::kInt64, c.int64_contents_size());
  set(ContentsField::kUint, c.uint_contents_size());
  set(ContentsField::kUint64, c.uint64_contents_size());
  set(ContentsField::kFp32, c.fp32_contents_size());
  set(ContentsField::kFp64, c.fp64_contents_size());
  set(ContentsField::kBytes, c.bytes_contents_size());
  auto span = [](const auto& field) { return absl::MakeConstSpan(field.data(), field.size()); };
  in->typed.bools = span(c.bool_contents());
  in->typed.ints = span(c.int_contents());
  in->typed.int64s = span(c.int64_contents());
  in->typed.uints = span(c.uint_contents());
  in->typed.uint64s = span(c.uint64_contents());
  in->typed.fp32s = span(c.fp32_contents());
  in->typed.fp64s = span(c.fp64_contents());
  in->typed.bytes.assign(c.bytes_contents().begin(), c.bytes_contents().end());
}

bool HasSharedMemoryParameters(const google::protobuf::Map<std::string, inference::InferParameter>& p) {
  return p.contains("shared_memory_region") || p.contains("shared_memory_byte_size") ||
         p.contains("shared_memory_offset");
}

// The shared memory parameters of one tensor (string region, int64 or uint64 offset and size).
absl::StatusOr<SharedMemoryParams> DecodeSharedMemoryParameters(
    const google::protobuf::Map<std::string, inference::InferParameter>& params,
    const std::string& where) {
  SharedMemoryParams out;
  if (auto it = params.find("shared_memory_region"); it != params.end()) {
    if (it->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".shared_memory_region: expected a string_param"));
    }
    out.region = it->second.string_param();
  }
  auto integer = [&](const char* key, std::optional<int64_t>* value) -> absl::Status {
    auto it = params.find(key);
    if (it == params.end()) return absl::OkStatus();
    const inference::InferParameter& p = it->second;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) {
      *value = p.int64_param();
    } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param &&
               p.uint64_param() <= static_cast<uint64_t>(INT64_MAX)) {
      *value = static_cast<int64_t>(p.uint64_param());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".", key, ": expected a non-negative int64_param"));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = integer("shared_memory_offset", &out.offset); !s.ok()) return s;
  if (absl::Status s = integer("shared_memory_byte_size", &out.byte_size); !s.ok()) return s;
  return out;
}

void EncodeDuration(const Duration& d, inference::StatisticDuration* wire) {
  wire->set_count(d.count);
  wire->set_ns(d.ns);
}

}  // namespace

InferRequest DecodeInferRequest(const inference::ModelInferRequest& wire) {
  InferRequest request;
  request.model_name = wire.model_name();
  request.model_version = wire.model_version();
  request.id = wire.id();
  request.raw_input_count = wire.raw_input_contents_size();
  request.inputs.reserve(wire.inputs_size());
  int raw_index = 0;
  for (int i = 0; i < wire.inputs_size(); ++i) {
    const auto& t = wire.inputs(i);
    InferInput in;
    in.name = t.name();
    in.datatype = t.datatype();
    in.shape = absl::Span<const int64_t>(t.shape().data(), t.shape_size());
    in.has_contents = t.has_contents();
    if (in.has_contents) CountContents(t.contents(), &in);
    // raw_input_contents are, in order, those of the inputs not in shared memory (as Triton's).
    in.shared_memory = HasSharedMemoryParameters(t.parameters());
    if (!in.shared_memory && raw_index < wire.raw_input_contents_size()) {
      in.raw = wire.raw_input_contents(raw_index++);
    }
    request.inputs.push_back(std::move(in));
  }
  for (const auto& out : wire.outputs()) request.requested_outputs.push_back(out.name());
  return request;
}

absl::Status ApplyRequestParameters(const inference::ModelInferRequest& wire,
                                    InferRequest* request, const SharedMemoryManager* shared_memory) {
  for (const auto& [key, p] : wire.parameters()) {  // all of them, for kiln_llm (infer_request.h)
    switch (p.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam:
        request->parameters.emplace_back(key, p.bool_param());
        break;
      case inference::InferParameter::kInt64Param:
        request->parameters.emplace_back(key, p.int64_param());
        break;
      case inference::InferParameter::kUint64Param:
        request->parameters.emplace_back(key, p.uint64_param());
        break;
      case inference::InferParameter::kDoubleParam:
        request->parameters.emplace_back(key, p.double_param());
        break;
      case inference::InferParameter::kStringParam:
        request->parameters.emplace_back(key, p.string_param());
        break;
      default:
        break;  // no value
    }
  }
  for (int i = 0; i < wire.inputs_size(); ++i) {  // shared_memory.h
    if (i >= static_cast<int>(request->inputs.size()) || !request->inputs[i].shared_memory) continue;
    const std::string where = absl::StrCat("inputs[", i, "].parameters");
    if (shared_memory == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shared memory is not supported here"));
    }
    absl::StatusOr<SharedMemoryParams> params = DecodeSharedMemoryParameters(wire.inputs(i).parameters(), where);
    if (!params.ok()) return params.status();
    absl::StatusOr<SharedMemoryBlock> block = shared_memory->Resolve(*params, where);
    if (!block.ok()) return block.status();
    request->inputs[i].raw = std::string_view(block->data, block->size);
    request->shared_memory_holds.push_back(std::move(block->hold));
  }
  for (int i = 0; i < wire.outputs_size(); ++i) {
    if (!HasSharedMemoryParameters(wire.outputs(i).parameters())) continue;
    const std::string where = absl::StrCat("outputs[", i, "].parameters");
    if (shared_memory == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shared memory is not supported here"));
    }
    absl::StatusOr<SharedMemoryParams> params = DecodeSharedMemoryParameters(wire.outputs(i).parameters(), where);
    if (!params.ok()) return params.status();
    absl::StatusOr<SharedMemoryBlock> block = shared_memory->Resolve(*params, where);
    if (!block.ok()) return block.status();
    request->shared_memory_outputs.push_back({wire.outputs(i).name(), *std::move(block)});
  }
  for (int i = 0; i < wire.outputs_size(); ++i) {  // classification.h
    auto c = wire.outputs(i).parameters().find("classification");
    if (c == wire.outputs(i).parameters().end()) continue;
    const inference::InferParameter& p = c->second;
    const int64_t k = p.parameter_choice_case() == inference::InferParameter::kInt64Param ? p.int64_param()
                      : p.parameter_choice_case() == inference::InferParameter::kUint64Param &&
                              p.uint64_param() <= static_cast<uint64_t>(INT64_MAX)
                          ? static_cast<int64_t>(p.uint64_param())
                          : -1;
    if (k < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].parameters.classification: expected a non-negative int64_param"));
    }
    request->classification.resize(wire.outputs_size(), 0);
    request->classification[i] = k;
  }
  if (auto pr = wire.parameters().find("priority"); pr != wire.parameters().end()) {
    const inference::InferParameter& p = pr->second;
    if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      request->priority = p.uint64_param();
    } else if (p.parameter_choice_case() == inference::InferParameter::kInt64Param &&
               p.int64_param() >= 0) {
      request->priority = static_cast<uint64_t>(p.int64_param());
    } else {
      return absl::InvalidArgumentError(
          "parameters.priority: expected a non-negative uint64_param or int64_param");
    }
  }
  // kiln_viz: infer_request.h
  if (auto v = wire.parameters().find("kiln_viz"); v != wire.parameters().end()) {
    if (v->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
      return absl::InvalidArgumentError("parameters.kiln_viz: expected a bool_param");
    }
    request->viz = v->second.bool_param();
  }
  auto it = wire.parameters().find("timeout");
  if (it == wire.parameters().end()) return absl::OkStatus();
  const inference::InferParameter& p = it->second;
  if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) {
    return ApplyTimeoutParameter(p.int64_param(), request);
  }
  if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
    const uint64_t v = p.uint64_param();
    return ApplyTimeoutParameter(
        v > static_cast<uint64_t>(INT64_MAX) ? int64_t{-1} : static_cast<int64_t>(v), request);
  }
  return absl::InvalidArgumentError(
      "parameters.timeout: expected int64_param or uint64_param (microseconds)");
}

void EncodeInferResponse(const InferResponse& response, inference::ModelInferResponse* wire) {
  wire->set_model_name(response.model_name);
  wire->set_model_version(response.model_version);
  wire->set_id(response.id);
  for (const InferOutput& out : response.outputs) {
    auto* t = wire->add_outputs();
    t->set_name(out.name);
    t->set_datatype(out.datatype);
    for (int64_t d : out.shape) t->add_shape(d);
    wire->add_raw_output_contents(out.raw);  // empty for an output in shared memory, as Triton's
  }
  for (const auto& [key, value] : response.parameters) {
    inference::InferParameter& p = (*wire->mutable_parameters())[key];
    if (const bool* b = std::get_if<bool>(&value)) {
      p.set_bool_param(*b);
    } else if (const int64_t* i = std::get_if<int64_t>(&value)) {
      p.set_int64_param(*i);
    } else if (const uint64_t* u = std::get_if<uint64_t>(&value)) {
      p.set_uint64_param(*u);
    } else if (const double* d = std::get_if<double>(&value)) {
      p.set_double_param(*d);
    } else if (const std::string* str = std::get_if<std::string>(&value)) {
      p.set_string_param(*str);
    } else {
      p.set_string_param(std::get<ParameterJson>(value).text);
    }
  }
}

absl::StatusOr<LoadOptions> DecodeLoadParameters(
    const google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& params) {
  LoadOptions options;
  for (const auto& [key, value] : params) {
    if (key == "config") {
      if (value.parameter_choice_case() != inference::ModelRepositoryParameter::kStringParam) {
        return absl::InvalidArgumentError(
            "parameters[config]: must be a string_param holding a JSON ModelConfig");
      }
      options.config_json = value.string_param();
    } else if (absl::StartsWith(key, "file:")) {
      options.has_file_overrides = true;
    }
  }
  return options;
}

void EncodeServerMetadata(const ServerMetadata& metadata, inference::ServerMetadataResponse* wire) {
  wire->set_name(metadata.name);
  wire->set_version(metadata.version);
  for (const std::string& e : metadata.extensions) wire->add_extensions(e);
}

void EncodeModelMetadata(const ModelMetadata& metadata, inference::ModelMetadataResponse* wire) {
  wire->set_name(metadata.name);
  wire->set_platform(metadata.platform);
  for (const std::string& v : metadata.versions) wire->add_versions(v);
  auto encode = [](const TensorMetadata& t, inference::ModelMetadataResponse::TensorMetadata* w) {
    w->set_name(t.name);
    w->set_datatype(t.datatype);
    for (int64_t d : t.shape) w->add_shape(d);
  };
  for (const auto& t : metadata.inputs) encode(t, wire->add_inputs());
  for (const auto& t : metadata.outputs) encode(t, wire->add_outputs());
}

void EncodeRepositoryIndex(const std::vector<RepositoryIndexEntry>& index,
                           inference::RepositoryIndexResponse* wire) {
  for (const RepositoryIndexEntry& e : index) {
    auto* m = wire->add_models();
    m->set_name(e.name);
    m->set_version(e.version);
    m->set_state(e.state);
    m->set_reason(e.reason);
  }
}

void EncodeSharedMemoryStatus(const std::vector<SharedMemoryRegionStatus>& regions,
                              inference::SystemSharedMemoryStatusResponse* wire) {
  for (const SharedMemoryRegionStatus& r : regions) {
    auto& status = (*wire->mutable_regions())[r.name];
    status.set_name(r.name);
    status.set_key(r.key);
    status.set_offset(r.offset);
    status.set_byte_size(r.byte_size);
  }
}

void EncodeStatistics(const std::vector<ModelStatsEntry>& stats,
                      inference::ModelStatisticsResponse* wire) {
  for (const ModelStatsEntry& e : stats) {
    auto* m = wire->add_model_stats();
    const ModelStatsSnapshot& s = e.stats;
    m->set_name(e.name);
    m->set_version(e.version);
    m->set_last_inference(s.last_inference_ms);
    m->set_inference_count(s.inference_count);
    m->set_execution_count(s.execution_count);
    auto* is = m->mutable_inference_stats();
    EncodeDuration(s.success, is->mutable_success());
    EncodeDuration(s.fail, is->mutable_fail());
    EncodeDuration(s.queue, is->mutable_queue());
    EncodeDuration(s.compute_input, is->mutable_compute_input());
    EncodeDuration(s.compute_infer, is->mutable_compute_infer());
    EncodeDuration(s.compute_output, is->mutable_compute_output());
    EncodeDuration(s.cache_hit, is->mutable_cache_hit());
    EncodeDuration(s.cache_miss, is->mutable_cache_miss());
    for (const auto& [size, b] : s.batch) {
      auto* bs = m->add_batch_stats();
      bs->set_batch_size(size);
      EncodeDuration(b.compute_input, bs->mutable_compute_input());
      EncodeDuration(b.compute_infer, bs->mutable_compute_infer());
      EncodeDuration(b.compute_output, bs->mutable_compute_output());
    }
  }
}

}  // namespace kiln::server
