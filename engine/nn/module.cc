#include "engine/nn/module.h"

#include "absl/strings/str_cat.h"

namespace kiln::nn {

namespace {
// Per thread: kilnd builds a training job's step on one thread while inference builds eval-mode
// forwards on another; a process-wide flag would let one capture the other's mode.
thread_local bool t_training = false;
}  // namespace

bool Training() { return t_training; }
void SetTraining(bool on) { t_training = on; }

std::vector<NamedTensor> StateDict(Module& m, const std::string& prefix) {
  std::vector<NamedTensor> out;
  m.CollectState(prefix, &out);
  return out;
}

std::vector<Tensor*> Parameters(Module& m) {
  std::vector<Tensor*> out;
  for (NamedTensor& nt : StateDict(m)) out.push_back(nt.tensor);
  return out;
}

std::vector<Tensor*> TrainableParameters(Module& m) {
  std::vector<Tensor*> out;
  for (NamedTensor& nt : StateDict(m)) {
    if (nt.tensor->requires_grad()) out.push_back(nt.tensor);
  }
  return out;
}

absl::Status RealizeState(Module& m) {
  std::vector<Tensor*> ts = Parameters(m);
  return Tensor::Realize(ts);
}

Sequential& Sequential::Add(std::unique_ptr<Module> m) {
  layers_.push_back(Layer{std::move(m), nullptr});
  return *this;
}

Sequential& Sequential::Add(Fn fn) {
  layers_.push_back(Layer{nullptr, std::move(fn)});
  return *this;
}

Tensor Sequential::Forward(const Tensor& x) {
  Tensor h = x;
  for (Layer& l : layers_) h = l.module ? l.module->Forward(h) : l.fn(h);
  return h;
}

void Sequential::CollectState(const std::string& prefix, std::vector<NamedTensor>* out) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].module) layers_[i].module->CollectState(absl::StrCat(prefix, i, "."), out);
  }
}

}  // namespace kiln::nn
