// Autograd: gradient rules (a PatternMatcher over tensor-level UOps), the reverse walk, and the
// Tensor autograd members (requires_grad registry, Grad, Backward).
#include "engine/tensor/gradient.h"

#include <cmath>
#include <mutex>
#include <numbers>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace kiln {

namespace {

constexpr double kLn2 = std::numbers::ln2;

// The rewrite ctx of a gradient rule: the upstream gradient of the matched node.
struct GradCtx {
  Tensor grad;
  std::string device;
  Tensor Wrap(const UOpPtr& u) const { return Tensor(u, device); }
};

// One entry of a rule's result: a Tensor contribution or a raw UOp (NoGradient()).
struct GradOut {
  UOpPtr u;
  GradOut(const Tensor& t) : u(t.ok() ? t.uop() : UOpPtr()) {}  // NOLINT(google-explicit-constructor)
  GradOut(const UOpPtr& p) : u(p) {}                             // NOLINT(google-explicit-constructor)
};

// TUPLE of per-source gradients; null (no match) if building one failed.
UOpPtr Tuple(std::initializer_list<GradOut> grads) {
  UOpVec v;
  for (const GradOut& g : grads) {
    if (!g.u) return nullptr;
    v.push_back(g.u);
  }
  return UOp::Make(Op::TUPLE, dtypes::kVoid, v);
}

#define KILN_GRAD_RULE(...)                                      \
  [](const Bindings& b) -> UOpPtr {                              \
    const GradCtx& c = *b.ctx<GradCtx>();                        \
    const UOpPtr& ret = b.root();                                \
    const Tensor& g = c.grad;                                    \
    (void)ret;                                                   \
    (void)g;                                                     \
    __VA_ARGS__                                                  \
  }

// Source i of `ret` as a Tensor.
#define SRC(i) c.Wrap(ret->src(i))

// The gradient of REDUCE_AXIS(op, axes): ret keeps the reduced dims as 1, so a value of ret's shape
// broadcasts back to the input by EXPAND.
UOpPtr ReduceGradient(const GradCtx& c, const UOpPtr& ret) {
  const auto& ra = std::get<ReduceArg>(ret->arg());
  const Shape& in_shape = ret->src(0)->shape();
  Tensor x = c.Wrap(ret->src(0));
  Tensor r = c.Wrap(ret);
  Tensor g = c.grad;
  Tensor ge = g.Expand(in_shape);
  switch (ra.op) {
    case Op::ADD:
      return Tuple({ge});
    case Op::MAX: {
      // ties share the gradient equally
      Tensor is_max = x.Eq(r.Expand(in_shape)).Cast(g.dtype());
      Tensor count = is_max.Sum(Axes(ra.axes), /*keepdim=*/true).Expand(in_shape);
      return Tuple({is_max.Div(count).Mul(ge)});
    }
    case Op::MUL: {
      // d/dx_i prod = prod_{j != i} x_j, exact with zeros: the product of the non-zero elements,
      // at the single zero when there is exactly one, else 0.
      Tensor is_zero = x.Eq(0);
      Tensor nz_prod = is_zero.Where(1, x).Prod(Axes(ra.axes), true).Expand(in_shape);
      Tensor zeros = is_zero.Cast(g.dtype()).Sum(Axes(ra.axes), true).Expand(in_shape);
      Tensor at_zero = zeros.Eq(1).Where(nz_prod, 0);
      Tensor elsewhere = zeros.Eq(0).Where(nz_prod.Div(is_zero.Where(1, x)), 0);
      return Tuple({is_zero.Where(at_zero, elsewhere).Mul(ge)});
    }
    default:
      return nullptr;
  }
}

IntVec ArgSort(const IntVec& perm) {
  IntVec inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

PatternMatcher MakeGradientRules() {
  std::vector<Rule> rules = {
      // ** no gradient **
      {UPat(OpSet{Op::CMPLT, Op::CMPNE, Op::CMPEQ}), KILN_GRAD_RULE(return Tuple({NoGradient(), NoGradient()});),
       "cmp -> (none, none)"},
      {UPat(Op::BITCAST), KILN_GRAD_RULE(return Tuple({NoGradient()});), "bitcast -> none"},
      {UPat(Op::DETACH), KILN_GRAD_RULE(return Tuple({NoGradient()});), "detach -> none"},
      {UPat(Op::TRUNC), KILN_GRAD_RULE(return Tuple({g.ZerosLike()});), "d trunc(x) = 0"},
      // ** unary **
      {UPat(Op::CAST), KILN_GRAD_RULE(
           if (!ret->src(0)->dtype().IsFloat()) return Tuple({NoGradient()});
           return Tuple({g.Cast(ret->src(0)->dtype())});), "d cast(x) = cast_back(g)"},
      {UPat(Op::NEG), KILN_GRAD_RULE(return Tuple({g.Neg()});), "d -x = -g"},
      {UPat(Op::RECIPROCAL), KILN_GRAD_RULE(Tensor r = c.Wrap(ret); return Tuple({g.Neg().Mul(r).Mul(r)});),
       "d 1/x = -g/x^2"},
      {UPat(Op::SIN), KILN_GRAD_RULE(return Tuple({SRC(0).RSub(std::numbers::pi / 2).Sin().Mul(g)});),
       "d sin(x) = g*sin(pi/2-x)"},
      {UPat(Op::LOG2), KILN_GRAD_RULE(return Tuple({g.Div(SRC(0).Mul(kLn2))});), "d log2(x) = g/(x ln2)"},
      {UPat(Op::EXP2), KILN_GRAD_RULE(return Tuple({c.Wrap(ret).Mul(g).Mul(kLn2)});), "d exp2(x) = g*ret*ln2"},
      {UPat(Op::SQRT), KILN_GRAD_RULE(return Tuple({g.Div(c.Wrap(ret).Mul(2))});), "d sqrt(x) = g/(2 ret)"},
      // ** binary **
      {UPat(Op::ADD), KILN_GRAD_RULE(return Tuple({g, g});), "d x+y = (g, g)"},
      {UPat(Op::SUB), KILN_GRAD_RULE(return Tuple({g, g.Neg()});), "d x-y = (g, -g)"},
      {UPat(Op::MUL), KILN_GRAD_RULE(return Tuple({SRC(1).Mul(g), SRC(0).Mul(g)});), "d x*y = (g*y, g*x)"},
      {UPat(Op::FDIV), KILN_GRAD_RULE(
           Tensor y = SRC(1); return Tuple({g.Div(y), g.Neg().Mul(SRC(0)).Div(y.Mul(y))});),
       "d x/y = (g/y, -g*x/y^2)"},
      {UPat(Op::MAX), KILN_GRAD_RULE(
           Tensor x = SRC(0); Tensor y = SRC(1); Tensor half = g.Mul(0.5);
           return Tuple({x.Gt(y).Where(g, x.Ne(y).Where(0, half)), x.Lt(y).Where(g, x.Ne(y).Where(0, half))});),
       "d max(x,y): g to the larger, ties split 0.5/0.5"},
      {UPat(Op::POW), KILN_GRAD_RULE(
           Tensor b0 = SRC(0); Tensor e = SRC(1); Tensor r = c.Wrap(ret);
           Tensor db = b0.Eq(0).LogicalAnd(e.Eq(0)).Where(e, e.Mul(b0.Pow(e.Sub(1))));
           Tensor de = b0.Eq(0).Where(e.Lt(0).Where(-INFINITY, 0), r.Mul(b0.Log()));
           return Tuple({g.Mul(db), g.Mul(de)});),
       "d b^e = (g*e*b^(e-1), g*b^e*ln b)"},
      // ** ternary **
      {UPat(Op::WHERE), KILN_GRAD_RULE(
           Tensor cond = SRC(0);
           return Tuple({NoGradient(), cond.Where(g, 0), cond.Where(0, g)});),
       "d where(c,x,y) = (none, c?g:0, c?0:g)"},
      // ** reductions **
      {UPat(Op::REDUCE_AXIS), KILN_GRAD_RULE(return ReduceGradient(c, ret);),
       "d reduce(x): ADD expands, MAX splits ties, MUL prod of others"},
      // ** graph markers **
      {UPat(Op::CONTIGUOUS), KILN_GRAD_RULE(return Tuple({g});), "d contiguous(x) = g"},
      {UPat(Op::CONTIGUOUS_BACKWARD), KILN_GRAD_RULE(return Tuple({g.Contiguous()});),
       "d contiguous_backward(x) = contiguous(g)"},
      {UPat(Op::ASSIGN), KILN_GRAD_RULE(return Tuple({NoGradient(), g});), "d assign(t, v) = (none, g)"},
      {UPat(Op::COPY), KILN_GRAD_RULE(return Tuple({g, NoGradient()});), "d copy(x) = g"},
      // ** movement **
      {UPat(Op::RESHAPE), KILN_GRAD_RULE(return Tuple({g.Reshape(ret->src(0)->shape())});),
       "d reshape(x) = reshape_back(g)"},
      {UPat(Op::PERMUTE), KILN_GRAD_RULE(return Tuple({g.Permute(ArgSort(ret->ArgVec()))});),
       "d permute(x) = permute(g, argsort)"},
      {UPat(Op::EXPAND), KILN_GRAD_RULE(
           IntVec axes; const Shape& in = ret->src(0)->shape();
           for (size_t i = 0; i < in.size(); ++i) if (in[i] != ret->shape()[i]) axes.push_back(static_cast<int64_t>(i));
           return Tuple({g.Sum(Axes(axes), /*keepdim=*/true, g.dtype())});),
       "d expand(x) = sum over expanded axes"},
      {UPat(Op::PAD), KILN_GRAD_RULE(
           std::vector<std::pair<int64_t, int64_t>> bounds; const IntVec& p = ret->ArgVec(); const Shape& in = ret->src(0)->shape();
           for (size_t i = 0; i < in.size(); ++i) bounds.emplace_back(p[2 * i], p[2 * i] + in[i]);
           return Tuple({g.Shrink(bounds)});),
       "d pad(x) = shrink(g)"},
      {UPat(Op::SHRINK), KILN_GRAD_RULE(
           std::vector<std::pair<int64_t, int64_t>> pads; const IntVec& s = ret->ArgVec(); const Shape& in = ret->src(0)->shape();
           for (size_t i = 0; i < in.size(); ++i) pads.emplace_back(s[2 * i], in[i] - s[2 * i + 1]);
           return Tuple({g.Pad(pads)});),
       "d shrink(x) = pad(g)"},
      {UPat(Op::FLIP), KILN_GRAD_RULE(
           IntVec axes; const IntVec& f = ret->ArgVec();
           for (size_t i = 0; i < f.size(); ++i) if (f[i] != 0) axes.push_back(static_cast<int64_t>(i));
           return Tuple({g.Flip(Axes(axes))});),
       "d flip(x) = flip(g)"},
  };
  return PatternMatcher(std::move(rules), "gradient");
}

#undef SRC
#undef KILN_GRAD_RULE

// Sums `g` back to `shape` (numpy broadcasting in reverse).
Tensor SumToShape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor t = g;
  int64_t extra = t.ndim() - static_cast<int64_t>(shape.size());
  if (extra > 0) {
    IntVec lead;
    for (int64_t i = 0; i < extra; ++i) lead.push_back(i);
    t = t.Sum(Axes(lead), false, t.dtype());
  }
  IntVec axes;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1 && t.shape()[i] != 1) axes.push_back(static_cast<int64_t>(i));
  }
  if (!axes.empty()) t = t.Sum(Axes(axes), true, t.dtype());
  return t.Reshape(shape);
}

}  // namespace

