#include "server/core/warmup.h"

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "server/core/datatype.h"
#include "absl/synchronization/notification.h"
#include "server/core/inference_server.h"
#include "server/core/limits.h"
#include "server/core/model_config.h"
#include "server/core/validate.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

constexpr int64_t kMaxWarmupBytes = int64_t{256} << 20;  // per input of one sample
constexpr int64_t kMaxWarmupCount = 1000;                // runs of one sample

// `n` elements of `type`: zeros, or fixed-seed random values (see warmup.h).
std::string FillData(inference::DataType type, int64_t n, bool random, std::mt19937* rng) {
  const int64_t size = DataTypeByteSize(type);
  std::string out(static_cast<size_t>(n * size), '\0');
  if (!random) return out;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int> small(0, 99);
  for (int64_t i = 0; i < n; ++i) {
    char* p = out.data() + i * size;
    switch (type) {
      case inference::TYPE_FP32: { const float v = static_cast<float>(unit(*rng)); std::memcpy(p, &v, 4); break; }
      case inference::TYPE_FP64: { const double v = unit(*rng); std::memcpy(p, &v, 8); break; }
      case inference::TYPE_BOOL: *p = static_cast<char>(small(*rng) & 1); break;
      case inference::TYPE_FP16:
      case inference::TYPE_BF16: {  // 0 .. ~1 in either 16-bit float: the high byte's exponent bits
        const uint16_t v = type == inference::TYPE_FP16 ? static_cast<uint16_t>(0x3000 + small(*rng))
                                                        : static_cast<uint16_t>(0x3e00 + small(*rng));
        std::memcpy(p, &v, 2);
        break;
      }
      default: {  // integers: 0..99, little-endian in `size` bytes
        const uint64_t v = static_cast<uint64_t>(small(*rng));
        std::memcpy(p, &v, static_cast<size_t>(size));
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<WarmupSample>>> BuildWarmupSamples(
    const inference::ModelConfig& config, const std::string& model, const RepositoryFiles& files) {
  std::vector<std::unique_ptr<WarmupSample>> samples;
  std::mt19937 rng(20240229);
  for (int i = 0; i < config.model_warmup_size(); ++i) {
    const inference::ModelWarmup& w = config.model_warmup(i);
    auto s = std::make_unique<WarmupSample>();
    s->label = absl::StrCat("model_warmup[", i, "] ('", w.name().substr(0, 64), "')");
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(s->label, ": ", why));
    };
    const int64_t batch = w.batch_size() == 0 ? 1 : w.batch_size();
    if (config.max_batch_size() == 0 ? batch != 1 : batch > config.max_batch_size()) {
      return fail(absl::StrCat("batch_size ", batch, " is outside 1..",
                               std::max(1, config.max_batch_size())));
    }
    if (w.count() > kMaxWarmupCount) {
      return fail(absl::StrCat("count ", w.count(), " exceeds the limit ", kMaxWarmupCount));
    }
    s->count = w.count() == 0 ? 1 : w.count();
    if (w.inputs().empty()) return fail("inputs: lists no input");
    s->request.model_name = model;
    s->request.id = "warmup";
    s->request.protocol = "warmup";
    s->buffers.reserve(w.inputs().size());
    s->shapes.reserve(w.inputs().size());
    for (const auto& [name, in] : w.inputs()) {
      const std::string where = absl::StrCat("inputs[\"", name.substr(0, 64), "\"]");
      const int64_t size = DataTypeByteSize(in.data_type());
      if (size <= 0) {
        return fail(absl::StrCat(where, ".data_type: ", std::string(DataTypeName(in.data_type())),
                                 " is not supported in warm-up samples (fixed-size types only)"));
      }
      std::vector<int64_t> shape;
      if (config.max_batch_size() > 0) shape.push_back(batch);
      int64_t item = 1;
      for (int64_t d : in.dims()) {
        if (d <= 0) return fail(absl::StrCat(where, ".dims: ", d, " is not a positive size"));
        item *= d;
        if (item * size > kMaxWarmupBytes) {
          return fail(absl::StrCat(where, ".dims: more than ", kMaxWarmupBytes, " bytes"));
        }
        shape.push_back(d);
      }
      std::string data;
      switch (in.input_data_type_case()) {
        case inference::ModelWarmup::Input::kInputDataFile: {
          const std::string& file = in.input_data_file();
          if (!IsValidModelName(file)) {
            return fail(absl::StrCat(where, ".input_data_file: must be a plain file name in the "
                                            "model's warmup/ folder"));
          }
          absl::StatusOr<std::string> bytes =
              files.Read(absl::StrCat(model, "/warmup/", file), kMaxWarmupBytes,
                         absl::StrCat("warmup/", file));
          if (!bytes.ok()) return fail(absl::StrCat(where, ".input_data_file: ", bytes.status().message()));
          if (static_cast<int64_t>(bytes->size()) != item * size) {
            return fail(absl::StrCat(where, ".input_data_file: warmup/", file, " has ", bytes->size(),
                                     " bytes; the input needs ", item * size));
          }
          for (int64_t b = 0; b < batch; ++b) data += *bytes;
          break;
        }
        case inference::ModelWarmup::Input::kZeroData:
        case inference::ModelWarmup::Input::kRandomData:
          data = FillData(in.data_type(), item * batch,
                          in.input_data_type_case() == inference::ModelWarmup::Input::kRandomData, &rng);
          break;
        default:
          return fail(absl::StrCat(where, ": needs zero_data, random_data or input_data_file"));
      }
      s->buffers.push_back(std::move(data));
      s->shapes.push_back(std::move(shape));
      InferInput input;
      input.name = name;
      input.datatype = std::string(DataTypeName(in.data_type()));
      input.shape = absl::MakeConstSpan(s->shapes.back());
      input.raw = s->buffers.back();
      s->request.inputs.push_back(std::move(input));
    }
    s->request.raw_input_count = static_cast<int64_t>(s->request.inputs.size());
    samples.push_back(std::move(s));
  }
  return samples;
}

absl::Status InferenceServer::Warmup(const ModelVersion& version, const RepositoryFiles& files) {
  if (version.config->response_cache().enable() && response_cache_ == nullptr) {
    return absl::InvalidArgumentError(
        "config response_cache.enable: kilnd runs without a response cache (start it with "
        "--cache-config local,size=<bytes>)");
  }
  if (version.config->model_warmup_size() == 0) return absl::OkStatus();
  absl::StatusOr<std::vector<std::unique_ptr<WarmupSample>>> samples =
      BuildWarmupSamples(*version.config, version.name, files);
  if (!samples.ok()) return samples.status();
  DeviceLane* lane = version.device.empty() ? nullptr : lanes_.Find(version.device);
  if (lane == nullptr) {
    return absl::UnavailableError("model_warmup: no engine to run the warm-up on in this build");
  }
  for (const std::unique_ptr<WarmupSample>& s : *samples) {
    absl::StatusOr<ValidatedRequest> valid =
        ValidateInferRequest(*version.config, s->request, options_.max_request_bytes);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s->label, ": ", valid.status().message()));
    }
    for (int64_t k = 0; k < s->count; ++k) {
      // Through the device's lane as a request: one run at a time, in order with the others.
      ExecutionTimes times;
      InferObservation obs;
      const api::RunOptions run_options = policy_.For(absl::InfiniteFuture(), nullptr, 0);
      absl::StatusOr<InferResponse> response = absl::UnknownError("warm-up did not run");
      absl::Notification done;
      lane->Submit(
          [&] {
            response = Execute(*lane, version, s->request, *valid, run_options, &times, &obs);
            lane->Release();
            done.Notify();
          },
          /*may_inline=*/true);
      done.WaitForNotification();
      if (!response.ok()) {
        return absl::Status(response.status().code(),
                            absl::StrCat(s->label, ": ", response.status().message()));
      }
    }
    spdlog::info("model '{}' version {}: {} ran {} time(s)", version.name, version.version,
                 s->label, s->count);
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
