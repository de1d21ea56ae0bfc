// Plain request/response structs of the inference path, decoded by a transport (server/grpc,
// server/rest) and consumed by server/core. They do not own tensor bytes: `raw` and `shape`
// point into the transport's message, which must outlive the call.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/api/engine.h"
#include "server/core/datatype.h"
#include "server/core/shared_memory.h"

namespace kiln::server {

inline constexpr int kContentsFieldCount = 9;  // values of ContentsField

// The typed `contents` of one input, as views into the transport's message.
struct TypedContents {
  absl::Span<const bool> bools;
  absl::Span<const int32_t> ints;
  absl::Span<const int64_t> int64s;
  absl::Span<const uint32_t> uints;
  absl::Span<const uint64_t> uint64s;
  absl::Span<const float> fp32s;
  absl::Span<const double> fp64s;
  std::vector<std::string_view> bytes;  // bytes_contents (read by kiln_llm models only)
};

struct InferInput {
  std::string name;
  std::string datatype;             // wire string, unchecked
  absl::Span<const int64_t> shape;  // full shape, batch dim included
  bool has_contents = false;        // the typed `contents` message is present
  // Element counts per typed field (index = static_cast<int>(ContentsField)).
  std::array<int64_t, kContentsFieldCount> typed_counts{};
  TypedContents typed;   // the typed values (when has_contents)
  std::string_view raw;  // raw bytes; meaningful iff the request uses raw form (or shared memory)
  // The bytes come from a registered shared memory region (shared_memory.h): `raw` views the
  // window named by shared_memory_byte_size, whatever form the other inputs use.
  bool shared_memory = false;
};

// A request or response parameter as the wire typed it (KServe's InferParameter; REST's JSON
// scalars). A REST parameter that is an array or an object arrives as its JSON text.
struct ParameterJson {
  std::string text;
};
using ParameterValue = std::variant<bool, int64_t, uint64_t, double, std::string, ParameterJson>;
using Parameters = std::vector<std::pair<std::string, ParameterValue>>;

// A requested output to be written into a shared memory region instead of the response.
struct SharedMemoryOutput {
  std::string name;  // the output
  SharedMemoryBlock block;
};

struct InferRequest {
  std::string model_name;
  std::string model_version;  // "" = the version policy decides
  std::string id;
  std::string protocol = "grpc";  // the transport, for metrics labels
  std::vector<InferInput> inputs;
  std::vector<std::string> requested_outputs;  // empty = all outputs
  // Triton's classification extension (classification.h): top-k per requested output, parallel
  // to requested_outputs (missing or 0 = the raw tensor).
  std::vector<int64_t> classification;
  int64_t raw_input_count = 0;                 // entries of raw_input_contents (0 = typed form)
  // The client's deadline (InfiniteFuture: none; kilnd caps it by --max-run-seconds) and a token
  // the transport cancels when the client goes away (null: none). A request past its deadline or
  // cancelled while queued is answered DEADLINE_EXCEEDED / CANCELLED without running; a running
  // one stops between kernels.
  // Both transports also take Triton's request parameter `timeout` (microseconds, 0 = none) into
  // timeout_us: for a model without dynamic batching InferenceServer makes the deadline the
  // earlier of the call's and arrival + timeout; with it, the model's queue policy decides what
  // the timeout means (dynamic_batcher.h: it may override the default queue timeout, or be
  // ignored), as in Triton.
  absl::Time deadline = absl::InfiniteFuture();
  // Triton's request parameters `timeout` (microseconds, 0 = none; see ApplyTimeoutParameter) and
  // `priority` (0 = the model's default level; dynamic_batcher.h).
  int64_t timeout_us = 0;
  uint64_t priority = 0;
  // kiln's request parameter `kiln_viz` (bool): record this request's run in the VIZ log
  // (api::RunOptions::viz). Admin only: the transport checks the caller for the endpoint table's
  // "... parameters.kiln_viz" row (auth.h) before the request reaches the core. Such a request
  // skips the response cache (it must run to be recorded).
  bool viz = false;
  std::shared_ptr<const api::CancellationToken> cancellation;
  // The transport's own cap on the outputs' bytes (e.g. REST's JSON grows a tensor several times);
  // 0 = the server's (--max-response-bytes). The smaller one applies.
  int64_t max_response_bytes = 0;
  // Triton's shared memory extension (shared_memory.h): the mappings that inputs' `raw` views point
  // into (held until the answer is sent, so an unregister meanwhile unmaps nothing in use), and
  // the requested outputs to write into regions (InferenceServer does, after the run).
  std::vector<std::shared_ptr<const void>> shared_memory_holds;
  std::vector<SharedMemoryOutput> shared_memory_outputs;
  // Every request parameter with a value, those acted on above included (in the order the
  // transport read them). kiln_llm models read their sampling fields here (llm_infer.cc); other
  // models read none.
  Parameters parameters;
};

// The request parameter `timeout` (Triton's: microseconds, 0 = none) stored in
// request->timeout_us (see above). A negative value, or one over a year, is InvalidArgument
// naming parameters.timeout.
inline absl::Status ApplyTimeoutParameter(int64_t micros, InferRequest* request) {
  constexpr int64_t kMaxTimeoutMicros = int64_t{366} * 24 * 3600 * 1000000;
  if (micros < 0 || micros > kMaxTimeoutMicros) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameters.timeout: ", micros, " microseconds is outside [0, ",
                     kMaxTimeoutMicros, "]"));
  }
  request->timeout_us = micros;
  return absl::OkStatus();
}

// What validation established about one input (in request order).
struct ValidatedInput {
  int config_index = 0;  // index into config.input
  int64_t element_count = 0;
  int64_t byte_size = 0;  // recomputed from the shape (raw size for BYTES)
};

struct ValidatedRequest {
  int64_t batch_size = 1;  // 1 when the model does not batch
  std::vector<ValidatedInput> inputs;
  std::vector<int> outputs;  // config.output indices to return, in order
  int64_t total_input_bytes = 0;
};

struct InferOutput {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string raw;  // empty when written into shared memory
  bool in_shared_memory = false;  // the bytes went to the request's region: send none
};

struct InferResponse {
  std::string model_name;
  std::string model_version;
  std::string id;
  std::vector<InferOutput> outputs;
  // Response parameters (Triton's `triton_final_response` on a stream's responses of a kiln_llm
  // model); the gRPC transport sends them.
  Parameters parameters;
};

}  // namespace kiln::server