const UOpPtr& NoGradient() {
  static const UOpPtr* none = new UOpPtr(UOp::Make(Op::NOOP, dtypes::kVoid));
  return *none;
}

const PatternMatcher& GradientRules() {
  static const PatternMatcher* pm = new PatternMatcher(MakeGradientRules());
  return *pm;
}

namespace {

struct Overrides {
  std::mutex mu;
  absl::flat_hash_map<std::string, GradientOverrideFn> by_key;
};
Overrides& GlobalOverrides() {
  static Overrides* o = new Overrides();
  return *o;
}

thread_local const UOp* g_override_bypass = nullptr;  // ComputeGradientByRules' root

GradientOverrideFn FindOverride(const UOp* u) {
  if (u == g_override_bypass) return nullptr;
  Overrides& o = GlobalOverrides();
  std::lock_guard<std::mutex> l(o.mu);
  if (o.by_key.empty()) return nullptr;
  const Digest& d = u->Key();
  auto it = o.by_key.find(std::string(reinterpret_cast<const char*>(d.data()), d.size()));
  return it == o.by_key.end() ? nullptr : it->second;
}

}  // namespace

absl::StatusOr<std::vector<UOpPtr>> ComputeGradientByRules(const UOpPtr& root, const UOpPtr& root_grad,
                                                           absl::Span<const UOpPtr> targets, const std::string& device) {
  const UOp* saved = g_override_bypass;
  g_override_bypass = root.get();
  auto out = ComputeGradient(root, root_grad, targets, device);
  g_override_bypass = saved;
  return out;
}

