#include "server/rest/rest_json.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "server/rest/json_parse.h"

namespace kiln::server {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void Str(Writer* w, const std::string& s) {
  w->String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

void Field(Writer* w, const char* key, const std::string& value) {
  w->Key(key);
  Str(w, value);
}

std::string Done(const rapidjson::StringBuffer& buffer) {
  return std::string(buffer.GetString(), buffer.GetSize());
}

void Tensors(Writer* w, const char* key, const std::vector<TensorMetadata>& tensors) {
  w->Key(key);
  w->StartArray();
  for (const TensorMetadata& t : tensors) {
    w->StartObject();
    Field(w, "name", t.name);
    Field(w, "datatype", t.datatype);
    w->Key("shape");
    w->StartArray();
    for (int64_t d : t.shape) w->Int64(d);
    w->EndArray();
    w->EndObject();
  }
  w->EndArray();
}

void DurationJson(Writer* w, const char* key, const Duration& d) {
  w->Key(key);
  w->StartObject();
  w->Key("count");
  w->Uint64(d.count);
  w->Key("ns");
  w->Uint64(d.ns);
  w->EndObject();
}

bool Is64BitInteger(const google::protobuf::FieldDescriptor* f) {
  using FD = google::protobuf::FieldDescriptor;
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT64:
    case FD::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

void ToNumber(rapidjson::Value* v, bool is_unsigned) {
  if (!v->IsString()) return;
  const std::string s(v->GetString(), v->GetStringLength());
  if (is_unsigned) {
    v->SetUint64(std::strtoull(s.c_str(), nullptr, 10));
  } else {
    v->SetInt64(std::strtoll(s.c_str(), nullptr, 10));
  }
}

// Protobuf's JSON writes 64-bit integers as strings; Triton's config JSON has numbers. Walks
// the document beside the descriptor (config messages nest a few levels; the walk is bounded
// by the descriptor, not by input).
void FixInt64(rapidjson::Value* object, const google::protobuf::Descriptor* d) {
  using FD = google::protobuf::FieldDescriptor;
  for (auto& member : object->GetObject()) {
    const std::string name(member.name.GetString(), member.name.GetStringLength());
    const FD* f = d->FindFieldByName(name);
    if (f == nullptr) continue;
    rapidjson::Value& v = member.value;
    if (f->is_map()) {
      const FD* value_field = f->message_type()->FindFieldByName("value");
      if (value_field->cpp_type() == FD::CPPTYPE_MESSAGE && v.IsObject()) {
        for (auto& entry : v.GetObject()) {
          if (entry.value.IsObject()) FixInt64(&entry.value, value_field->message_type());
        }
      }
      continue;
    }
    const bool is_unsigned = f->cpp_type() == FD::CPPTYPE_UINT64;
    if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
      if (f->is_repeated() && v.IsArray()) {
        for (auto& e : v.GetArray()) {
          if (e.IsObject()) FixInt64(&e, f->message_type());
        }
      } else if (v.IsObject()) {
        FixInt64(&v, f->message_type());
      }
    } else if (Is64BitInteger(f)) {
      if (f->is_repeated() && v.IsArray()) {
        for (auto& e : v.GetArray()) ToNumber(&e, is_unsigned);
      } else {
        ToNumber(&v, is_unsigned);
      }
    }
  }
}

}  // namespace

std::string ServerMetadataJson(const ServerMetadata& metadata) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Field(&w, "name", metadata.name);
  Field(&w, "version", metadata.version);
  w.Key("extensions");
  w.StartArray();
  for (const std::string& e : metadata.extensions) Str(&w, e);
  w.EndArray();
  w.EndObject();
  return Done(buffer);
}

std::string ModelMetadataJson(const ModelMetadata& metadata) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Field(&w, "name", metadata.name);
  w.Key("versions");
  w.StartArray();
  for (const std::string& v : metadata.versions) Str(&w, v);
  w.EndArray();
  Field(&w, "platform", metadata.platform);
  Tensors(&w, "inputs", metadata.inputs);
  Tensors(&w, "outputs", metadata.outputs);
  w.EndObject();
  return Done(buffer);
}

absl::StatusOr<std::string> ModelConfigJson(const inference::ModelConfig& config) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(config, &json, options).ok()) {
    return absl::InternalError("model config: cannot be written as JSON");
  }
  rapidjson::Document doc;
  if (!ParseJson(json, "model config", &doc).ok() || !doc.IsObject()) return json;
  FixInt64(&doc, inference::ModelConfig::descriptor());
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  doc.Accept(w);
  return Done(buffer);
}

