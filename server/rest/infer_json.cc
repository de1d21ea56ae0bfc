#include "server/rest/infer_json.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "server/core/datatype.h"
#include "server/core/limits.h"
#include "server/rest/json_parse.h"

namespace kiln::server {
namespace {

using rapidjson::Value;
using Writer = rapidjson::Writer<rapidjson::StringBuffer, rapidjson::UTF8<>, rapidjson::UTF8<>,
                                 rapidjson::CrtAllocator, rapidjson::kWriteNanAndInfFlag>;

absl::Status Bad(const std::string& where, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", std::string(what)));
}

template <typename T>
void Append(std::string* out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, as the wire is
  out->append(bytes, sizeof(T));
}

// One JSON leaf -> raw bytes of `type`, appended to `out`.
absl::Status AppendElement(const Value& v, inference::DataType type, const std::string& where,
                           std::string* out) {
  auto int_range = [&](int64_t lo, int64_t hi) -> absl::Status {
    if (!v.IsInt64() || v.GetInt64() < lo || v.GetInt64() > hi) {
      return Bad(where, absl::StrCat("expected an integer in [", lo, ", ", hi, "] for ",
                                     std::string(DataTypeName(type))));
    }
    return absl::OkStatus();
  };
  auto uint_range = [&](uint64_t hi) -> absl::Status {
    if (!v.IsUint64() || v.GetUint64() > hi) {
      return Bad(where, absl::StrCat("expected an integer in [0, ", hi, "] for ",
                                     std::string(DataTypeName(type))));
    }
    return absl::OkStatus();
  };
  switch (type) {
    case inference::TYPE_BOOL:
      if (!v.IsBool()) return Bad(where, "expected true or false for BOOL");
      out->push_back(v.GetBool() ? 1 : 0);
      return absl::OkStatus();
    case inference::TYPE_INT8:
      if (auto s = int_range(INT8_MIN, INT8_MAX); !s.ok()) return s;
      Append(out, static_cast<int8_t>(v.GetInt64()));
      return absl::OkStatus();
    case inference::TYPE_INT16:
      if (auto s = int_range(INT16_MIN, INT16_MAX); !s.ok()) return s;
      Append(out, static_cast<int16_t>(v.GetInt64()));
      return absl::OkStatus();
    case inference::TYPE_INT32:
      if (auto s = int_range(INT32_MIN, INT32_MAX); !s.ok()) return s;
      Append(out, static_cast<int32_t>(v.GetInt64()));
      return absl::OkStatus();
    case inference::TYPE_INT64:
      if (auto s = int_range(INT64_MIN, INT64_MAX); !s.ok()) return s;
      Append(out, v.GetInt64());
      return absl::OkStatus();
    case inference::TYPE_UINT8:
      if (auto s = uint_range(UINT8_MAX); !s.ok()) return s;
      Append(out, static_cast<uint8_t>(v.GetUint64()));
      return absl::OkStatus();
    case inference::TYPE_UINT16:
      if (auto s = uint_range(UINT16_MAX); !s.ok()) return s;
      Append(out, static_cast<uint16_t>(v.GetUint64()));
      return absl::OkStatus();
    case inference::TYPE_UINT32:
      if (auto s = uint_range(UINT32_MAX); !s.ok()) return s;
      Append(out, static_cast<uint32_t>(v.GetUint64()));
      return absl::OkStatus();
    case inference::TYPE_UINT64:
      if (auto s = uint_range(UINT64_MAX); !s.ok()) return s;
      Append(out, v.GetUint64());
      return absl::OkStatus();
    case inference::TYPE_FP32:
      if (!v.IsNumber()) return Bad(where, "expected a number for FP32");
      Append(out, static_cast<float>(v.GetDouble()));
      return absl::OkStatus();
    case inference::TYPE_FP64:
      if (!v.IsNumber()) return Bad(where, "expected a number for FP64");
      Append(out, v.GetDouble());
      return absl::OkStatus();
    case inference::TYPE_STRING:
      if (!v.IsString()) return Bad(where, "expected a string for BYTES");
      Append(out, static_cast<uint32_t>(v.GetStringLength()));
      out->append(v.GetString(), v.GetStringLength());
      return absl::OkStatus();
    default:
      return Bad(where, absl::StrCat("datatype ", std::string(DataTypeName(type)),
                                     " cannot be sent as JSON data; use binary data"));
  }
}

// Flattens nested `data` arrays (row-major) into raw bytes, without recursion. Sets *count.
absl::Status ConvertData(const Value& data, inference::DataType type, const std::string& where,
                         std::string* out, int64_t* count) {
  if (!data.IsArray()) {
    // A scalar is accepted as a one-element tensor.
    *count = 1;
    return AppendElement(data, type, where, out);
  }
  struct Frame {
    const Value* array;
    rapidjson::SizeType next;
  };
  std::vector<Frame> stack{{&data, 0}};
  *count = 0;
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next == top.array->Size()) {
      stack.pop_back();
      continue;
    }
    const Value& v = (*top.array)[top.next++];
    if (v.IsArray()) {
      stack.push_back({&v, 0});
      continue;
    }
    if (absl::Status s = AppendElement(v, type, absl::StrCat(where, "[", *count, "]"), out);
        !s.ok()) {
      return s;
    }
    ++*count;
  }
  return absl::OkStatus();
}

