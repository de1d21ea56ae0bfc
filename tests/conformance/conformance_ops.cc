#include "tests/conformance/conformance_ops.h"

#include <optional>
#include <utility>

namespace kiln::conformance {
namespace {

constexpr int64_t kNone = 999999999;  // "None" in slice attributes (gen_cases.NONE)

using Pairs = std::vector<std::pair<int64_t, int64_t>>;

Pairs ToPairs(const IntVec& a, size_t n) {
  Pairs p;
  for (size_t i = 0; i + 1 < n; i += 2) p.emplace_back(a[i], a[i + 1]);
  return p;
}

// Length-prefixed lists: [n0, v..., n1, v..., ...] starting at `pos`.
IntVec NextList(const IntVec& a, size_t* pos) {
  int64_t n = a[(*pos)++];
  IntVec v(a.begin() + *pos, a.begin() + *pos + n);
  *pos += n;
  return v;
}

// Reductions: attr [keepdim, axes...]; no axes = all axes.
Axes ReduceAxes(const IntVec& a) { return a.size() <= 1 ? Axes::All() : Axes(IntVec(a.begin() + 1, a.end())); }
bool Keep(const IntVec& a) { return !a.empty() && a[0] != 0; }

Scalar ScalarFor(DType dt, int64_t i, double f) {
  if (dt.IsFloat()) return Scalar(f);
  if (dt.IsBool()) return Scalar(i != 0);
  return Scalar(i);
}

using Bin = Tensor (Tensor::*)(const Operand&) const;
using Un = Tensor (Tensor::*)() const;

}  // namespace

const absl::flat_hash_map<std::string, OpFn>& Ops() {
  static const auto* ops = [] {
    auto* m = new absl::flat_hash_map<std::string, OpFn>();
    const std::vector<std::pair<const char*, Un>> unary = {
        {"neg", &Tensor::Neg},         {"reciprocal", &Tensor::Reciprocal},
        {"exp", &Tensor::Exp},         {"exp2", &Tensor::Exp2},
        {"log", &Tensor::Log},         {"log2", &Tensor::Log2},
        {"sqrt", &Tensor::Sqrt},       {"rsqrt", &Tensor::Rsqrt},
        {"sin", &Tensor::Sin},         {"cos", &Tensor::Cos},
        {"tan", &Tensor::Tan},         {"abs", &Tensor::Abs},
        {"sign", &Tensor::Sign},       {"square", &Tensor::Square},
        {"relu", &Tensor::Relu},       {"sigmoid", &Tensor::Sigmoid},
        {"tanh", &Tensor::Tanh},       {"gelu", &Tensor::Gelu},
        {"silu", &Tensor::Silu},       {"trunc", &Tensor::Trunc},
        {"floor", &Tensor::Floor},     {"ceil", &Tensor::Ceil},
        {"round", &Tensor::Round},     {"logical_not", &Tensor::LogicalNot},
        {"bitwise_not", &Tensor::BitwiseNot}, {"contiguous", &Tensor::Contiguous},
        {"detach", &Tensor::Detach},
    };
    for (auto [name, fn] : unary) (*m)[name] = [fn](const OpArgs& o) { return (o.x[0].*fn)(); };
    const std::vector<std::pair<const char*, Bin>> binary = {
        {"add", &Tensor::Add},
        {"sub", &Tensor::Sub},
        {"mul", &Tensor::Mul},
        {"div", &Tensor::Div},
        {"floordiv", &Tensor::FloorDiv},
        {"mod", &Tensor::Mod},
        {"pow", &Tensor::Pow},
        {"maximum", &Tensor::Maximum},
        {"minimum", &Tensor::Minimum},
        {"lt", &Tensor::Lt},
        {"le", &Tensor::Le},
        {"gt", &Tensor::Gt},
        {"ge", &Tensor::Ge},
        {"eq", &Tensor::Eq},
        {"ne", &Tensor::Ne},
        {"logical_and", &Tensor::LogicalAnd},
        {"logical_or", &Tensor::LogicalOr},
        {"bitwise_and", &Tensor::BitwiseAnd},
        {"bitwise_or", &Tensor::BitwiseOr},
        {"bitwise_xor", &Tensor::BitwiseXor},
    };
    for (auto [name, fn] : binary) {
      std::string n(name);
      (*m)[n] = [fn](const OpArgs& o) { return (o.x[0].*fn)(o.x[1]); };
      // tensor op python-int / python-float scalar (weak)
      (*m)[n + "_si"] = [fn](const OpArgs& o) { return (o.x[0].*fn)(Scalar(o.a[0])); };
      (*m)[n + "_sf"] = [fn](const OpArgs& o) { return (o.x[0].*fn)(Scalar(o.f[0])); };
    }
    auto& t = *m;
    // scalar on the left
    t["rsub_si"] = [](const OpArgs& o) { return o.x[0].RSub(o.a[0]); };
    t["rsub_sf"] = [](const OpArgs& o) { return o.x[0].RSub(o.f[0]); };
    t["rdiv_si"] = [](const OpArgs& o) { return o.x[0].RDiv(o.a[0]); };
    t["rdiv_sf"] = [](const OpArgs& o) { return o.x[0].RDiv(o.f[0]); };
    t["rpow_si"] = [](const OpArgs& o) { return o.x[0].RPow(o.a[0]); };
    t["rpow_sf"] = [](const OpArgs& o) { return o.x[0].RPow(o.f[0]); };
    t["lshift"] = [](const OpArgs& o) { return o.x[0].Lshift(o.a[0]); };
    t["rshift"] = [](const OpArgs& o) { return o.x[0].Rshift(o.a[0]); };
    t["clip"] = [](const OpArgs& o) {
      DType dt = o.x[0].dtype();
      return o.x[0].Clip(ScalarFor(dt, o.a[0], o.f[0]), ScalarFor(dt, o.a[1], o.f[1]));
    };
    t["where"] = [](const OpArgs& o) { return o.x[0].Where(o.x[1], o.x[2]); };
    t["where_sf"] = [](const OpArgs& o) { return o.x[0].Where(o.x[1], Scalar(o.f[0])); };
    t["where_ss"] = [](const OpArgs& o) { return o.x[0].Where(Scalar(o.f[0]), Scalar(o.f[1])); };
    // dtype
    t["cast"] = [](const OpArgs& o) { return o.x[0].Cast(o.out_dtype); };
    t["bitcast"] = [](const OpArgs& o) { return o.x[0].Bitcast(o.out_dtype); };
    // creation
    t["zeros"] = [](const OpArgs& o) { return Tensor::Zeros(o.out_shape, o.out_dtype, o.device); };
    t["ones"] = [](const OpArgs& o) { return Tensor::Ones(o.out_shape, o.out_dtype, o.device); };
    t["full"] = [](const OpArgs& o) {
      return Tensor::Full(o.out_shape, ScalarFor(o.out_dtype, o.a[0], o.f[0]), o.out_dtype, o.device);
    };
    t["full_si"] = [](const OpArgs& o) { return Tensor::Full(o.out_shape, o.a[0], std::nullopt, o.device); };
    t["full_sf"] = [](const OpArgs& o) { return Tensor::Full(o.out_shape, o.f[0], std::nullopt, o.device); };
    t["arange_i"] = [](const OpArgs& o) {
      return Tensor::Arange(o.a[0], o.a[1], o.a[2], std::nullopt, o.device);
    };
    // Arange(stop) has no device argument: it always builds on CPU
    t["arange_stop"] = [](const OpArgs& o) { return Tensor::Arange(o.a[0]); };
    t["arange_f"] = [](const OpArgs& o) {
      return Tensor::Arange(o.f[0], o.f[1], o.f[2], std::nullopt, o.device);
    };
    t["arange_d"] = [](const OpArgs& o) {
      return Tensor::Arange(o.a[0], o.a[1], o.a[2], o.out_dtype, o.device);
    };
    t["eye"] = [](const OpArgs& o) { return Tensor::Eye(o.a[0], o.a[1], o.out_dtype, o.device); };
    t["full_like"] = [](const OpArgs& o) {
      return o.x[0].FullLike(ScalarFor(o.out_dtype, o.a[0], o.f[0]), o.out_dtype);
    };
    t["zeros_like"] = [](const OpArgs& o) { return o.x[0].ZerosLike(); };
    t["ones_like"] = [](const OpArgs& o) { return o.x[0].OnesLike(o.out_dtype); };
    t["empty_assign"] = [](const OpArgs& o) {
      Tensor e = Tensor::Empty(o.out_shape, o.out_dtype, o.device);
      e.Assign(o.x[0]);
      return e;
    };
    t["assign"] = [](const OpArgs& o) {
      Tensor d = o.x[0];
      d.Assign(o.x[1]);
      return d;
    };
    // reductions: attr [keepdim, axes...]
    t["sum"] = [](const OpArgs& o) { return o.x[0].Sum(ReduceAxes(o.a), Keep(o.a)); };
    t["prod"] = [](const OpArgs& o) { return o.x[0].Prod(ReduceAxes(o.a), Keep(o.a)); };
    t["max"] = [](const OpArgs& o) { return o.x[0].Max(ReduceAxes(o.a), Keep(o.a)); };
    t["min"] = [](const OpArgs& o) { return o.x[0].Min(ReduceAxes(o.a), Keep(o.a)); };
    t["mean"] = [](const OpArgs& o) { return o.x[0].Mean(ReduceAxes(o.a), Keep(o.a)); };
    t["var"] = [](const OpArgs& o) { return o.x[0].Var(ReduceAxes(o.a), Keep(o.a)); };
    t["std"] = [](const OpArgs& o) { return o.x[0].Std(ReduceAxes(o.a), Keep(o.a)); };
    t["var0"] = [](const OpArgs& o) { return o.x[0].Var(ReduceAxes(o.a), Keep(o.a), 0.0); };
    t["std0"] = [](const OpArgs& o) { return o.x[0].Std(ReduceAxes(o.a), Keep(o.a), 0.0); };
    t["any"] = [](const OpArgs& o) { return o.x[0].Any(ReduceAxes(o.a), Keep(o.a)); };
    t["all"] = [](const OpArgs& o) { return o.x[0].All(ReduceAxes(o.a), Keep(o.a)); };
    // argmax/argmin: attr [] (flattened) or [keepdim, axis]
    t["argmax"] = [](const OpArgs& o) {
      return o.a.empty() ? o.x[0].Argmax() : o.x[0].Argmax(o.a[1], Keep(o.a));
    };
    t["argmin"] = [](const OpArgs& o) {
      return o.a.empty() ? o.x[0].Argmin() : o.x[0].Argmin(o.a[1], Keep(o.a));
    };
    // movement
    t["reshape"] = [](const OpArgs& o) { return o.x[0].Reshape(o.a); };
    t["permute"] = [](const OpArgs& o) { return o.x[0].Permute(o.a); };
    t["transpose"] = [](const OpArgs& o) { return o.x[0].Transpose(o.a[0], o.a[1]); };
    t["expand"] = [](const OpArgs& o) { return o.x[0].Expand(o.a); };
    t["broadcast_to"] = [](const OpArgs& o) { return o.x[0].BroadcastTo(o.a); };
    t["pad"] = [](const OpArgs& o) { return o.x[0].Pad(ToPairs(o.a, o.a.size())); };
    t["pad_v"] = [](const OpArgs& o) {  // pairs..., value
      return o.x[0].Pad(ToPairs(o.a, o.a.size() - 1), ScalarFor(o.x[0].dtype(), o.a.back(), o.f.back()));
    };
    t["shrink"] = [](const OpArgs& o) { return o.x[0].Shrink(ToPairs(o.a, o.a.size())); };
    t["flip"] = [](const OpArgs& o) { return o.x[0].Flip(Axes(o.a)); };
    t["slice"] = [](const OpArgs& o) {  // (kind 0 index / 1 range / 2 newaxis, start, stop, step)*
      std::vector<SliceArg> args;
      auto opt = [](int64_t v) { return v == kNone ? std::nullopt : std::optional<int64_t>(v); };
      for (size_t i = 0; i + 3 < o.a.size(); i += 4) {
        if (o.a[i] == 0) args.push_back(SliceArg::Index(o.a[i + 1]));
        else if (o.a[i] == 1) args.push_back(SliceArg::Range(opt(o.a[i + 1]), opt(o.a[i + 2]), o.a[i + 3]));
        else args.push_back(SliceArg::NewAxis());
      }
      return o.x[0].Slice(args);
    };
    t["squeeze"] = [](const OpArgs& o) {
      return o.a.empty() ? o.x[0].Squeeze() : o.x[0].Squeeze(o.a[0]);
    };
    t["unsqueeze"] = [](const OpArgs& o) { return o.x[0].Unsqueeze(o.a[0]); };
    t["flatten"] = [](const OpArgs& o) { return o.x[0].Flatten(o.a[0], o.a[1]); };
    t["cat"] = [](const OpArgs& o) { return Tensor::Cat(o.x, o.a[0]); };
    t["stack"] = [](const OpArgs& o) { return Tensor::Stack(o.x, o.a[0]); };
    t["repeat"] = [](const OpArgs& o) { return o.x[0].Repeat(o.a); };
    t["gather"] = [](const OpArgs& o) { return o.x[0].Gather(o.a[0], o.x[1]); };
    // linear algebra and nn
    t["matmul"] = [](const OpArgs& o) { return o.x[0].Matmul(o.x[1]); };
    t["conv"] = [](const OpArgs& o) {  // [groups, n, stride..., n, padding..., n, dilation...]
      ConvOptions c;
      size_t pos = 1;
      c.groups = o.a[0];
      c.stride = NextList(o.a, &pos);
      c.padding = NextList(o.a, &pos);
      c.dilation = NextList(o.a, &pos);
      std::optional<Tensor> bias;
      if (o.x.size() > 2) bias = o.x[2];
      return o.x[0].Conv2d(o.x[1], bias, c);
    };
    auto pool = [](bool max) {
      return [max](const OpArgs& o) {  // [n, kernel..., n, stride..., n, padding..., n, dilation..., cip]
        PoolOptions p;
        size_t pos = 0;
        IntVec k = NextList(o.a, &pos);
        p.stride = NextList(o.a, &pos);
        p.padding = NextList(o.a, &pos);
        p.dilation = NextList(o.a, &pos);
        p.count_include_pad = o.a[pos] != 0;
        return max ? o.x[0].MaxPool2d(k, p) : o.x[0].AvgPool2d(k, p);
      };
    };
    t["maxpool"] = pool(true);
    t["avgpool"] = pool(false);
    t["softmax"] = [](const OpArgs& o) { return o.x[0].Softmax(o.a[0]); };
    t["log_softmax"] = [](const OpArgs& o) { return o.x[0].LogSoftmax(o.a[0]); };
    t["layernorm"] = [](const OpArgs& o) {
      std::optional<Tensor> w, b;
      if (o.x.size() > 1) w = o.x[1];
      if (o.x.size() > 2) b = o.x[2];
      return o.x[0].LayerNorm(o.a[0], w, b);
    };
    t["batchnorm"] = [](const OpArgs& o) { return o.x[0].BatchNorm(o.x[1], o.x[2], o.x[3], o.x[4], o.a[0]); };
    t["sce"] = [](const OpArgs& o) {  // [ignore_index, label_smoothing, reduction 0 mean / 1 sum / 2 none]
      static const char* kRed[] = {"mean", "sum", "none"};
      return o.x[0].SparseCategoricalCrossentropy(o.x[1], o.a[0], o.f[1], kRed[o.a[2]]);
    };
    // fused chains (cases_nn.fused)
    t["fused_permute_sum"] = [](const OpArgs& o) { return o.x[0].Permute({2, 0, 1}).Sum(1); };
    t["fused_pad_flip_max"] = [](const OpArgs& o) { return o.x[0].Pad({{0, 0}, {1, 2}, {0, 0}}).Flip(1).Max(1); };
    t["fused_bcast_mul_sum"] = [](const OpArgs& o) { return o.x[0].Mul(o.x[1]).Sum(-1); };
    t["fused_exp_sum_log"] = [](const OpArgs& o) { return o.x[0].Exp().Sum(0).Log(); };
    t["fused_double_reduce"] = [](const OpArgs& o) { return o.x[0].Sub(o.x[0].Max(1, true)).Sum(2); };
    t["one_hot"] = [](const OpArgs& o) { return o.x[0].OneHot(o.a[0]); };
    return m;
  }();
  return *ops;
}

}  // namespace kiln::conformance