void RegisterGradientOverride(const UOpPtr& node, GradientOverrideFn fn) {
  Overrides& o = GlobalOverrides();
  std::lock_guard<std::mutex> l(o.mu);
  if (o.by_key.size() >= 4096) o.by_key.clear();
  const Digest& d = node->Key();
  o.by_key.insert_or_assign(std::string(reinterpret_cast<const char*>(d.data()), d.size()), std::move(fn));
}

absl::StatusOr<std::vector<UOpPtr>> ComputeGradient(const UOpPtr& root, const UOpPtr& root_grad,
                                                    absl::Span<const UOpPtr> targets, const std::string& device) {
  if (!root || !root_grad) return absl::InvalidArgumentError("Gradient: null root or root gradient");
  if (root->shape() != root_grad->shape())
    return absl::InvalidArgumentError(absl::StrCat("Gradient: the output gradient has shape ",
                                                   ShapeToString(root_grad->shape()), ", the output ",
                                                   ShapeToString(root->shape())));
  absl::flat_hash_set<const UOp*> target_set;
  for (const UOpPtr& t : targets) target_set.insert(t.get());
  // 1. nodes on a path to a target (children first); DETACH blocks.
  std::vector<const UOp*> topo = Toposort(root);
  absl::flat_hash_set<const UOp*> on_path;
  for (const UOp* u : topo) {
    bool in = target_set.contains(u);
    if (!in && u->op() != Op::DETACH) {
      for (const UOpPtr& s : u->src()) {
        if (on_path.contains(s.get())) {
          in = true;
          break;
        }
      }
    }
    if (in && u->dtype().IsFloat()) on_path.insert(u);
  }
  // 2. reverse walk.
  absl::flat_hash_map<const UOp*, Tensor> grads;
  grads.emplace(root.get(), Tensor(root_grad, device));
  const PatternMatcher& pm = GradientRules();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const UOp* u = *it;
    if (!on_path.contains(u)) continue;
    auto g = grads.find(u);
    if (g == grads.end()) continue;
    bool any_src = false;
    for (const UOpPtr& s : u->src()) any_src |= on_path.contains(s.get());
    if (!any_src) continue;  // a leaf target
    if (!g->second.ok()) return g->second.status();
    if (GradientOverrideFn fn = FindOverride(u)) {
      KILN_ASSIGN_OR_RETURN(auto contribs, fn(u->Ptr(), g->second, device));
      for (const auto& [s, gi] : contribs) {
        if (!on_path.contains(s.get())) continue;
        Tensor contrib = SumToShape(Tensor(gi, device), s->shape());
        if (!contrib.ok()) return contrib.status();
        auto [e, inserted] = grads.try_emplace(s.get(), contrib);
        if (!inserted) e->second = e->second.Add(contrib);
      }
      continue;
    }
    GradCtx ctx{g->second, device};
    UOpPtr out = pm.Rewrite(u->Ptr(), &ctx);
    if (!out || out->op() != Op::TUPLE || out->num_src() != u->num_src())
      return absl::UnimplementedError(
          absl::StrCat("Gradient: no gradient rule for ", std::string(OpName(u->op())), " of shape ",
                       ShapeToString(u->shape()), " (", u->dtype().Name(), ")"));
    for (size_t i = 0; i < u->num_src(); ++i) {
      const UOp* s = u->src(i).get();
      const UOpPtr& gi = out->src(i);
      if (gi == NoGradient() || !on_path.contains(s)) continue;
      Tensor contrib(gi, device);
      if (!contrib.ok()) return contrib.status();
      contrib = SumToShape(contrib, s->shape());
      auto [e, inserted] = grads.try_emplace(s, contrib);
      if (!inserted) e->second = e->second.Add(contrib);
    }
  }
  // 3. the targets' gradients.
  std::vector<UOpPtr> result;
  for (const UOpPtr& t : targets) {
    auto g = grads.find(t.get());
    if (g != grads.end()) {
      if (!g->second.ok()) return g->second.status();
      result.push_back(g->second.uop());
    } else {
      Tensor z = Tensor(t, device).ZerosLike();
      if (!z.ok()) return z.status();
      result.push_back(z.uop());
    }
  }
  return result;
}

