// Ready-made models and their weight files: the beautiful_mnist CNN (reference/tinygrad.md §11), a small MLP, and
// loading / saving any Module's state dict as safetensors.
//
// Use (training in examples/train_fashion_mnist.cc; inference in kilnd's kiln_builtin platform):
//   nn::MnistCnn model;                                   // random init from Tensor's generator
//   KILN_RETURN_IF_ERROR(nn::LoadModel(model, "model.safetensors"));
//   nn::TrainingScope eval(false);                         // BatchNorm uses its running statistics
//   Tensor logits = model(images);                         // images float32 (N, 1, 28, 28) in [0, 1]
//
// State-dict names are tinygrad's get_state_dict names for the same Python classes, so a file written by tinygrad's
// safe_save(get_state_dict(model)) loads here and back: MnistCnn is "layers.{0,2,6,8}.{weight,bias}" (Conv2d),
// "layers.{4,10}.{weight,bias,running_mean,running_var}" (BatchNorm), "layers.13.{weight,bias}" (Linear); Mlp is
// "layers.{0,2,4,...}.{weight,bias}". Stateless layers (ReLU, pooling, flatten) take an index as in a Python list.
//
// Thread safety: a model is not thread-safe (Forward reads the process-wide training mode; in training mode BatchNorm
// assigns its running statistics). LoadModel / SaveModel must not run concurrently with a Forward on the same model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/nn/layers.h"
#include "engine/nn/module.h"
#include "engine/tensor/tensor.h"

namespace kiln::nn {

// tinygrad examples/beautiful_mnist.py Model: Conv2d(1,32,5) relu Conv2d(32,32,5) relu BatchNorm(32) maxpool2
// Conv2d(32,64,3) relu Conv2d(64,64,3) relu BatchNorm(64) maxpool2 flatten Linear(576,10).
// Input float32 (N, 1, 28, 28); output logits (N, 10). 87,850 trainable parameters.
class MnistCnn : public Module {
 public:
  explicit MnistCnn(const std::string& device = "CPU");
  Tensor Forward(const Tensor& x) override { return layers.Forward(x); }
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override {
    layers.CollectState(prefix + "layers.", out);
  }
  Sequential layers;
};

// Linear(sizes[0], sizes[1]) relu Linear(sizes[1], sizes[2]) relu ... Linear(sizes[n-2], sizes[n-1]): no ReLU after
// the last layer. sizes needs at least two entries (fewer: Forward returns an InvalidArgument error tensor).
class Mlp : public Module {
 public:
  explicit Mlp(const std::vector<int64_t>& sizes, const std::string& device = "CPU");
  Tensor Forward(const Tensor& x) override;
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override {
    layers.CollectState(prefix + "layers.", out);
  }
  Sequential layers;
};

// Copies `state` into m's state tensors by name (tinygrad load_state_dict). Every state tensor of `m` must be present
// with the same shape (else InvalidArgument naming it; nothing of `m` is changed then); a different float dtype is
// cast. With `strict`, names in `state` that `m` lacks are an error too (tinygrad only warns). A realized target is
// written in place (Assign: its buffer, and so any TinyJit capture or optimizer that holds it, sees the new values);
// an unrealized one is replaced. All targets are realized together before returning.
absl::Status LoadStateDict(Module& m, const std::map<std::string, Tensor>& state,
                           bool strict = true);

// SafeLoad(path) + LoadStateDict (engine/nn/state/safetensors.h for the file checks).
absl::Status LoadModel(Module& m, const std::string& path, bool strict = true);
// Writes m's state dict (parameters and buffers) to `path` as safetensors; `metadata` goes into "__metadata__".
absl::Status SaveModel(Module& m, const std::string& path,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln::nn
