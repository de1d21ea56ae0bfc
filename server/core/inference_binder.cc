// Request tensors <-> engine tensors (inference_binder.h).
#include "server/core/inference_binder.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/core/datatype.h"

namespace kiln::server {
namespace {

// The engine's output named `name` (the last one, as the engine never repeats a name), or null.
api::HostTensor* FindOutput(std::vector<api::HostTensor>& outputs, const std::string& name) {
  api::HostTensor* found = nullptr;
  for (api::HostTensor& t : outputs) {
    if (t.name == name) found = &t;
  }
  return found;
}

template <typename To, typename From>
std::string PackAs(absl::Span<const From> values) {
  std::string out(values.size() * sizeof(To), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const To v = static_cast<To>(values[i]);
    std::memcpy(out.data() + i * sizeof(To), &v, sizeof(To));
  }
  return out;
}

// The raw little-endian bytes of an input given in typed `contents` (element counts were checked
// by validation).
absl::StatusOr<std::string> PackTypedContents(const InferInput& in, inference::DataType type) {
  const TypedContents& c = in.typed;
  switch (type) {
    case inference::TYPE_BOOL: return PackAs<uint8_t>(c.bools);
    case inference::TYPE_UINT8: return PackAs<uint8_t>(c.uints);
    case inference::TYPE_UINT16: return PackAs<uint16_t>(c.uints);
    case inference::TYPE_UINT32: return PackAs<uint32_t>(c.uints);
    case inference::TYPE_UINT64: return PackAs<uint64_t>(c.uint64s);
    case inference::TYPE_INT8: return PackAs<int8_t>(c.ints);
    case inference::TYPE_INT16: return PackAs<int16_t>(c.ints);
    case inference::TYPE_INT32: return PackAs<int32_t>(c.ints);
    case inference::TYPE_INT64: return PackAs<int64_t>(c.int64s);
    case inference::TYPE_FP32: return PackAs<float>(c.fp32s);
    case inference::TYPE_FP64: return PackAs<double>(c.fp64s);
    default:
      return absl::InvalidArgumentError(absl::StrCat(std::string(DataTypeName(type)),
                                                     " has no typed contents (send raw_input_contents)"));
  }
}

}  // namespace

absl::Status BindInputs(const inference::ModelConfig& config, const InferRequest& request,
                        const ValidatedRequest& valid, std::string_view platform, BoundInputs* out) {
  out->views.clear();
  out->packed.clear();
  out->packed.reserve(request.inputs.size());  // no reallocation: views point into these strings
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const InferInput& in = request.inputs[i];
    const auto& config_input = config.input(valid.inputs[i].config_index);
    const std::string_view dtype = KilnDTypeName(config_input.data_type());
    if (dtype.empty()) {
      return absl::UnimplementedError(absl::StrCat("inputs[", i, "].datatype: ",
                                                   std::string(DataTypeName(config_input.data_type())),
                                                   " tensors are not supported by platform ", std::string(platform)));
    }
    api::NamedHostTensorView v;
    v.name = config_input.name();
    v.view.dtype = std::string(dtype);
    v.view.shape.assign(in.shape.begin(), in.shape.end());
    if (request.raw_input_count > 0 || in.shared_memory) {
      v.view.data = in.raw;
    } else {
      absl::StatusOr<std::string> bytes = PackTypedContents(in, config_input.data_type());
      if (!bytes.ok()) {
        return absl::Status(bytes.status().code(),
                            absl::StrCat("inputs[", i, "].contents: ", bytes.status().message()));
      }
      out->packed.push_back(*std::move(bytes));
      v.view.data = out->packed.back();
    }
    out->views.push_back(std::move(v));
  }
  return absl::OkStatus();
}

absl::Status BindOutputs(const inference::ModelConfig& config, const ValidatedRequest& valid,
                         bool strict_dtypes, api::RunResult& run, InferResponse* response) {
  for (int index : valid.outputs) {
    const auto& config_output = config.output(index);
    api::HostTensor* found = FindOutput(run.outputs, config_output.name());
    if (found == nullptr) {
      return absl::InternalError(absl::StrCat("output ", config_output.name(), ": not produced by the model"));
    }
    std::optional<inference::DataType> type = DataTypeFromKiln(found->dtype);
    if (strict_dtypes && (!type.has_value() || *type != config_output.data_type())) {
      return absl::InternalError(absl::StrCat("output ", config_output.name(), ": the graph yields ",
                                              found->dtype, " but the config says ",
                                              std::string(DataTypeName(config_output.data_type()))));
    }
    InferOutput o;
    o.name = config_output.name();
    o.datatype = std::string(DataTypeName(type.value_or(config_output.data_type())));
    o.shape = std::move(found->shape);  // validation admits each output once
    o.raw = std::move(found->data);
    response->outputs.push_back(std::move(o));
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
