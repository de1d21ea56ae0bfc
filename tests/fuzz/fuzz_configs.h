// The model configs the request fuzz targets validate against: the bundled repository's
// (models/*/config.pbtxt, read at start-up) plus one that has every KServe datatype, a batch
// dimension, variable dims and optional inputs (platform kiln_onnx: graphs and builtins need every
// input, ONNX models may leave some out). Each is normalized as the repository would.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "server/core/model_config.h"
#include "tests/fuzz/fuzz_check.h"

namespace kiln::fuzz {

// clang-format off
inline constexpr char kAllTypesConfig[] = R"pb(
  name: "all_types"
  platform: "kiln_onnx"
  max_batch_size: 4
  input { name: "B" data_type: TYPE_BOOL dims: [ -1 ] }
  input { name: "U8" data_type: TYPE_UINT8 dims: [ 2, -1 ] }
  input { name: "U16" data_type: TYPE_UINT16 dims: [ 2 ] optional: true }
  input { name: "U32" data_type: TYPE_UINT32 dims: [ 1 ] optional: true }
  input { name: "U64" data_type: TYPE_UINT64 dims: [ 1 ] optional: true }
  input { name: "I8" data_type: TYPE_INT8 dims: [ 3 ] optional: true }
  input { name: "I16" data_type: TYPE_INT16 dims: [ 1 ] optional: true }
  input { name: "I32" data_type: TYPE_INT32 dims: [ -1, 2 ] optional: true }
  input { name: "I64" data_type: TYPE_INT64 dims: [ 1 ] optional: true }
  input { name: "F16" data_type: TYPE_FP16 dims: [ 2 ] optional: true }
  input { name: "BF16" data_type: TYPE_BF16 dims: [ 2 ] optional: true }
  input { name: "F32" data_type: TYPE_FP32 dims: [ 4 ] optional: true }
  input { name: "F64" data_type: TYPE_FP64 dims: [ 1 ] optional: true }
  input { name: "S" data_type: TYPE_STRING dims: [ -1 ] optional: true }
  output { name: "OUT_F32" data_type: TYPE_FP32 dims: [ -1 ] }
  output { name: "OUT_S" data_type: TYPE_STRING dims: [ -1 ] }
  output { name: "OUT_I64" data_type: TYPE_INT64 dims: [ 2 ] }
)pb";
// clang-format on

// Protobuf logs every string field with invalid UTF-8 it parses; fuzz inputs have many.
inline void QuietProtobufLogs() { google::protobuf::SetLogHandler(nullptr); }

inline inference::ModelConfig NormalizedConfig(const std::string& text, const std::string& name) {
  absl::StatusOr<inference::ModelConfig> c = server::ParseModelConfigText(text);
  FUZZ_CHECK(c.ok(), "config " + name + ": " + c.status().ToString());
  absl::Status st = server::NormalizeModelConfig(name, &*c);
  FUZZ_CHECK(st.ok(), "config " + name + ": " + st.ToString());
  return *c;
}

// models/add_sub, models/reduce_sum, models/fashion_mnist, then all_types.
inline const std::vector<inference::ModelConfig>& Configs() {
  static const std::vector<inference::ModelConfig>* configs = [] {
    auto* out = new std::vector<inference::ModelConfig>;
    for (const char* name : {"add_sub", "reduce_sum", "fashion_mnist"}) {
      std::ifstream in(std::string(KILN_MODELS_DIR) + "/" + name + "/config.pbtxt");
      std::stringstream text;
      text << in.rdbuf();
      out->push_back(NormalizedConfig(text.str(), name));
    }
    out->push_back(NormalizedConfig(kAllTypesConfig, "all_types"));
    return out;
  }();
  return *configs;
}

// The config named `model`, else all_types.
inline const inference::ModelConfig& ConfigFor(const std::string& model) {
  for (const inference::ModelConfig& c : Configs()) {
    if (c.name() == model) return c;
  }
  return Configs().back();
}

}  // namespace kiln::fuzz
