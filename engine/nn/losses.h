// Losses (tinygrad Tensor methods, PyTorch names and reductions).
#pragma once

#include <string>

#include "engine/tensor/tensor.h"

namespace kiln::nn {

// logits (..., C), labels int (...): mean over non-ignored of -log_softmax(logits)[label]
// (Tensor::SparseCategoricalCrossentropy).
Tensor SparseCategoricalCrossEntropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -1,
                                     double label_smoothing = 0.0, const std::string& reduction = "mean");
// (pred - target)^2 reduced by "mean" (default), "sum" or "none"; target broadcasts to pred.
Tensor MSELoss(const Tensor& pred, const Tensor& target, const std::string& reduction = "mean");

}  // namespace kiln::nn
