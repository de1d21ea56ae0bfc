// Fuzz target: a KServe v2 REST inference body (POST /v2/models/<m>/infer) through the REST
// gateway's parsers (server/rest/json_parse.cc, infer_json.cc) and request validation
// (server/core/validate.cc), then the response encoder over the validated inputs' bytes.
//
// Input layout: byte 0 picks the model (index into fuzz_configs.h's Configs(), modulo), bytes 1..4
// are Inference-Header-Content-Length as a little-endian uint32 (0xffffffff: header absent, the
// whole body is JSON; 0: the binary extension's raw form), the rest is the body.
//
// Oracles: CheckJson, ParseJson and ParseJsonInPlace agree on whether the JSON part is valid; a
// validated request passes the same invariants as the gRPC target's; the encoded response is JSON
// (NaN/Inf literals allowed, as kilnd writes them) whose length is json_length, followed by exactly
// the binary outputs' bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "rapidjson/document.h"
#include "server/core/datatype.h"
#include "server/core/validate.h"
#include "server/rest/infer_json.h"
#include "server/rest/json_parse.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_configs.h"

namespace {

using kiln::server::HttpInferRequest;

kiln::server::ModelMetadata MetadataOf(const inference::ModelConfig& config) {
  kiln::server::ModelMetadata m;
  m.name = config.name();
  const bool batching = config.max_batch_size() > 0;
  for (const auto& in : config.input()) {
    kiln::server::TensorMetadata t;
    t.name = in.name();
    t.datatype = std::string(kiln::server::DataTypeName(in.data_type()));
    if (batching) t.shape.push_back(-1);
    t.shape.insert(t.shape.end(), in.dims().begin(), in.dims().end());
    m.inputs.push_back(std::move(t));
  }
  return m;
}

// The three JSON entry points agree on `json`.
void CheckJsonAgreement(const std::string& json) {
  const bool checked = kiln::server::CheckJson(json, "fuzz").ok();
  rapidjson::Document doc;
  const bool parsed = kiln::server::ParseJson(json, "fuzz", &doc).ok();
  std::string copy = json;
  rapidjson::Document in_place;
  const bool parsed_in_place = kiln::server::ParseJsonInPlace(&copy, "fuzz", &in_place).ok();
  FUZZ_CHECK(checked == parsed && parsed == parsed_in_place,
             "CheckJson / ParseJson / ParseJsonInPlace disagree on the same text");
}

// Echoes each validated input as an output (same name, datatype, shape and bytes) and checks the
// encoding.
void EncodeAndCheck(const inference::ModelConfig& config, const HttpInferRequest& request) {
  kiln::server::InferResponse response;
  response.model_name = config.name();
  response.model_version = "1";
  response.id = request.request.id;
  size_t binary_bytes = 0;
  for (const kiln::server::InferInput& in : request.request.inputs) {
    kiln::server::InferOutput out;
    out.name = in.name;
    out.datatype = in.datatype;
    out.shape.assign(in.shape.begin(), in.shape.end());
    out.raw = std::string(in.raw);
    response.outputs.push_back(std::move(out));
  }
  kiln::server::HttpInferResponse encoded = kiln::server::EncodeInferResponse(response, request);
  FUZZ_CHECK(
      encoded.json_length >= 0 && static_cast<size_t>(encoded.json_length) <= encoded.body.size(),
      "json_length is outside the body");
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseNanAndInfFlag>(encoded.body.data(),
                                            static_cast<size_t>(encoded.json_length));
  FUZZ_CHECK(!doc.HasParseError() && doc.IsObject(), "the encoded response is not a JSON object");
  FUZZ_CHECK(doc.HasMember("outputs") && doc["outputs"].IsArray() &&
                 doc["outputs"].Size() == response.outputs.size(),
             "the encoded response lost outputs");
  size_t binary_outputs = 0;
  for (const auto& o : doc["outputs"].GetArray()) {
    if (o.HasMember("parameters") && o["parameters"].HasMember("binary_data_size")) {
      binary_bytes += o["parameters"]["binary_data_size"].GetUint64();
      ++binary_outputs;
    } else {
      FUZZ_CHECK(o.HasMember("data") && o["data"].IsArray(), "a JSON output has no data array");
    }
  }
  FUZZ_CHECK(encoded.body.size() - static_cast<size_t>(encoded.json_length) == binary_bytes,
             "binary bytes after the JSON differ from the binary_data_size sum");
  FUZZ_CHECK(encoded.has_binary == (binary_outputs > 0), "has_binary differs from the outputs");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::QuietProtobufLogs();
  (void)kiln::fuzz::Configs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const auto& configs = kiln::fuzz::Configs();
  const inference::ModelConfig& config = configs[data[0] % configs.size()];
  const uint32_t h = data[1] | (data[2] << 8) | (data[3] << 16) | (uint32_t{data[4]} << 24);
  std::string body(reinterpret_cast<const char*>(data) + 5, size - 5);

  HttpInferRequest request;
  absl::Status decoded;
  if (h == 0) {
    decoded = kiln::server::DecodeRawInferRequest(body, MetadataOf(config), "", &request);
  } else {
    const int64_t header_length = h == 0xffffffffu ? -1 : static_cast<int64_t>(h);
    if (header_length < 0 || static_cast<size_t>(header_length) <= body.size()) {
      CheckJsonAgreement(header_length < 0 ? body : body.substr(0, header_length));
    }
    decoded = kiln::server::DecodeInferRequest(&body, header_length, config.name(), "", &request);
  }
  if (!decoded.ok()) return 0;
  FUZZ_CHECK(request.request.raw_input_count == static_cast<int64_t>(request.request.inputs.size()),
             "the REST decoder must give every input in raw form");
  absl::StatusOr<kiln::server::ValidatedRequest> valid =
      kiln::server::ValidateInferRequest(config, request.request, 1 << 20);
  if (!valid.ok()) return 0;
  for (size_t i = 0; i < request.request.inputs.size(); ++i) {
    const kiln::server::InferInput& in = request.request.inputs[i];
    const inference::DataType type = config.input(valid->inputs[i].config_index).data_type();
    if (type != inference::TYPE_STRING) {
      FUZZ_CHECK(static_cast<int64_t>(in.raw.size()) ==
                     valid->inputs[i].element_count * kiln::server::DataTypeByteSize(type),
                 "raw size differs from shape x element size");
    }
  }
  EncodeAndCheck(config, request);
  return 0;
}
