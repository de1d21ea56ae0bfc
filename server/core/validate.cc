#include "server/core/validate.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/datatype.h"
#include "server/core/limits.h"

namespace kiln::server {
namespace {

// Shapes print in full up to 8 dims; longer ones by rank only (messages stay short).
std::string ShapeString(absl::Span<const int64_t> shape) {
  if (shape.size() > 8) return absl::StrCat("<rank ", shape.size(), ">");
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::string ConfigShapeString(const inference::ModelInput& input, bool batching) {
  std::vector<int64_t> dims;
  if (batching) dims.push_back(-1);
  dims.insert(dims.end(), input.dims().begin(), input.dims().end());
  return ShapeString(dims);
}

// Shown in messages: client strings are cut, so a huge name cannot make a huge message.
std::string Shown(std::string_view s) { return std::string(s.substr(0, kMaxNameLength)); }

std::string ExpectedNames(const inference::ModelConfig& config) {
  std::vector<std::string> names;
  for (const auto& in : config.input()) names.push_back(in.name());
  return absl::StrJoin(names, ", ");
}

// Walks BYTES raw framing (4-byte LE length + bytes per element). Counts elements.
absl::StatusOr<int64_t> CountBytesElements(std::string_view raw, const std::string& where) {
  int64_t count = 0;
  size_t pos = 0;
  while (pos < raw.size()) {
    if (raw.size() - pos < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": BYTES element ", count, " has a truncated 4-byte length prefix"));
    }
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + pos);
    const uint32_t len =
        uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
    pos += 4;
    if (len > raw.size() - pos) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": BYTES element ", count, " declares ",
                                                     len, " bytes but only ", raw.size() - pos,
                                                     " remain"));
    }
    pos += len;
    ++count;
  }
  return count;
}