const Value* Member(const Value& object, const char* name) {
  auto it = object.FindMember(name);
  return it == object.MemberEnd() ? nullptr : &it->value;
}

absl::Status GetName(const Value& object, const std::string& where, std::string* name) {
  const Value* v = Member(object, "name");
  if (v == nullptr || !v->IsString()) return Bad(where + ".name", "missing or not a string");
  if (v->GetStringLength() > static_cast<rapidjson::SizeType>(kMaxNameLength)) {
    return Bad(where + ".name",
               absl::StrCat(v->GetStringLength(), " bytes exceeds the limit of ", kMaxNameLength));
  }
  name->assign(v->GetString(), v->GetStringLength());
  return absl::OkStatus();
}

// Product of `shape` or -1 when a dim is negative or the product overflows (the core reports it).
int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

// The shared memory parameters of a tensor's `parameters` object (null: none).
absl::StatusOr<SharedMemoryParams> SharedMemoryParamsOf(const Value* params, const std::string& where) {
  SharedMemoryParams p;
  if (params == nullptr) return p;
  if (const Value* r = Member(*params, "shared_memory_region"); r != nullptr) {
    if (!r->IsString()) return Bad(where + ".shared_memory_region", "expected a string");
    p.region = std::string(r->GetString(), r->GetStringLength());
  }
  if (const Value* o = Member(*params, "shared_memory_offset"); o != nullptr) {
    if (!o->IsInt64()) return Bad(where + ".shared_memory_offset", "expected an integer");
    p.offset = o->GetInt64();
  }
  if (const Value* b = Member(*params, "shared_memory_byte_size"); b != nullptr) {
    if (!b->IsInt64()) return Bad(where + ".shared_memory_byte_size", "expected an integer");
    p.byte_size = b->GetInt64();
  }
  return p;
}

