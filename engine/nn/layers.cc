#include "engine/nn/layers.h"

#include <cmath>
#include <utility>

namespace kiln::nn {

namespace {
// Note: Tensor assignment keeps the target's autograd state, so each constructor marks its
// parameters with MarkParams after assigning them.
Tensor UniformParam(absl::Span<const int64_t> shape, double bound, const std::string& device) {
  return Tensor::Uniform(shape, -bound, bound, dtypes::kFloat32, device);
}
// A fresh buffer filled with `v` (not Full().Contiguous(): equal graphs intern to one node and
// would realize into one shared buffer).
Tensor FilledBuffer(absl::Span<const int64_t> shape, float v, const std::string& device) {
  Tensor t = Tensor::Empty(shape, dtypes::kFloat32, device);
  t.Assign(v);
  return t;
}
void MarkParams(Tensor* w, std::optional<Tensor>* b) {
  if (w != nullptr) w->RequiresGrad();
  if (b != nullptr && b->has_value()) (*b)->RequiresGrad();
}
void Push(const std::string& prefix, const char* name, Tensor* t, std::vector<NamedTensor>* out) {
  out->push_back(NamedTensor{prefix + name, t});
}
}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias, const std::string& device) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = UniformParam({out_features, in_features}, bound, device);
  if (has_bias) bias = UniformParam({out_features}, bound, device);
  MarkParams(&weight, &bias);
}

Tensor Linear::Forward(const Tensor& x) {
  Tensor y = x.Matmul(weight.Transpose());
  return bias ? y.Add(*bias) : y;
}

void Linear::CollectState(const std::string& prefix, std::vector<NamedTensor>* out) {
  Push(prefix, "weight", &weight, out);
  if (bias) Push(prefix, "bias", &*bias, out);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, IntVec kernel_size, ConvOptions opts, bool has_bias,
               const std::string& device)
    : options(std::move(opts)) {
  int64_t fan_in = in_channels / options.groups;
  for (int64_t k : kernel_size) fan_in *= k;
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  IntVec shape = {out_channels, in_channels / options.groups};
  shape.insert(shape.end(), kernel_size.begin(), kernel_size.end());
  weight = UniformParam(shape, bound, device);
  if (has_bias) bias = UniformParam({out_channels}, bound, device);
  MarkParams(&weight, &bias);
}

Tensor Conv2d::Forward(const Tensor& x) { return x.Conv2d(weight, bias, options); }

void Conv2d::CollectState(const std::string& prefix, std::vector<NamedTensor>* out) {
  Push(prefix, "weight", &weight, out);
  if (bias) Push(prefix, "bias", &*bias, out);
}

BatchNorm::BatchNorm(int64_t num_features, double eps_, bool affine, bool track, double momentum_,
                     const std::string& device)
    : eps(eps_), momentum(momentum_), track_running_stats(track) {
  if (affine) {
    weight = FilledBuffer({num_features}, 1.0f, device);
    bias = FilledBuffer({num_features}, 0.0f, device);
    weight->RequiresGrad();
    bias->RequiresGrad();
  }
  running_mean = FilledBuffer({num_features}, 0.0f, device);
  running_var = FilledBuffer({num_features}, 1.0f, device);
}

Tensor BatchNorm::Forward(const Tensor& x) {
  if (!x.ok()) return x;
  IntVec axes = {0};
  for (int64_t i = 2; i < x.ndim(); ++i) axes.push_back(i);
  IntVec bshape(x.ndim(), 1);
  bshape[1] = x.size(1);
  Tensor mean, invstd;
  if (Training()) {
    mean = x.Mean(Axes(axes));
    // the mean is detached inside the variance: d(var)/d(mean) = 0 (tinygrad)
    Tensor y = x.Sub(mean.Detach().Reshape(bshape));
    Tensor var = y.Mul(y).Mean(Axes(axes));
    invstd = var.Add(eps).Rsqrt();
    if (track_running_stats) {
      // the assigns below need realized targets (the optimizer realizes them; a bare layer may not be)
      if (!running_mean.IsRealized() || !running_var.IsRealized()) {
        std::vector<Tensor*> stats = {&running_mean, &running_var};
        if (absl::Status st = Tensor::Realize(stats); !st.ok()) return Tensor::FromStatus(st);
      }
      double n = static_cast<double>(x.numel()) / static_cast<double>(x.size(1));
      running_mean.Assign(running_mean.Mul(1.0 - momentum).Add(mean.Detach().Mul(momentum)));
      running_var.Assign(running_var.Mul(1.0 - momentum).Add(var.Detach().Mul(momentum * n / (n - 1.0))));
    }
  } else {
    mean = running_mean;
    invstd = running_var.Add(eps).Rsqrt();
  }
  return x.BatchNorm(weight, bias, mean, invstd, 1);
}

void BatchNorm::CollectState(const std::string& prefix, std::vector<NamedTensor>* out) {
  if (weight) Push(prefix, "weight", &*weight, out);
  if (bias) Push(prefix, "bias", &*bias, out);
  Push(prefix, "running_mean", &running_mean, out);
  Push(prefix, "running_var", &running_var, out);
}

LayerNorm::LayerNorm(IntVec shape, double eps_, bool affine, const std::string& device)
    : normalized_shape(std::move(shape)), eps(eps_) {
  if (affine) {
    weight = FilledBuffer(normalized_shape, 1.0f, device);
    bias = FilledBuffer(normalized_shape, 0.0f, device);
    weight->RequiresGrad();
    bias->RequiresGrad();
  }
}

Tensor LayerNorm::Forward(const Tensor& x) {
  return x.LayerNorm(static_cast<int64_t>(normalized_shape.size()), weight, bias, eps);
}

void LayerNorm::CollectState(const std::string& prefix, std::vector<NamedTensor>* out) {
  if (weight) Push(prefix, "weight", &*weight, out);
  if (bias) Push(prefix, "bias", &*bias, out);
}

Embedding::Embedding(int64_t vocab, int64_t embed, const std::string& device) : vocab_size(vocab), embed_size(embed) {
  double bound = std::sqrt(6.0 / static_cast<double>(vocab + embed));
  weight = UniformParam({vocab, embed}, bound, device);
  weight.RequiresGrad();
}

Tensor Embedding::Forward(const Tensor& idx) {
  // one-hot rows @ weight: differentiable with the generic rules
  return idx.OneHot(vocab_size).Cast(weight.dtype()).Matmul(weight);
}

void Embedding::CollectState(const std::string& prefix, std::vector<NamedTensor>* out) {
  Push(prefix, "weight", &weight, out);
}

Tensor Dropout::Forward(const Tensor& x) {
  if (!Training() || p == 0.0 || !x.ok()) return x;
  Tensor keep = Tensor::Rand(x.shape(), dtypes::kFloat32, x.device()).Ge(p);
  return keep.Where(x.Mul(1.0 / (1.0 - p)), 0);
}

}  // namespace kiln::nn
