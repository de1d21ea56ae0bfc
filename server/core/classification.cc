#include "server/core/classification.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/core/datatype.h"
#include "server/core/limits.h"
#include "server/core/repository_files.h"

namespace kiln::server {
namespace {

template <typename T>
std::vector<double> Values(const std::string& raw) {
  std::vector<double> out(raw.size() / sizeof(T));
  for (size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(v);
  }
  return out;
}

bool ToDoubles(inference::DataType type, const std::string& raw, std::vector<double>* out) {
  switch (type) {
    case inference::TYPE_FP32: *out = Values<float>(raw); return true;
    case inference::TYPE_FP64: *out = Values<double>(raw); return true;
    case inference::TYPE_INT8: *out = Values<int8_t>(raw); return true;
    case inference::TYPE_INT16: *out = Values<int16_t>(raw); return true;
    case inference::TYPE_INT32: *out = Values<int32_t>(raw); return true;
    case inference::TYPE_INT64: *out = Values<int64_t>(raw); return true;
    case inference::TYPE_UINT8: *out = Values<uint8_t>(raw); return true;
    case inference::TYPE_UINT16: *out = Values<uint16_t>(raw); return true;
    case inference::TYPE_UINT32: *out = Values<uint32_t>(raw); return true;
    case inference::TYPE_UINT64: *out = Values<uint64_t>(raw); return true;
    default: return false;
  }
}

// The value as Triton prints it: std::to_string of the output's own type.
std::string Format(inference::DataType type, double v) {
  switch (type) {
    case inference::TYPE_FP32: return std::to_string(static_cast<float>(v));
    case inference::TYPE_FP64: return std::to_string(v);
    case inference::TYPE_UINT64: return std::to_string(static_cast<uint64_t>(v));
    default: return std::to_string(static_cast<int64_t>(v));
  }
}

// A label_filename stays inside the model folder: relative, no empty, "." or ".." component.
bool IsPlainRelativePath(const std::string& path) {
  if (path.empty() || path.size() > 1024) return false;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// One label per line, as Triton reads them: '\n' ends a line (a '\r' before it is dropped); a
// final line without '\n' counts, a final '\n' adds no empty label.
std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

const std::vector<std::string>* LabelsOf(const OutputLabels* labels, const std::string& output) {
  if (labels == nullptr) return nullptr;
  auto it = labels->find(output);
  return it == labels->end() ? nullptr : &it->second;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const OutputLabels>> ReadOutputLabels(
    const RepositoryFiles& files, const std::string& model_name,
    const inference::ModelConfig& config) {
  auto labels = std::make_shared<OutputLabels>();
  for (int i = 0; i < config.output_size(); ++i) {
    const inference::ModelOutput& output = config.output(i);
    const std::string& file = output.label_filename();
    if (file.empty()) continue;
    const std::string where = absl::StrCat("output[", i, "] ('", output.name(), "').label_filename");
    if (!IsPlainRelativePath(file)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": must be a path inside the model folder (relative, no empty, '.' or '..' part)"));
    }
    absl::StatusOr<std::string> text =
        files.Read(absl::StrCat(model_name, "/", file), kMaxLabelFileBytes, file);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", text.status().message()));
    }
    (*labels)[output.name()] = SplitLines(*text);
  }
  if (labels->empty()) return std::shared_ptr<const OutputLabels>();
  return std::shared_ptr<const OutputLabels>(std::move(labels));
}

absl::Status ApplyClassification(const inference::ModelConfig& config, const OutputLabels* labels,
                                 const InferRequest& request, InferResponse* response) {
  for (size_t r = 0; r < request.classification.size() && r < request.requested_outputs.size(); ++r) {
    const int64_t k = request.classification[r];
    if (k == 0) continue;
    const std::string where = absl::StrCat("outputs[", r, "].parameters.classification");
    for (InferOutput& out : response->outputs) {
      if (out.name != request.requested_outputs[r]) continue;
      std::optional<inference::DataType> type = ParseDataTypeName(out.datatype);
      std::vector<double> values;
      if (!type || !ToDoubles(*type, out.raw, &values)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": output '", out.name, "' is ", out.datatype, "; classification needs a numeric output"));
      }
      const bool batching = config.max_batch_size() > 0 && !out.shape.empty();
      const int64_t batch = batching ? out.shape[0] : 1;
      const int64_t n = batch > 0 ? static_cast<int64_t>(values.size()) / batch : 0;
      const int64_t top = std::min<int64_t>(k, n);
      const std::vector<std::string>* names = LabelsOf(labels, out.name);
      std::string raw;
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (int64_t b = 0; b < batch; ++b) {
        const double* v = values.data() + b * n;
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [v](int64_t x, int64_t y) { return v[x] > v[y]; });
        for (int64_t j = 0; j < top; ++j) {
          std::string s = absl::StrCat(Format(*type, v[idx[j]]), ":", idx[j]);
          const size_t at = static_cast<size_t>(idx[j]);
          if (names != nullptr && at < names->size() && !(*names)[at].empty()) {
            absl::StrAppend(&s, ":", (*names)[at]);
          }
          const uint32_t len = static_cast<uint32_t>(s.size());
          raw.append(reinterpret_cast<const char*>(&len), 4);
          raw += s;
        }
      }
      out.datatype = "BYTES";
      out.shape = batching ? std::vector<int64_t>{batch, top} : std::vector<int64_t>{top};
      out.raw = std::move(raw);
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