absl::Status DecodeInput(const Value& in, size_t i, std::string_view* binary,
                         const SharedMemoryManager* shared_memory, HttpInferRequest* out) {
  const std::string where = absl::StrCat("inputs[", i, "]");
  if (!in.IsObject()) return Bad(where, "expected an object");
  InferInput input;
  if (absl::Status s = GetName(in, where, &input.name); !s.ok()) return s;
  const Value* datatype = Member(in, "datatype");
  if (datatype == nullptr || !datatype->IsString()) {
    return Bad(where + ".datatype", "missing or not a string");
  }
  input.datatype.assign(datatype->GetString(), std::min<size_t>(datatype->GetStringLength(), 64));
  const Value* shape = Member(in, "shape");
  if (shape == nullptr || !shape->IsArray())
    return Bad(where + ".shape", "missing or not an array");
  if (shape->Size() > static_cast<rapidjson::SizeType>(kMaxTensorRank)) {
    return Bad(where + ".shape",
               absl::StrCat("rank ", shape->Size(), " exceeds the limit of ", kMaxTensorRank));
  }
  std::vector<int64_t>& dims = out->shapes[i];
  for (rapidjson::SizeType k = 0; k < shape->Size(); ++k) {
    if (!(*shape)[k].IsInt64()) {
      return Bad(absl::StrCat(where, ".shape[", k, "]"), "expected an integer");
    }
    dims.push_back((*shape)[k].GetInt64());
  }
  const Value* params = Member(in, "parameters");
  const Value* binary_size = nullptr;
  if (params != nullptr) {
    if (!params->IsObject()) return Bad(where + ".parameters", "expected an object");
    binary_size = Member(*params, "binary_data_size");
  }
  const Value* data = Member(in, "data");
  absl::StatusOr<SharedMemoryParams> shm = SharedMemoryParamsOf(params, where + ".parameters");
  if (!shm.ok()) return shm.status();
  if (shm->any()) {  // shared_memory.h
    if (data != nullptr || binary_size != nullptr) {
      return Bad(where, "has shared memory parameters and also data or parameters.binary_data_size (use one)");
    }
    if (shared_memory == nullptr) return Bad(where + ".parameters", "shared memory is not supported here");
    absl::StatusOr<SharedMemoryBlock> block = shared_memory->Resolve(*shm, where + ".parameters");
    if (!block.ok()) return block.status();
    input.raw = std::string_view(block->data, block->size);
    input.shared_memory = true;
    out->request.shared_memory_holds.push_back(std::move(block->hold));
  } else if (binary_size != nullptr) {
    if (data != nullptr) return Bad(where, "has both data and parameters.binary_data_size");
    if (!binary_size->IsUint64()) {
      return Bad(where + ".parameters.binary_data_size", "expected a non-negative integer");
    }
    const uint64_t n = binary_size->GetUint64();
    if (n > binary->size()) {
      return Bad(where + ".parameters.binary_data_size",
                 absl::StrCat(n, " bytes but only ", binary->size(),
                              " bytes of binary data remain in the body"));
    }
    input.raw = binary->substr(0, n);
    binary->remove_prefix(n);
  } else {
    if (data == nullptr) return Bad(where, "has neither data nor parameters.binary_data_size");
    std::optional<inference::DataType> type = ParseDataTypeName(input.datatype);
    if (!type) {
      return Bad(where + ".datatype", absl::StrCat("unknown datatype '", input.datatype, "'"));
    }
    int64_t count = 0;
    if (absl::Status s = ConvertData(*data, *type, where + ".data", &out->converted[i], &count);
        !s.ok()) {
      return s;
    }
    const int64_t want = ElementCount(dims);
    if (want >= 0 && want != count) {
      return Bad(where + ".data", absl::StrCat(count, " elements but shape needs ", want));
    }
  }
  out->request.inputs.push_back(std::move(input));
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeInferRequest(std::string* body, int64_t header_length, const std::string& model,
                                const std::string& version, HttpInferRequest* out,
                                const SharedMemoryManager* shared_memory) {
  std::string_view binary;
  std::string header;  // the JSON part when binary data follows it (in-place parsing needs a NUL)
  std::string* json = body;
  if (header_length >= 0) {
    if (static_cast<uint64_t>(header_length) > body->size()) {
      return Bad("Inference-Header-Content-Length",
                 absl::StrCat(header_length, " exceeds the body size ", body->size()));
    }
    header.assign(*body, 0, header_length);
    json = &header;
    binary = std::string_view(*body).substr(header_length);
  }
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonInPlace(json, "request body", &doc); !s.ok()) return s;
  if (!doc.IsObject()) return Bad("request body", "expected a JSON object");

  InferRequest& request = out->request;
  request.model_name = model;
  request.model_version = version;
  request.protocol = "http";
  if (const Value* id = Member(doc, "id"); id != nullptr) {
    if (!id->IsString()) return Bad("id", "expected a string");
    if (id->GetStringLength() > static_cast<rapidjson::SizeType>(kMaxNameLength)) {
      return Bad("id", absl::StrCat(id->GetStringLength(), " bytes exceeds the limit of ",
                                    kMaxNameLength));
    }
    request.id.assign(id->GetString(), id->GetStringLength());
  }
  if (const Value* params = Member(doc, "parameters"); params != nullptr) {
    if (!params->IsObject()) return Bad("parameters", "expected an object");
    for (auto it = params->MemberBegin(); it != params->MemberEnd(); ++it) {  // infer_request.h
      std::string key(it->name.GetString(), it->name.GetStringLength());
      const Value& v = it->value;
      if (v.IsBool()) {
        request.parameters.emplace_back(std::move(key), v.GetBool());
      } else if (v.IsInt64()) {
        request.parameters.emplace_back(std::move(key), v.GetInt64());
      } else if (v.IsUint64()) {
        request.parameters.emplace_back(std::move(key), v.GetUint64());
      } else if (v.IsNumber()) {
        request.parameters.emplace_back(std::move(key), v.GetDouble());
      } else if (v.IsString()) {
        request.parameters.emplace_back(std::move(key),
                                        std::string(v.GetString(), v.GetStringLength()));
      } else if (!v.IsNull()) {
        rapidjson::StringBuffer text;
        Writer w(text);
        v.Accept(w);
        request.parameters.emplace_back(
            std::move(key), ParameterJson{std::string(text.GetString(), text.GetSize())});
      }
    }
    if (const Value* b = Member(*params, "binary_data_output"); b != nullptr) {
      if (!b->IsBool()) return Bad("parameters.binary_data_output", "expected true or false");
      out->binary_output_default = b->GetBool();
    }
    if (const Value* pr = Member(*params, "priority"); pr != nullptr) {
      if (!pr->IsUint64()) return Bad("parameters.priority", "expected a non-negative integer");
      request.priority = pr->GetUint64();
    }
    if (const Value* v = Member(*params, "kiln_viz"); v != nullptr) {  // infer_request.h
      if (!v->IsBool()) return Bad("parameters.kiln_viz", "expected true or false");
      request.viz = v->GetBool();
    }
    if (const Value* t = Member(*params, "timeout"); t != nullptr) {
      if (!t->IsInt64()) return Bad("parameters.timeout", "expected an integer (microseconds)");
      if (absl::Status s = ApplyTimeoutParameter(t->GetInt64(), &request); !s.ok()) return s;
    }
  }
  const Value* inputs = Member(doc, "inputs");
  if (inputs == nullptr || !inputs->IsArray()) return Bad("inputs", "missing or not an array");
  if (inputs->Size() > static_cast<rapidjson::SizeType>(kMaxTensorsPerModel)) {
    return Bad("inputs",
               absl::StrCat(inputs->Size(), " inputs exceed the limit of ", kMaxTensorsPerModel));
  }
  const size_t n = inputs->Size();
  out->shapes.assign(n, {});
  out->converted.assign(n, {});
  request.inputs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (absl::Status s =
            DecodeInput((*inputs)[static_cast<rapidjson::SizeType>(i)], i, &binary, shared_memory, out);
        !s.ok()) {
      return s;
    }
  }
  if (!binary.empty()) {
    return Bad("request body", absl::StrCat(binary.size(),
                                            " bytes after the JSON header are not claimed by any "
                                            "input's parameters.binary_data_size"));
  }
  // Storage is final: point the inputs at it.
  int64_t wire_inputs = 0;  // not in shared memory
  for (size_t i = 0; i < n; ++i) {
    InferInput& in = request.inputs[i];
    in.shape = absl::MakeConstSpan(out->shapes[i]);
    if (in.shared_memory) continue;
    ++wire_inputs;
    if (in.raw.data() == nullptr) in.raw = out->converted[i];
  }
  request.raw_input_count = wire_inputs;

  if (const Value* outputs = Member(doc, "outputs"); outputs != nullptr) {
    if (!outputs->IsArray()) return Bad("outputs", "expected an array");
    if (outputs->Size() > static_cast<rapidjson::SizeType>(kMaxTensorsPerModel)) {
      return Bad("outputs", absl::StrCat(outputs->Size(), " outputs exceed the limit of ",
                                         kMaxTensorsPerModel));
    }
    for (rapidjson::SizeType i = 0; i < outputs->Size(); ++i) {
      const Value& o = (*outputs)[i];
      const std::string where = absl::StrCat("outputs[", i, "]");
      if (!o.IsObject()) return Bad(where, "expected an object");
      std::string name;
      if (absl::Status s = GetName(o, where, &name); !s.ok()) return s;
      if (const Value* params = Member(o, "parameters"); params != nullptr) {
        if (!params->IsObject()) return Bad(where + ".parameters", "expected an object");
        if (const Value* b = Member(*params, "binary_data"); b != nullptr) {
          if (!b->IsBool()) return Bad(where + ".parameters.binary_data", "expected true or false");
          out->output_binary[name] = b->GetBool();
        }
        if (const Value* c = Member(*params, "classification"); c != nullptr) {  // classification.h
          if (!c->IsInt64() || c->GetInt64() < 0) {
            return Bad(where + ".parameters.classification", "expected a non-negative integer");
          }
          request.classification.resize(outputs->Size(), 0);
          request.classification[i] = c->GetInt64();
        }
        absl::StatusOr<SharedMemoryParams> shm = SharedMemoryParamsOf(params, where + ".parameters");
        if (!shm.ok()) return shm.status();
        if (shm->any()) {  // written into the region by the core; the answer has no data for it
          if (shared_memory == nullptr) {
            return Bad(where + ".parameters", "shared memory is not supported here");
          }
          absl::StatusOr<SharedMemoryBlock> block = shared_memory->Resolve(*shm, where + ".parameters");
          if (!block.ok()) return block.status();
          request.shared_memory_outputs.push_back({name, *std::move(block)});
        }
      }
      request.requested_outputs.push_back(std::move(name));
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeRawInferRequest(std::string_view body, const ModelMetadata& metadata,
                                   const std::string& version, HttpInferRequest* out) {
  if (metadata.inputs.size() != 1) {
    return Bad("Inference-Header-Content-Length",
               absl::StrCat("0 (a raw binary body) needs a model with one input; '", metadata.name,
                            "' has ", metadata.inputs.size()));
  }
  const TensorMetadata& t = metadata.inputs[0];
  std::vector<int64_t>& dims = out->shapes.emplace_back(t.shape);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] >= 0) continue;
    if (i != 0) {
      return Bad("Inference-Header-Content-Length",
                 absl::StrCat("0 (a raw binary body) needs fixed dims; input '", t.name,
                              "' has a variable dim ", i));
    }
    dims[i] = 1;  // the batch dimension: batch 1
  }
  InferRequest& request = out->request;
  request.model_name = metadata.name;
  request.model_version = version;
  request.protocol = "http";
  InferInput input;
  input.name = t.name;
  input.datatype = t.datatype;
  input.shape = absl::MakeConstSpan(dims);
  input.raw = body;
  request.inputs.push_back(std::move(input));
  request.raw_input_count = 1;
  out->binary_output_default = true;
  return absl::OkStatus();
}