// A shared memory input (shared_memory.h): the window's size must be what the shape needs.
absl::Status CheckSharedMemory(const InferInput& in, int i, inference::DataType type,
                               int64_t elements, int64_t* byte_size) {
  const std::string where = absl::StrCat("inputs[", i, "]");
  if (in.has_contents) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".contents: set together with parameters.shared_memory_region (use one form)"));
  }
  const std::string size_field = absl::StrCat(where, ".parameters.shared_memory_byte_size");
  if (type == inference::TYPE_STRING) {
    auto count = CountBytesElements(in.raw, size_field);
    if (!count.ok()) return count.status();
    if (*count != elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          size_field, ": the region's ", in.raw.size(), " bytes hold ", *count,
          " BYTES elements, shape ", ShapeString(in.shape), " of input '", Shown(in.name),
          "' needs ", elements));
    }
    *byte_size = static_cast<int64_t>(in.raw.size());
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(in.raw.size()) != *byte_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(size_field, ": ", in.raw.size(), " bytes for input '", Shown(in.name),
                     "' does not match shape ", ShapeString(in.shape), " x ",
                     std::string(DataTypeName(type)), ": expected ", *byte_size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckContents(const InferInput& in, int i, inference::DataType type, int64_t elements,
                           bool raw_form, int64_t* byte_size) {
  if (in.shared_memory) return CheckSharedMemory(in, i, type, elements, byte_size);
  const std::string where = absl::StrCat("inputs[", i, "]");
  if (raw_form) {
    if (in.has_contents) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".contents: set together with raw_input_contents (use one form)"));
    }
    if (type == inference::TYPE_STRING) {
      auto count = CountBytesElements(in.raw, absl::StrCat("raw_input_contents[", i, "]"));
      if (!count.ok()) return count.status();
      if (*count != elements) {
        return absl::InvalidArgumentError(absl::StrCat(
            "raw_input_contents[", i, "]: holds ", *count, " BYTES elements, shape ",
            ShapeString(in.shape), " of input '", Shown(in.name), "' needs ", elements));
      }
      *byte_size = static_cast<int64_t>(in.raw.size());
      return absl::OkStatus();
    }
    if (static_cast<int64_t>(in.raw.size()) != *byte_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw_input_contents[", i, "]: byte size ", in.raw.size(), " of input '",
                       Shown(in.name), "' does not match shape ", ShapeString(in.shape), " x ",
                       std::string(DataTypeName(type)), ": expected ", *byte_size, " bytes"));
    }
    return absl::OkStatus();
  }
  const ContentsField want = ContentsFieldFor(type);
  if (want == ContentsField::kNone && elements > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".contents: ", std::string(DataTypeName(type)),
                     " has no typed contents field; send raw_input_contents"));
  }
  for (int f = 0; f < kContentsFieldCount; ++f) {
    const auto field = static_cast<ContentsField>(f);
    if (field == want || in.typed_counts[f] == 0) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".contents.", std::string(ContentsFieldName(field)), ": set for a ",
                     std::string(DataTypeName(type)), " input (expected ",
                     std::string(ContentsFieldName(want)), ")"));
  }
  if (want != ContentsField::kNone && in.typed_counts[static_cast<int>(want)] != elements) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".contents.", std::string(ContentsFieldName(want)), ": holds ",
                     in.typed_counts[static_cast<int>(want)], " elements, shape ",
                     ShapeString(in.shape), " needs ", elements));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidatedRequest> ValidateInferRequest(const inference::ModelConfig& config,
                                                      const InferRequest& request,
                                                      int64_t max_request_bytes) {
  const std::string& model = config.name();
  const bool batching = config.max_batch_size() > 0;
  if (static_cast<int64_t>(request.inputs.size()) > kMaxTensorsPerModel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs: ", request.inputs.size(), " inputs exceed the limit ", kMaxTensorsPerModel));
  }
  absl::flat_hash_map<std::string, int> config_index;
  for (int c = 0; c < config.input_size(); ++c) config_index[config.input(c).name()] = c;

  ValidatedRequest out;
  std::vector<int> seen(config.input_size(), -1);  // config index -> request index
  int64_t batch = -1;
  int batch_from = -1;
  for (int i = 0; i < static_cast<int>(request.inputs.size()); ++i) {
    const InferInput& in = request.inputs[i];
    const std::string where = absl::StrCat("inputs[", i, "]");
    if (in.name.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ".name: empty"));
    auto found = config_index.find(in.name);
    if (found == config_index.end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".name: unexpected input '",
                                                     Shown(in.name), "' for model '", model,
                                                     "' (expects ", ExpectedNames(config), ")"));
    }
    const int c = found->second;
    if (seen[c] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".name: duplicate input '", in.name,
                                                     "' (also inputs[", seen[c], "])"));
    }
    seen[c] = i;
    const inference::ModelInput& want = config.input(c);
    std::optional<inference::DataType> type = ParseDataTypeName(in.datatype);
    if (!type.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".datatype: unknown datatype '", Shown(in.datatype),
          "' (KServe names: BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64, BYTES)"));
    }
    if (*type != want.data_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".datatype: input '", in.name, "' of model '", model, "' expects ",
                       std::string(DataTypeName(want.data_type())), ", got ", in.datatype));
    }
    const int64_t rank = static_cast<int64_t>(in.shape.size());
    if (rank > kMaxTensorRank) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".shape: rank ", rank, " exceeds the limit ", kMaxTensorRank));
    }
    int64_t elements = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (in.shape[d] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".shape[", d, "]: dimension ", in.shape[d], " is negative"));
      }
      if (__builtin_mul_overflow(elements, in.shape[d], &elements)) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".shape: element count of ",
                                                       ShapeString(in.shape), " overflows int64"));
      }
    }
    int64_t byte_size = 0;
    const int64_t elem_size = DataTypeByteSize(*type);
    if (elem_size > 0 && __builtin_mul_overflow(elements, elem_size, &byte_size)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".shape: byte size of ",
                                                     ShapeString(in.shape), " x ", in.datatype,
                                                     " overflows int64"));
    }
    const int64_t want_rank = want.dims_size() + (batching ? 1 : 0);
    if (rank != want_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".shape: input '", in.name, "' expects rank ", want_rank, " ",
          ConfigShapeString(want, batching), ", got rank ", rank, " ", ShapeString(in.shape)));
    }
    if (batching) {
      const int64_t b = in.shape[0];
      if (b < 1 || b > config.max_batch_size()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".shape[0]: batch size ", b,
                                                       " is outside 1..max_batch_size ",
                                                       config.max_batch_size()));
      }
      if (batch >= 0 && b != batch) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".shape[0]: batch size ", b,
                                                       " differs from inputs[", batch_from,
                                                       "] batch size ", batch));
      }
      batch = b;
      batch_from = i;
    }
    for (int d = 0; d < want.dims_size(); ++d) {
      const int64_t got = in.shape[d + (batching ? 1 : 0)];
      if (want.dims(d) != -1 && got != want.dims(d)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".shape[", d + (batching ? 1 : 0), "]: input '", in.name,
                         "' expects ", want.dims(d), ", got ", got, " (config shape ",
                         ConfigShapeString(want, batching), ")"));
      }
    }
    out.inputs.push_back({c, elements, byte_size});
  }
  for (int c = 0; c < config.input_size(); ++c) {
    if (seen[c] < 0 && !config.input(c).optional()) {
      return absl::InvalidArgumentError(absl::StrCat("inputs: missing input '",
                                                     config.input(c).name(), "' for model '", model,
                                                     "' (expects ", ExpectedNames(config), ")"));
    }
  }

  // Inputs in shared memory take no raw_input_contents entry (as in Triton).
  const int64_t shm_inputs = std::count_if(request.inputs.begin(), request.inputs.end(),
                                           [](const InferInput& in) { return in.shared_memory; });
  const int64_t wire_inputs = static_cast<int64_t>(request.inputs.size()) - shm_inputs;
  const bool raw_form = request.raw_input_count > 0;
  if (raw_form && request.raw_input_count != wire_inputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents: ", request.raw_input_count, " entries for ", wire_inputs,
        " inputs", shm_inputs > 0 ? " not in shared memory" : "",
        " (give raw contents for every input or for none)"));
  }
  int64_t total = 0;
  for (int i = 0; i < static_cast<int>(request.inputs.size()); ++i) {
    ValidatedInput& v = out.inputs[i];
    const inference::DataType type = config.input(v.config_index).data_type();
    absl::Status status =
        CheckContents(request.inputs[i], i, type, v.element_count, raw_form, &v.byte_size);
    if (!status.ok()) return status;
    if (__builtin_add_overflow(total, v.byte_size, &total) || total > max_request_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("inputs: total input size exceeds the limit of ", max_request_bytes,
                       " bytes (--max-request-bytes) at inputs[", i, "]"));
    }
  }
  out.total_input_bytes = total;
  out.batch_size = batching ? batch : 1;

  absl::flat_hash_map<std::string, int> output_index;
  for (int c = 0; c < config.output_size(); ++c) output_index[config.output(c).name()] = c;
  std::vector<bool> requested(config.output_size(), false);
  for (int i = 0; i < static_cast<int>(request.requested_outputs.size()); ++i) {
    const std::string& name = request.requested_outputs[i];
    auto found = output_index.find(name);
    if (found == output_index.end()) {
      return absl::InvalidArgumentError(absl::StrCat("outputs[", i, "].name: unknown output '",
                                                     Shown(name), "' for model '", model, "'"));
    }
    if (requested[found->second]) {
      return absl::InvalidArgumentError(
          absl::StrCat("outputs[", i, "].name: duplicate output '", name, "'"));
    }
    requested[found->second] = true;
    out.outputs.push_back(found->second);
  }
  if (out.outputs.empty()) {
    for (int c = 0; c < config.output_size(); ++c) out.outputs.push_back(c);
  }
  return out;
}

}  // namespace kiln::server
