#include "engine/nn/losses.h"

#include "absl/strings/str_cat.h"

namespace kiln::nn {

Tensor SparseCategoricalCrossEntropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index,
                                     double label_smoothing, const std::string& reduction) {
  return logits.SparseCategoricalCrossentropy(labels, ignore_index, label_smoothing, reduction);
}

Tensor MSELoss(const Tensor& pred, const Tensor& target, const std::string& reduction) {
  Tensor d = pred.Sub(target);
  Tensor sq = d.Mul(d);
  if (reduction == "mean") return sq.Mean();
  if (reduction == "sum") return sq.Sum();
  if (reduction == "none") return sq;
  return Tensor::FromStatus(absl::InvalidArgumentError(absl::StrCat("MSELoss: unknown reduction \"", reduction,
                                                                    "\" (mean, sum or none)")));
}

}  // namespace kiln::nn
