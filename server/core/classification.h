// Triton's classification extension: a requested output with parameter `classification: k`
// (gRPC int64_param, REST a JSON integer) is answered as a BYTES tensor of the k largest values
// of each batch item, "value:index" (value as std::to_string writes it, 6 decimals), largest
// first; equal values keep index order. Shape [batch, min(k, n)] for a batching model, else
// [min(k, n)], where n is the output's element count per batch item. Numeric outputs only
// (FP16/BF16 and BOOL/BYTES: INVALID_ARGUMENT naming outputs[i].parameters.classification).
// Labels: an output's `label_filename` names a text file in the model's folder (beside
// config.pbtxt), one label per line, line i labelling index i. Its strings become
// "value:index:label"; an index past the last line, or an empty line, keeps "value:index".
// The files are read once, at load (ReadOutputLabels); a file that is missing, outside the
// folder or over kMaxLabelFileBytes fails the load.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/model_config.pb.h"
#include "server/core/infer_request.h"

namespace kiln::server {

class RepositoryFiles;

// Labels by output name, for the outputs whose config names a label_filename.
using OutputLabels = std::map<std::string, std::vector<std::string>, std::less<>>;

inline constexpr int64_t kMaxLabelFileBytes = int64_t{16} << 20;

// The label files of `config`'s outputs, read from the model folder `model_name` (null when no
// output names one). INVALID_ARGUMENT names the output and the file: a path that is absolute or
// has "." / ".." / empty components, or a file the repository refuses (repository_files.h).
absl::StatusOr<std::shared_ptr<const OutputLabels>> ReadOutputLabels(
    const RepositoryFiles& files, const std::string& model_name,
    const inference::ModelConfig& config);

// Rewrites the outputs of `response` that `request` asked to classify (request.classification,
// parallel to requested_outputs; 0 = the raw tensor). `labels` may be null.
absl::Status ApplyClassification(const inference::ModelConfig& config, const OutputLabels* labels,
                                 const InferRequest& request, InferResponse* response);

}  // namespace kiln::server
