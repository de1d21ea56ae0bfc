// Layers (tinygrad nn/__init__.py): Linear, Conv2d, BatchNorm (2d), LayerNorm, Embedding, Dropout.
//
// Parameters are float32 tensors created lazily on the layer's device with RequiresGrad() set
// (engine/tensor/gradient.h), so Backward() fills their Grad(); buffers (running statistics) do not
// require grad. Init follows tinygrad (= PyTorch): Linear and Conv2d weights and biases are
// Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a = sqrt(5)), fan_in = in_features
// or in_channels/groups * kh * kw; norms start at weight 1, bias 0; Embedding is glorot-uniform.
// Random init draws from Tensor's process-wide generator (Tensor::ManualSeed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/nn/module.h"
#include "engine/tensor/tensor.h"

namespace kiln::nn {

// y = x @ weight.T + bias; weight (out, in), bias (out).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, const std::string& device = "CPU");
  Tensor Forward(const Tensor& x) override;
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override;
  Tensor weight;
  std::optional<Tensor> bias;
};

// weight (out, in/groups, kh, kw), bias (out).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, IntVec kernel_size, ConvOptions options = {},
         bool bias = true, const std::string& device = "CPU");
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvOptions options = {},
         bool bias = true, const std::string& device = "CPU")
      : Conv2d(in_channels, out_channels, IntVec{kernel_size, kernel_size}, std::move(options), bias, device) {}
  Tensor Forward(const Tensor& x) override;
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override;
  Tensor weight;
  std::optional<Tensor> bias;
  ConvOptions options;
};

// BatchNorm over dim 1 of (N, C, ...) (tinygrad BatchNorm = BatchNorm2d). In training mode it
// normalizes with the batch statistics (biased variance) and assigns running_mean/running_var
// <- (1-momentum)*running + momentum*batch (the variance unbiased, n/(n-1)); realize those with the
// optimizer step (they are among Parameters()). In eval mode it uses the running statistics.
class BatchNorm : public Module {
 public:
  explicit BatchNorm(int64_t num_features, double eps = 1e-5, bool affine = true, bool track_running_stats = true,
                     double momentum = 0.1, const std::string& device = "CPU");
  Tensor Forward(const Tensor& x) override;
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override;
  std::optional<Tensor> weight, bias;
  Tensor running_mean, running_var;
  double eps, momentum;
  bool track_running_stats;
};
using BatchNorm2d = BatchNorm;

// Normalizes over the last normalized_shape.size() dims; optional elementwise affine.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(IntVec normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     const std::string& device = "CPU");
  Tensor Forward(const Tensor& x) override;
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override;
  IntVec normalized_shape;
  double eps;
  std::optional<Tensor> weight, bias;
};

// idx (int, any shape) -> (..., embed_size) rows of weight (vocab_size, embed_size).
class Embedding : public Module {
 public:
  Embedding(int64_t vocab_size, int64_t embed_size, const std::string& device = "CPU");
  Tensor Forward(const Tensor& idx) override;
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override;
  int64_t vocab_size, embed_size;
  Tensor weight;
};

// Training mode: zeroes each element with probability p and scales the rest by 1/(1-p); identity
// in eval mode or with p == 0.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : p(p) {}
  Tensor Forward(const Tensor& x) override;
  void CollectState(const std::string&, std::vector<NamedTensor>*) override {}
  double p;
};

}  // namespace kiln::nn