absl::StatusOr<std::vector<Tensor>> Gradient(const Tensor& loss, absl::Span<const Tensor> targets,
                                             const std::optional<Tensor>& grad) {
  if (!loss.ok()) return loss.status();
  if (!loss.dtype().IsFloat()) return absl::InvalidArgumentError("Gradient: only float Tensors have gradient");
  Tensor seed;
  if (grad) {
    seed = *grad;
    if (!seed.ok()) return seed.status();
  } else {
    if (loss.numel() != 1)
      return absl::InvalidArgumentError(absl::StrCat("Gradient: backward of a non-scalar tensor of shape ",
                                                     ShapeToString(loss.shape()), " needs an output gradient"));
    seed = loss.OnesLike();
  }
  std::vector<UOpPtr> uops;
  for (const Tensor& t : targets) {
    if (!t.ok()) return t.status();
    if (!t.dtype().IsFloat()) return absl::InvalidArgumentError("Gradient: only float Tensors have gradient");
    uops.push_back(t.uop());
  }
  KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> g, ComputeGradient(loss.uop(), seed.uop(), uops, loss.device()));
  std::vector<Tensor> out;
  out.reserve(g.size());
  for (UOpPtr& u : g) out.emplace_back(std::move(u), loss.device());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tensor autograd members and the requires_grad registry
