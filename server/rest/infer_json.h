// KServe v2 REST inference bodies <-> server/core structs: the JSON request/response forms and
// the binary tensor data extension (kserve-v2-protocol.md §9). Every tensor reaches the core in
// raw form (little-endian bytes, BYTES elements with 4-byte length prefixes): JSON `data` is
// converted element by element with range checks, binary chunks are viewed in place.
// Errors are INVALID_ARGUMENT naming the JSON field ("inputs[1].data[7]") and the rule broken.
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "server/core/infer_request.h"
#include "server/core/inference_server.h"

namespace kiln::server {

// A decoded request and the storage its views point into. Not copyable or movable once decoded
// (request.inputs[i].shape/raw point into the members and into the body).
struct HttpInferRequest {
  HttpInferRequest() = default;
  HttpInferRequest(const HttpInferRequest&) = delete;
  HttpInferRequest& operator=(const HttpInferRequest&) = delete;

  InferRequest request;
  std::vector<std::vector<int64_t>> shapes;   // per input
  std::vector<std::string> converted;         // per input: JSON data as raw bytes
  bool binary_output_default = false;         // parameters.binary_data_output
  std::map<std::string, bool> output_binary;  // outputs[i].parameters.binary_data, by name
};

// `body` must outlive `out`; its JSON part is parsed in place (modified). `header_length` is
// Inference-Header-Content-Length (-1 = absent: the whole body is JSON). Tensors whose parameters
// name shared_memory_region / _offset / _byte_size are resolved against `shared_memory`
// (shared_memory.h; null: INVALID_ARGUMENT): such inputs view the region's bytes (and take no
// binary data), such outputs are written there by the core and answered without data.
absl::Status DecodeInferRequest(std::string* body, int64_t header_length, const std::string& model,
                                const std::string& version, HttpInferRequest* out,
                                const SharedMemoryManager* shared_memory = nullptr);

// The binary extension's raw form (Inference-Header-Content-Length: 0): the whole body is the
// one input of a single-input model, batch 1 (a leading -1 of the metadata shape becomes 1; any
// other -1 is INVALID_ARGUMENT). Every output comes back binary.
absl::Status DecodeRawInferRequest(std::string_view body, const ModelMetadata& metadata,
                                   const std::string& version, HttpInferRequest* out);

struct HttpInferResponse {
  std::string body;
  int64_t json_length = 0;  // bytes of JSON at the start of body
  bool has_binary = false;  // binary chunks follow the JSON (send Inference-Header-Content-Length)
};

// JSON for outputs that asked for JSON, binary chunks (in output order) for the others.
HttpInferResponse EncodeInferResponse(const InferResponse& response,
                                      const HttpInferRequest& request);

}  // namespace kiln::server
