// Module: the common shape of engine/nn layers -- a forward function plus named state tensors.
//
// State. CollectState appends (name, Tensor*) for every state tensor in a fixed order: trainable
// parameters (requires_grad, e.g. "weight", "bias") and buffers (no gradient, e.g. BatchNorm's
// "running_mean"). Names nest with dots the way tinygrad's get_state_dict names them: a Sequential
// stored as "layers" yields "layers.0.weight", "layers.4.running_var". The pointers stay valid while
// the module lives (modules are not copyable).
//
// Training mode (tinygrad's Tensor.training) is per thread, so a server can build a training step
// and an eval-mode forward on two threads at once: BatchNorm uses batch statistics and updates its
// running statistics, and Dropout drops, only while Training() is true on the building thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor/tensor.h"

namespace kiln::nn {

struct NamedTensor {
  std::string name;
  Tensor* tensor = nullptr;
};

bool Training();
void SetTraining(bool on);
// Sets the training mode for a scope and restores the previous one.
class TrainingScope {
 public:
  explicit TrainingScope(bool on) : prev_(Training()) { SetTraining(on); }
  ~TrainingScope() { SetTraining(prev_); }
  TrainingScope(const TrainingScope&) = delete;
  TrainingScope& operator=(const TrainingScope&) = delete;

 private:
  bool prev_;
};

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;
  virtual Tensor Forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return Forward(x); }
  // Appends this module's state tensors, each named prefix + local name.
  virtual void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) = 0;
};

// Ordered state dict (tinygrad get_state_dict) of `m`, names prefixed by `prefix` ("" or "model.").
std::vector<NamedTensor> StateDict(Module& m, const std::string& prefix = "");
// Every state tensor (tinygrad get_parameters: parameters and buffers); pass these to an optimizer.
std::vector<Tensor*> Parameters(Module& m);
// Only the tensors with requires_grad.
std::vector<Tensor*> TrainableParameters(Module& m);
// Realizes every state tensor of `m` in one schedule.
absl::Status RealizeState(Module& m);

// A list of layers applied in order: modules (with state, named by their index) and stateless
// functions (ReLU, pooling: they take an index too, as in a Python list).
class Sequential : public Module {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;
  Sequential& Add(std::unique_ptr<Module> m);
  Sequential& Add(Fn fn);
  template <typename M, typename... Args>
  M& Emplace(Args&&... args) {
    auto m = std::make_unique<M>(std::forward<Args>(args)...);
    M& ref = *m;
    Add(std::move(m));
    return ref;
  }
  Tensor Forward(const Tensor& x) override;
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override;
  size_t size() const { return layers_.size(); }

 private:
  struct Layer {
    std::unique_ptr<Module> module;
    Fn fn;
  };
  std::vector<Layer> layers_;
};

}  // namespace kiln::nn
