// Fuzz target: a model configuration as kilnd reads it (server/core/model_config.cc): the text of a
// config.pbtxt, or, when the input starts with '{', a REST repository load body
// (server/rest/rest_json.cc DecodeLoadBody) whose parameters.config is a JSON ModelConfig, and the
// input itself as a JSON ModelConfig (the gRPC load's `config` parameter); then
// NormalizeModelConfig as the repository runs it.
// Oracles, for a config that normalizes: normalizing is idempotent and survives a text round trip
// and a round trip through the REST model-config JSON (ModelConfigJson) unchanged; the default
// model file name is a valid plain name; and a request that follows the config (every input, -1
// dims as 1, batch 1, zero bytes of the right size; small ones only) passes ValidateInferRequest,
// so a config kilnd accepts can be served.
#include <cstddef>
#include <cstdint>
#include <string>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "server/core/datatype.h"
#include "server/core/model_config.h"
#include "server/core/validate.h"
#include "server/rest/rest_json.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_configs.h"

namespace {

std::string Bytes(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

// A request that follows `config`, or false when it would exceed 1 MiB.
bool ConformingRequest(const inference::ModelConfig& config,
                       std::vector<std::vector<int64_t>>* shapes, std::vector<std::string>* raws,
                       kiln::server::InferRequest* request) {
  const bool batching = config.max_batch_size() > 0;
  int64_t total = 0;
  shapes->resize(config.input_size());
  raws->resize(config.input_size());
  for (int i = 0; i < config.input_size(); ++i) {
    const inference::ModelInput& in = config.input(i);
    std::vector<int64_t>& shape = (*shapes)[i];
    if (batching) shape.push_back(1);
    int64_t n = 1;
    for (int64_t d : in.dims()) {
      shape.push_back(d == -1 ? 1 : d);
      if (shape.back() > (1 << 20) / n) return false;
      n *= shape.back();
    }
    const int64_t item = kiln::server::DataTypeByteSize(in.data_type());
    const int64_t bytes = in.data_type() == inference::TYPE_STRING ? 4 * n : item * n;
    total += bytes;
    if (total > (1 << 20)) return false;
    (*raws)[i].assign(static_cast<size_t>(bytes), '\0');  // BYTES: n empty strings
  }
  for (int i = 0; i < config.input_size(); ++i) {
    kiln::server::InferInput input;
    input.name = config.input(i).name();
    input.datatype = std::string(kiln::server::DataTypeName(config.input(i).data_type()));
    input.shape = (*shapes)[i];
    input.raw = (*raws)[i];
    request->inputs.push_back(std::move(input));
  }
  request->raw_input_count = config.input_size();
  return true;
}

void Check(inference::ModelConfig config) {
  const std::string name = kiln::server::IsValidModelName(config.name()) ? config.name() : "m";
  if (!kiln::server::NormalizeModelConfig(name, &config).ok()) return;

  const std::string normalized = Bytes(config);
  inference::ModelConfig again = config;
  absl::Status st = kiln::server::NormalizeModelConfig(name, &again);
  FUZZ_CHECK(st.ok() && Bytes(again) == normalized, "NormalizeModelConfig is not idempotent");
  std::string printed;
  FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(config, &printed), "print failed");
  absl::StatusOr<inference::ModelConfig> reparsed = kiln::server::ParseModelConfigText(printed);
  FUZZ_CHECK(reparsed.ok(), "a normalized config does not parse back: " +
                                reparsed.status().ToString() + "\n" + printed);
  st = kiln::server::NormalizeModelConfig(name, &*reparsed);
  FUZZ_CHECK(st.ok() && Bytes(*reparsed) == normalized, "the text round trip changed the config");
  absl::StatusOr<std::string> json = kiln::server::ModelConfigJson(config);
  FUZZ_CHECK(json.ok(), "ModelConfigJson failed: " + json.status().ToString());
  absl::StatusOr<inference::ModelConfig> from_json = kiln::server::ParseModelConfigJson(*json);
  FUZZ_CHECK(from_json.ok() && Bytes(*from_json) == normalized,
             "the REST JSON round trip changed the config:\n" + *json);
  FUZZ_CHECK(kiln::server::IsValidModelName(kiln::server::DefaultModelFilename(config)),
             "the default model file name is not a plain name");

  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> raws;
  kiln::server::InferRequest request;
  if (ConformingRequest(config, &shapes, &raws, &request)) {
    absl::StatusOr<kiln::server::ValidatedRequest> valid =
        kiln::server::ValidateInferRequest(config, request, 1 << 20);
    FUZZ_CHECK(valid.ok(),
               "a request that follows the config fails validation: " + valid.status().ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') {
    absl::StatusOr<inference::ModelConfig> config = kiln::server::ParseModelConfigText(text);
    if (config.ok()) Check(*std::move(config));
    return 0;
  }
  absl::StatusOr<kiln::server::LoadOptions> load = kiln::server::DecodeLoadBody(std::string(text));
  if (load.ok() && load->config_json.has_value()) {
    absl::StatusOr<inference::ModelConfig> config =
        kiln::server::ParseModelConfigJson(*load->config_json);
    if (config.ok()) Check(*std::move(config));
  }
  absl::StatusOr<inference::ModelConfig> config = kiln::server::ParseModelConfigJson(text);
  if (config.ok()) Check(*std::move(config));
  return 0;
}
