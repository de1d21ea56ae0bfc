// Optimizers (tinygrad nn/optim.py; update rules as in the PyTorch docs): SGD (momentum, nesterov,
// weight decay), Adam, AdamW.
//
// An optimizer takes the tensors of nn::Parameters(model): those with requires_grad are updated,
// the others (buffers such as BatchNorm running statistics, which the forward pass Assign()s) are
// only realized with the step, as tinygrad's Optimizer.buffers. The constructor realizes every
// parameter, buffer and state tensor (so each is a buffer that Assign can write).
//
// Step() builds every update as Tensor::Assign on the parameter and state tensors (lr and Adam's
// running beta powers are scalar tensors, so a jitted step needs no recompilation) and realizes them
// all, with `extra` (e.g. the loss), in one schedule. ScheduleStep() only builds them and returns
// the tensors to realize. Parameters without a gradient are an error (FailedPrecondition).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tensor/tensor.h"

namespace kiln::nn {

class Optimizer {
 public:
  Optimizer(std::vector<Tensor*> params, double lr);
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;

  // Clears Grad() of every parameter.
  void ZeroGrad();
  absl::StatusOr<std::vector<Tensor*>> ScheduleStep();
  absl::Status Step(absl::Span<Tensor* const> extra = {});

  const std::vector<Tensor*>& params() const { return params_; }
  const std::vector<Tensor*>& buffers() const { return buffers_; }
  // The optimizer's own state tensors by stable name ("lr", SGD "b.<i>", Adam "b1_t", "b2_t",
  // "m.<i>", "v.<i>"; i indexes params()), for checkpoints: realized buffers that a checkpoint
  // restore may Assign() in place (a TinyJit capture holding them sees the restored values).
  virtual std::vector<std::pair<std::string, Tensor*>> StateTensors();
  // The learning rate, a float32 scalar buffer (Assign a new value to change it).
  Tensor lr;

 protected:
  // Assigns the update of params_[i] given its gradient; appends the optimizer state tensors it
  // assigned to *state.
  virtual absl::Status Update(absl::Span<const Tensor> grads, std::vector<Tensor*>* state) = 0;
  // Realizes the parameters, buffers, lr and the given state tensors (called by constructors).
  absl::Status RealizeAll(absl::Span<Tensor* const> state);
  std::vector<Tensor*> params_;
  std::vector<Tensor*> buffers_;
  absl::Status init_status_;
};

// g += weight_decay * p; with momentum: b = momentum*b + g, g = nesterov ? g + momentum*b : b;
// p -= lr * g.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor*> params, double lr = 0.001, double momentum = 0.0, double weight_decay = 0.0,
      bool nesterov = false);

 protected:
  absl::Status Update(absl::Span<const Tensor> grads, std::vector<Tensor*>* state) override;

 public:
  std::vector<std::pair<std::string, Tensor*>> StateTensors() override;

 private:
  double momentum_, weight_decay_;
  bool nesterov_;
  std::vector<Tensor> b_;
};

// Adam / AdamW: t += 1; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; m^ = m/(1-b1^t), v^ = v/(1-b2^t);
// p -= lr * (m^/(sqrt(v^)+eps) + [AdamW] weight_decay*p). Adam's weight_decay is L2 (added to g).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor*> params, double lr = 0.001, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8,
       double weight_decay = 0.0, bool decoupled = false);

 protected:
  absl::Status Update(absl::Span<const Tensor> grads, std::vector<Tensor*>* state) override;

 public:
  std::vector<std::pair<std::string, Tensor*>> StateTensors() override;

 private:
  double b1_, b2_, eps_, weight_decay_;
  bool decoupled_;
  Tensor b1_t_, b2_t_;  // b1^t, b2^t (float32 scalars)
  std::vector<Tensor> m_, v_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor*> params, double lr = 0.001, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8,
        double weight_decay = 0.01)
      : Adam(std::move(params), lr, b1, b2, eps, weight_decay, /*decoupled=*/true) {}
};

}  // namespace kiln::nn
