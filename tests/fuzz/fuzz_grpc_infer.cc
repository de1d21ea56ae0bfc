// Fuzz target: a KServe v2 ModelInferRequest in protobuf binary form (what GRPCInferenceService/
// ModelInfer and ModelStreamInfer receive) through the gRPC transport's decoding
// (server/grpc/codec.cc DecodeInferRequest) and request validation (server/core/validate.cc)
// against the config its model_name names (fuzz_configs.h; all_types for any other name).
// Oracles, for a request validation accepts: every input maps to a distinct config input; element
// counts and byte sizes match the shapes (raw sizes exact, BYTES framing walks to the end, typed
// counts equal the element count); the total stays within the limit; outputs are config indices.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "inference/grpc_service.pb.h"
#include "server/core/datatype.h"
#include "server/core/validate.h"
#include "server/grpc/codec.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_configs.h"

namespace {

constexpr int64_t kMaxRequestBytes = 1 << 20;

// Elements of BYTES raw framing, or -1 if the framing is broken.
int64_t BytesElements(std::string_view raw) {
  int64_t n = 0;
  while (!raw.empty()) {
    if (raw.size() < 4) return -1;
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
    const uint64_t len = p[0] | (p[1] << 8) | (p[2] << 16) | (uint64_t{p[3]} << 24);
    raw.remove_prefix(4);
    if (len > raw.size()) return -1;
    raw.remove_prefix(len);
    ++n;
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::QuietProtobufLogs();
  (void)kiln::fuzz::Configs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest wire;
  if (!wire.ParseFromArray(data, static_cast<int>(size))) return 0;
  const kiln::server::InferRequest request = kiln::server::DecodeInferRequest(wire);
  const inference::ModelConfig& config = kiln::fuzz::ConfigFor(wire.model_name());
  absl::StatusOr<kiln::server::ValidatedRequest> valid =
      kiln::server::ValidateInferRequest(config, request, kMaxRequestBytes);
  if (!valid.ok()) return 0;

  FUZZ_CHECK(valid->inputs.size() == request.inputs.size(), "validated input count differs");
  const bool raw_form = request.raw_input_count > 0;
  std::set<int> seen;
  int64_t total = 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const kiln::server::InferInput& in = request.inputs[i];
    const kiln::server::ValidatedInput& v = valid->inputs[i];
    FUZZ_CHECK(v.config_index >= 0 && v.config_index < config.input_size(), "bad config index");
    FUZZ_CHECK(seen.insert(v.config_index).second, "two inputs map to one config input");
    const inference::ModelInput& want = config.input(v.config_index);
    FUZZ_CHECK(in.name == want.name(), "input name differs from its config input");
    int64_t elements = 1;
    for (int64_t d : in.shape) {
      FUZZ_CHECK(d >= 0, "a negative dim was accepted");
      FUZZ_CHECK(!__builtin_mul_overflow(elements, d, &elements), "element count overflowed");
    }
    FUZZ_CHECK(elements == v.element_count, "element count differs from the shape");
    const inference::DataType type = want.data_type();
    if (raw_form) {
      if (type == inference::TYPE_STRING) {
        FUZZ_CHECK(BytesElements(in.raw) == elements, "BYTES framing does not hold the elements");
        FUZZ_CHECK(v.byte_size == static_cast<int64_t>(in.raw.size()), "BYTES byte size differs");
      } else {
        FUZZ_CHECK(v.byte_size == elements * kiln::server::DataTypeByteSize(type),
                   "byte size differs from shape x element size");
        FUZZ_CHECK(static_cast<int64_t>(in.raw.size()) == v.byte_size, "raw size differs");
      }
    } else {
      const kiln::server::ContentsField f = kiln::server::ContentsFieldFor(type);
      if (f != kiln::server::ContentsField::kNone) {
        FUZZ_CHECK(in.typed_counts[static_cast<int>(f)] == elements,
                   "typed element count differs from the shape");
      } else {
        FUZZ_CHECK(elements == 0, "a raw-only datatype was accepted in typed form");
      }
    }
    total += v.byte_size;
  }
  FUZZ_CHECK(total == valid->total_input_bytes && total <= kMaxRequestBytes,
             "total input bytes wrong or over the limit");
  for (int o : valid->outputs) {
    FUZZ_CHECK(o >= 0 && o < config.output_size(), "output index out of range");
  }
  return 0;
}
