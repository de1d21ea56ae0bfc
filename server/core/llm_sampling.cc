// ReadSamplingField (llm_sampling.h).
#include "server/core/llm_sampling.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::server {
namespace {

absl::Status Bad(std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(problem)));
}

absl::Status ReadNumber(const rapidjson::Value& v, std::string_view field, double lo, double hi,
                        double* out) {
  if (v.IsNull()) return absl::OkStatus();
  if (!v.IsNumber()) return Bad(field, "not a number");
  const double d = v.GetDouble();
  if (!(d >= lo && d <= hi))
    return Bad(field, absl::StrFormat("%g is outside [%g, %g]", d, lo, hi));
  *out = d;
  return absl::OkStatus();
}

absl::Status ReadInt(const rapidjson::Value& v, std::string_view field, int64_t lo, int64_t hi,
                     std::optional<int64_t>* out) {
  if (v.IsNull()) return absl::OkStatus();
  if (!v.IsInt64() && !(v.IsUint64() && v.GetUint64() <= static_cast<uint64_t>(INT64_MAX)))
    return Bad(field, "not an integer");
  const int64_t i = v.IsInt64() ? v.GetInt64() : static_cast<int64_t>(v.GetUint64());
  if (i < lo || i > hi) return Bad(field, absl::StrCat(i, " is outside ", lo, "..", hi));
  *out = i;
  return absl::OkStatus();
}

absl::Status Read(std::string_view key, const rapidjson::Value& v, const std::string& field,
                  SamplingFields* out) {
  if (key == "max_tokens" || key == "max_completion_tokens" || key == "max_new_tokens") {
    return ReadInt(v, field, 1, int64_t{1} << 20, &out->max_tokens);
  }
  if (key == "temperature") return ReadNumber(v, field, 0.0, 100.0, &out->params.temperature);
  if (key == "top_p") return ReadNumber(v, field, 1e-9, 1.0, &out->params.top_p);
  if (key == "top_k") {
    std::optional<int64_t> k;
    if (absl::Status s = ReadInt(v, field, -1, int64_t{1} << 24, &k); !s.ok()) return s;
    if (k.has_value()) out->params.top_k = *k < 0 ? 0 : *k;  // -1: no limit (vLLM's spelling)
    return absl::OkStatus();
  }
  if (key == "seed") {
    std::optional<int64_t> seed;
    if (absl::Status s = ReadInt(v, field, INT64_MIN, INT64_MAX, &seed); !s.ok()) return s;
    if (seed.has_value()) out->params.seed = static_cast<uint64_t>(*seed);
    return absl::OkStatus();
  }
  if (key == "stop") {
    if (v.IsNull()) return absl::OkStatus();
    if (v.IsString()) {
      if (v.GetStringLength() > 0)
        out->params.stop.emplace_back(v.GetString(), v.GetStringLength());
      return absl::OkStatus();
    }
    if (!v.IsArray()) return Bad(field, "neither a string nor an array of strings");
    for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
      if (!v[i].IsString()) return Bad(absl::StrCat(field, "[", i, "]"), "not a string");
      out->params.stop.emplace_back(v[i].GetString(), v[i].GetStringLength());
    }
    return absl::OkStatus();
  }
  if (key == "ignore_eos") {
    if (!v.IsBool()) return Bad(field, "not a boolean");
    out->params.ignore_eos = v.GetBool();
    return absl::OkStatus();
  }
  if (key == "n" || key == "best_of") {
    std::optional<int64_t> n;
    return ReadInt(v, field, 1, 1, &n);
  }
  if (key == "presence_penalty" || key == "frequency_penalty") {
    if (!v.IsNull() && !(v.IsNumber() && v.GetDouble() == 0.0))
      return Bad(field, "not supported (0 only)");
    return absl::OkStatus();
  }
  // repetition_penalty
  if (!v.IsNull() && !(v.IsNumber() && v.GetDouble() == 1.0))
    return Bad(field, "not supported (1 only)");
  return absl::OkStatus();
}

bool IsSamplingField(std::string_view key) {
  for (std::string_view k : {"max_tokens", "max_completion_tokens", "max_new_tokens", "temperature",
                             "top_p", "top_k", "seed", "stop", "ignore_eos", "n", "best_of",
                             "presence_penalty", "frequency_penalty", "repetition_penalty"}) {
    if (key == k) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<bool> ReadSamplingField(std::string_view key, const rapidjson::Value& value,
                                       const std::string& field, SamplingFields* out) {
  if (!IsSamplingField(key)) return false;
  if (absl::Status s = Read(key, value, field, out); !s.ok()) return s;
  return true;
}

}  // namespace kiln::server