namespace {

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void WriteData(const InferOutput& out, Writer* w) {
  std::optional<inference::DataType> type = ParseDataTypeName(out.datatype);
  const std::string& raw = out.raw;
  const char* p = raw.data();
  const char* end = raw.data() + raw.size();
  w->StartArray();
  const int64_t size = type ? DataTypeByteSize(*type) : 0;
  if (type && *type == inference::TYPE_STRING) {
    while (end - p >= 4) {
      const uint32_t len = Load<uint32_t>(p);
      p += 4;
      if (len > static_cast<uint64_t>(end - p)) break;
      w->String(p, len);
      p += len;
    }
  } else if (type && size > 0) {
    for (; end - p >= size; p += size) {
      switch (*type) {
        case inference::TYPE_BOOL:
          w->Bool(*p != 0);
          break;
        case inference::TYPE_INT8:
          w->Int(Load<int8_t>(p));
          break;
        case inference::TYPE_INT16:
          w->Int(Load<int16_t>(p));
          break;
        case inference::TYPE_INT32:
          w->Int(Load<int32_t>(p));
          break;
        case inference::TYPE_INT64:
          w->Int64(Load<int64_t>(p));
          break;
        case inference::TYPE_UINT8:
          w->Uint(Load<uint8_t>(p));
          break;
        case inference::TYPE_UINT16:
          w->Uint(Load<uint16_t>(p));
          break;
        case inference::TYPE_UINT32:
          w->Uint(Load<uint32_t>(p));
          break;
        case inference::TYPE_UINT64:
          w->Uint64(Load<uint64_t>(p));
          break;
        case inference::TYPE_FP32:
          w->Double(Load<float>(p));
          break;
        case inference::TYPE_FP64:
          w->Double(Load<double>(p));
          break;
        default:
          break;  // FP16/BF16 are always sent binary
      }
    }
  }
  w->EndArray();
}

bool WantsBinary(const InferOutput& out, const HttpInferRequest& request) {
  if (out.datatype == "FP16" || out.datatype == "BF16") return true;  // no JSON form
  auto it = request.output_binary.find(out.name);
  return it != request.output_binary.end() ? it->second : request.binary_output_default;
}

}  // namespace