std::string RepositoryIndexJson(const std::vector<RepositoryIndexEntry>& index) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  for (const RepositoryIndexEntry& e : index) {
    w.StartObject();
    Field(&w, "name", e.name);
    if (!e.version.empty()) Field(&w, "version", e.version);
    if (!e.state.empty()) Field(&w, "state", e.state);
    if (!e.reason.empty()) Field(&w, "reason", e.reason);
    w.EndObject();
  }
  w.EndArray();
  return Done(buffer);
}

std::string StatisticsJson(const std::vector<ModelStatsEntry>& stats) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("model_stats");
  w.StartArray();
  for (const ModelStatsEntry& e : stats) {
    const ModelStatsSnapshot& s = e.stats;
    w.StartObject();
    Field(&w, "name", e.name);
    Field(&w, "version", e.version);
    w.Key("last_inference");
    w.Uint64(s.last_inference_ms);
    w.Key("inference_count");
    w.Uint64(s.inference_count);
    w.Key("execution_count");
    w.Uint64(s.execution_count);
    w.Key("inference_stats");
    w.StartObject();
    DurationJson(&w, "success", s.success);
    DurationJson(&w, "fail", s.fail);
    DurationJson(&w, "queue", s.queue);
    DurationJson(&w, "compute_input", s.compute_input);
    DurationJson(&w, "compute_infer", s.compute_infer);
    DurationJson(&w, "compute_output", s.compute_output);
    DurationJson(&w, "cache_hit", s.cache_hit);
    DurationJson(&w, "cache_miss", s.cache_miss);
    w.EndObject();
    w.Key("batch_stats");
    w.StartArray();
    for (const auto& [size, b] : s.batch) {
      w.StartObject();
      w.Key("batch_size");
      w.Uint64(size);
      DurationJson(&w, "compute_input", b.compute_input);
      DurationJson(&w, "compute_infer", b.compute_infer);
      DurationJson(&w, "compute_output", b.compute_output);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Done(buffer);
}

absl::StatusOr<LoadOptions> DecodeLoadBody(const std::string& body) {
  LoadOptions options;
  if (body.empty()) return options;
  rapidjson::Document doc;
  if (absl::Status s = ParseJson(body, "request body", &doc); !s.ok()) return s;
  if (!doc.IsObject()) return absl::InvalidArgumentError("request body: expected a JSON object");
  auto params = doc.FindMember("parameters");
  if (params == doc.MemberEnd()) return options;
  if (!params->value.IsObject()) {
    return absl::InvalidArgumentError("parameters: expected an object");
  }
  for (const auto& p : params->value.GetObject()) {
    const std::string key(p.name.GetString(), p.name.GetStringLength());
    if (key == "config") {
      if (!p.value.IsString()) {
        return absl::InvalidArgumentError(
            "parameters.config: must be a string holding a JSON ModelConfig");
      }
      options.config_json = std::string(p.value.GetString(), p.value.GetStringLength());
    } else if (absl::StartsWith(key, "file:")) {
      options.has_file_overrides = true;
    }
  }
  return options;
}

absl::StatusOr<bool> DecodeIndexBody(const std::string& body) {
  if (body.empty()) return false;
  rapidjson::Document doc;
  if (absl::Status s = ParseJson(body, "request body", &doc); !s.ok()) return s;
  if (!doc.IsObject()) return absl::InvalidArgumentError("request body: expected a JSON object");
  auto ready = doc.FindMember("ready");
  if (ready == doc.MemberEnd()) return false;
  if (!ready->value.IsBool()) return absl::InvalidArgumentError("ready: expected true or false");
  return ready->value.GetBool();
}

std::string SharedMemoryStatusJson(const std::vector<SharedMemoryRegionStatus>& regions) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  for (const SharedMemoryRegionStatus& r : regions) {
    w.StartObject();
    Field(&w, "name", r.name);
    Field(&w, "key", r.key);
    w.Key("offset");
    w.Uint64(r.offset);
    w.Key("byte_size");
    w.Uint64(r.byte_size);
    w.EndObject();
  }
  w.EndArray();
  return Done(buffer);
}