// ---------------------------------------------------------------------------------------------

namespace {
struct Registry {
  std::recursive_mutex mu;
  absl::flat_hash_set<Tensor*> live;
};
Registry& Reg() {
  static Registry* r = new Registry();
  return *r;
}
void Register(Tensor* t) {
  std::lock_guard<std::recursive_mutex> l(Reg().mu);
  Reg().live.insert(t);
}
void Unregister(Tensor* t) {
  std::lock_guard<std::recursive_mutex> l(Reg().mu);
  Reg().live.erase(t);
}
}  // namespace

size_t LiveRequiresGradCount() {
  std::lock_guard<std::recursive_mutex> l(Reg().mu);
  return Reg().live.size();
}

Tensor::Tensor(const Tensor& o)
    : uop_(o.uop_), device_(o.device_), status_(o.status_), requires_grad_(o.requires_grad_), grad_(o.grad_) {
  if (requires_grad_) Register(this);
}

Tensor::Tensor(Tensor&& o) noexcept
    : uop_(std::move(o.uop_)),
      device_(std::move(o.device_)),
      status_(std::move(o.status_)),
      requires_grad_(o.requires_grad_),
      grad_(std::move(o.grad_)) {
  if (requires_grad_) Register(this);
}

Tensor& Tensor::operator=(const Tensor& o) {
  if (this != &o) {
    uop_ = o.uop_;
    device_ = o.device_;
    status_ = o.status_;
  }
  return *this;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    uop_ = std::move(o.uop_);
    device_ = std::move(o.device_);
    status_ = std::move(o.status_);
  }
  return *this;
}

Tensor::~Tensor() {
  if (requires_grad_) Unregister(this);
}

Tensor& Tensor::RequiresGrad(bool on) {
  if (on && ok() && !dtype().IsFloat()) {
    *this = FromStatus(absl::InvalidArgumentError(
        absl::StrCat("RequiresGrad: only float Tensors have gradient (dtype ", dtype().Name(), ")")));
    return *this;
  }
  if (on && !requires_grad_) Register(this);
  if (!on && requires_grad_) Unregister(this);
  requires_grad_ = on;
  return *this;
}

Tensor Tensor::Grad() const {
  if (!grad_) return FromStatus(absl::FailedPreconditionError("Grad: this tensor has no gradient (call Backward)"));
  return *grad_;
}

void Tensor::SetGrad(const Tensor& g) { grad_ = std::make_shared<const Tensor>(g); }

absl::StatusOr<std::vector<Tensor>> Tensor::Gradient(absl::Span<const Tensor> targets,
                                                     const std::optional<Tensor>& grad) const {
  return ::kiln::Gradient(*this, targets, grad);
}

absl::Status Tensor::Backward() {
  if (!ok()) return status_;
  if (numel() != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("Backward: the loss must have one element, not shape ", ShapeToString(shape())));
  std::lock_guard<std::recursive_mutex> l(Reg().mu);
  absl::flat_hash_set<const UOp*> in_graph;
  for (const UOp* u : Toposort(uop_)) in_graph.insert(u);
  std::vector<Tensor*> params;
  std::vector<UOpPtr> targets;
  absl::flat_hash_map<const UOp*, size_t> index;
  for (Tensor* t : Reg().live) {
    if (!t->ok() || !in_graph.contains(t->uop_.get()) || !t->dtype().IsFloat()) continue;
    params.push_back(t);
    auto [it, inserted] = index.try_emplace(t->uop_.get(), targets.size());
    if (inserted) targets.push_back(t->uop_);
  }
  if (params.empty()) return absl::OkStatus();
  Tensor seed = OnesLike();
  KILN_RETURN_IF_ERROR(seed.status());
  KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> g, ComputeGradient(uop_, seed.uop(), targets, device()));
  for (Tensor* t : params) {
    Tensor gi(g[index[t->uop_.get()]], device());
    if (t->grad_ && t->grad_->ok() && t->grad_->shape() == gi.shape()) gi = t->grad_->Add(gi);
    t->grad_ = std::make_shared<const Tensor>(gi);
  }
  return absl::OkStatus();
}

}  // namespace kiln