HttpInferResponse EncodeInferResponse(const InferResponse& response,
                                      const HttpInferRequest& request) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("model_name");
  w.String(response.model_name.data(),
           static_cast<rapidjson::SizeType>(response.model_name.size()));
  w.Key("model_version");
  w.String(response.model_version.data(),
           static_cast<rapidjson::SizeType>(response.model_version.size()));
  if (!response.id.empty()) {
    w.Key("id");
    w.String(response.id.data(), static_cast<rapidjson::SizeType>(response.id.size()));
  }
  w.Key("outputs");
  w.StartArray();
  size_t binary_bytes = 0;
  std::vector<const InferOutput*> binary;
  for (const InferOutput& out : response.outputs) {
    w.StartObject();
    w.Key("name");
    w.String(out.name.data(), static_cast<rapidjson::SizeType>(out.name.size()));
    w.Key("datatype");
    w.String(out.datatype.data(), static_cast<rapidjson::SizeType>(out.datatype.size()));
    w.Key("shape");
    w.StartArray();
    for (int64_t d : out.shape) w.Int64(d);
    w.EndArray();
    if (out.in_shared_memory) {
      // The bytes are in the request's region: neither data nor binary_data_size, as Triton's.
    } else if (WantsBinary(out, request)) {
      w.Key("parameters");
      w.StartObject();
      w.Key("binary_data_size");
      w.Uint64(out.raw.size());
      w.EndObject();
      binary.push_back(&out);
      binary_bytes += out.raw.size();
    } else {
      w.Key("data");
      WriteData(out, &w);
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  HttpInferResponse result;
  result.json_length = static_cast<int64_t>(buffer.GetSize());
  result.has_binary = !binary.empty();
  result.body.reserve(buffer.GetSize() + binary_bytes);
  result.body.append(buffer.GetString(), buffer.GetSize());
  for (const InferOutput* out : binary) result.body.append(out->raw);
  return result;
}

}  // namespace kiln::server