absl::StatusOr<SharedMemoryRegistration> DecodeSharedMemoryRegisterBody(const std::string& body) {
  rapidjson::Document doc;
  if (absl::Status s = ParseJson(body, "request body", &doc); !s.ok()) return s;
  if (!doc.IsObject()) return absl::InvalidArgumentError("request body: expected a JSON object");
  SharedMemoryRegistration r;
  auto key = doc.FindMember("key");
  if (key == doc.MemberEnd() || !key->value.IsString()) {
    return absl::InvalidArgumentError("key: missing or not a string (the shared memory object's name)");
  }
  r.key.assign(key->value.GetString(), key->value.GetStringLength());
  if (auto offset = doc.FindMember("offset"); offset != doc.MemberEnd()) {
    if (!offset->value.IsUint64()) return absl::InvalidArgumentError("offset: expected a non-negative integer");
    r.offset = offset->value.GetUint64();
  }
  auto size = doc.FindMember("byte_size");
  if (size == doc.MemberEnd() || !size->value.IsUint64()) {
    return absl::InvalidArgumentError("byte_size: missing or not a non-negative integer");
  }
  r.byte_size = size->value.GetUint64();
  return r;
}

absl::StatusOr<LogSettingList> DecodeLogSettingsBody(const std::string& body) {
  LogSettingList updates;
  if (body.empty()) return updates;
  rapidjson::Document doc;
  if (absl::Status s = ParseJson(body, "request body", &doc); !s.ok()) return s;
  if (!doc.IsObject()) return absl::InvalidArgumentError("request body: expected a JSON object");
  for (const auto& m : doc.GetObject()) {
    std::string key(m.name.GetString(), std::min<size_t>(m.name.GetStringLength(), 64));
    if (m.value.IsBool()) {
      updates.emplace_back(std::move(key), m.value.GetBool());
    } else if (m.value.IsInt64()) {
      updates.emplace_back(std::move(key), m.value.GetInt64());
    } else if (m.value.IsString()) {
      updates.emplace_back(std::move(key), std::string(m.value.GetString(), m.value.GetStringLength()));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("settings.", key, ": expected a boolean, an integer or a string"));
    }
  }
  return updates;
}

std::string LogSettingsJson(const LogSettingList& settings) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  for (const auto& [key, value] : settings) {
    w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
    if (const bool* b = std::get_if<bool>(&value)) {
      w.Bool(*b);
    } else if (const int64_t* n = std::get_if<int64_t>(&value)) {
      w.Int64(*n);
    } else {
      Str(&w, std::get<std::string>(value));
    }
  }
  w.EndObject();
  return Done(buffer);
}

absl::StatusOr<TraceSettingUpdate> DecodeTraceSettingsBody(const std::string& body) {
  TraceSettingUpdate updates;
  if (body.empty()) return updates;
  rapidjson::Document doc;
  if (absl::Status s = ParseJson(body, "request body", &doc); !s.ok()) return s;
  if (!doc.IsObject()) return absl::InvalidArgumentError("request body: expected a JSON object");
  auto scalar = [](const rapidjson::Value& v, std::string* out) {
    if (v.IsString()) {
      out->assign(v.GetString(), v.GetStringLength());
    } else if (v.IsInt64()) {
      *out = std::to_string(v.GetInt64());
    } else {
      return false;
    }
    return true;
  };
  for (const auto& m : doc.GetObject()) {
    std::string key(m.name.GetString(), std::min<size_t>(m.name.GetStringLength(), 64));
    if (m.value.IsNull()) {
      updates.emplace_back(std::move(key), std::nullopt);
      continue;
    }
    std::vector<std::string> values;
    bool ok = true;
    if (m.value.IsArray()) {
      for (const auto& v : m.value.GetArray()) ok = ok && scalar(v, &values.emplace_back());
    } else {
      ok = scalar(m.value, &values.emplace_back());
    }
    if (!ok || values.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "settings.", key, ": expected a string, an integer, a list of them, or null"));
    }
    updates.emplace_back(std::move(key), std::move(values));
  }
  return updates;
}

std::string TraceSettingsJson(const TraceSettingMap& settings) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  for (const auto& [key, values] : settings) {
    w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
    if (key == "trace_level") {  // a list, as Triton's; the others one string
      w.StartArray();
      for (const std::string& v : values) Str(&w, v);
      w.EndArray();
    } else {
      Str(&w, values.empty() ? std::string() : values.front());
    }
  }
  w.EndObject();
  return Done(buffer);
}

}  // namespace kiln::server
