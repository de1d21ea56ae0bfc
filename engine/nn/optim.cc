#include "engine/nn/optim.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace kiln::nn {

namespace {
Tensor ScalarBuffer(float v, const std::string& device) { return Tensor::FromVector<float>({v}, {}, device); }
// A fresh zero-filled buffer. Not Zeros().Contiguous(): equal UOp graphs are one interned node and
// would realize into one shared buffer.
Tensor ZerosBuffer(const Tensor& like) {
  Tensor t = Tensor::Empty(like.shape(), like.dtype(), like.device());
  t.Assign(0);
  return t;
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor*> params, double lr_value) {
  for (Tensor* t : params) (t->requires_grad() ? params_ : buffers_).push_back(t);
  std::string device = params_.empty() ? "CPU" : params_[0]->device();
  lr = ScalarBuffer(static_cast<float>(lr_value), device);
}

absl::Status Optimizer::RealizeAll(absl::Span<Tensor* const> state) {
  std::vector<Tensor*> all = params_;
  all.insert(all.end(), buffers_.begin(), buffers_.end());
  all.insert(all.end(), state.begin(), state.end());
  all.push_back(&lr);
  for (Tensor* t : params_) {
    if (!t->IsRealized()) *t = t->Contiguous();
  }
  return Tensor::Realize(all);
}

void Optimizer::ZeroGrad() {
  for (Tensor* t : params_) t->ZeroGrad();
}

absl::StatusOr<std::vector<Tensor*>> Optimizer::ScheduleStep() {
  KILN_RETURN_IF_ERROR(init_status_);
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor* p = params_[i];
    if (!p->has_grad())
      return absl::FailedPreconditionError(absl::StrCat("Optimizer: parameter ", i, " ", p->ToString(),
                                                        " has no gradient (call Backward first)"));
    Tensor g = p->Grad();
    KILN_RETURN_IF_ERROR(g.status());
    grads.push_back(std::move(g));
  }
  std::vector<Tensor*> state;
  KILN_RETURN_IF_ERROR(Update(grads, &state));
  std::vector<Tensor*> out = params_;
  out.insert(out.end(), buffers_.begin(), buffers_.end());
  out.insert(out.end(), state.begin(), state.end());
  for (Tensor* t : out) KILN_RETURN_IF_ERROR(t->status());
  return out;
}

absl::Status Optimizer::Step(absl::Span<Tensor* const> extra) {
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor*> ts, ScheduleStep());
  ts.insert(ts.end(), extra.begin(), extra.end());
  return Tensor::Realize(ts);
}

SGD::SGD(std::vector<Tensor*> params, double lr_value, double momentum, double weight_decay, bool nesterov)
    : Optimizer(std::move(params), lr_value), momentum_(momentum), weight_decay_(weight_decay), nesterov_(nesterov) {
  std::vector<Tensor*> state;
  if (momentum_ != 0.0) {
    b_.reserve(params_.size());
    for (Tensor* p : params_) b_.push_back(ZerosBuffer(*p));
    for (Tensor& b : b_) state.push_back(&b);
  }
  init_status_ = RealizeAll(state);
}

absl::Status SGD::Update(absl::Span<const Tensor> grads, std::vector<Tensor*>* state) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor* p = params_[i];
    Tensor g = grads[i];
    if (weight_decay_ != 0.0) g = g.Add(p->Mul(weight_decay_));
    if (momentum_ != 0.0) {
      b_[i].Assign(b_[i].Mul(momentum_).Add(g));
      g = nesterov_ ? g.Add(b_[i].Mul(momentum_)) : b_[i];
      state->push_back(&b_[i]);
    }
    p->Assign(p->Sub(g.Mul(lr)));
  }
  return absl::OkStatus();
}

Adam::Adam(std::vector<Tensor*> params, double lr_value, double b1, double b2, double eps, double weight_decay,
           bool decoupled)
    : Optimizer(std::move(params), lr_value), b1_(b1), b2_(b2), eps_(eps), weight_decay_(weight_decay),
      decoupled_(decoupled) {
  b1_t_ = ScalarBuffer(1.0f, lr.device());
  b2_t_ = ScalarBuffer(1.0f, lr.device());
  m_.reserve(params_.size());
  v_.reserve(params_.size());
  for (Tensor* p : params_) {
    m_.push_back(ZerosBuffer(*p));
    v_.push_back(ZerosBuffer(*p));
  }
  std::vector<Tensor*> state = {&b1_t_, &b2_t_};
  for (Tensor& m : m_) state.push_back(&m);
  for (Tensor& v : v_) state.push_back(&v);
  init_status_ = RealizeAll(state);
}

absl::Status Adam::Update(absl::Span<const Tensor> grads, std::vector<Tensor*>* state) {
  b1_t_.Assign(b1_t_.Mul(b1_));
  b2_t_.Assign(b2_t_.Mul(b2_));
  state->push_back(&b1_t_);
  state->push_back(&b2_t_);
  Tensor c1 = b1_t_.RSub(1.0);  // 1 - b1^t
  Tensor c2 = b2_t_.RSub(1.0);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor* p = params_[i];
    Tensor g = grads[i];
    if (weight_decay_ != 0.0 && !decoupled_) g = g.Add(p->Mul(weight_decay_));
    m_[i].Assign(m_[i].Mul(b1_).Add(g.Mul(1.0 - b1_)));
    v_[i].Assign(v_[i].Mul(b2_).Add(g.Mul(g).Mul(1.0 - b2_)));
    state->push_back(&m_[i]);
    state->push_back(&v_[i]);
    Tensor up = m_[i].Div(c1).Div(v_[i].Div(c2).Sqrt().Add(eps_));
    if (weight_decay_ != 0.0 && decoupled_) up = up.Add(p->Mul(weight_decay_));
    p->Assign(p->Sub(up.Mul(lr)));
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::StateTensors() { return {{"lr", &lr}}; }

std::vector<std::pair<std::string, Tensor*>> SGD::StateTensors() {
  std::vector<std::pair<std::string, Tensor*>> out = Optimizer::StateTensors();
  for (size_t i = 0; i < b_.size(); ++i) out.emplace_back("b." + std::to_string(i), &b_[i]);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Adam::StateTensors() {
  std::vector<std::pair<std::string, Tensor*>> out = Optimizer::StateTensors();
  out.emplace_back("b1_t", &b1_t_);
  out.emplace_back("b2_t", &b2_t_);
  for (size_t i = 0; i < m_.size(); ++i) out.emplace_back("m." + std::to_string(i), &m_[i]);
  for (size_t i = 0; i < v_.size(); ++i) out.emplace_back("v." + std::to_string(i), &v_[i]);
  return out;
}

}  // namespace kiln::nn
