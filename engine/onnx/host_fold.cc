// Host folding of shape arithmetic (runner.h FoldOnHost): when every input of a node is a host constant and the op
// is one that dynamic-shape exports use to compute shapes (Gather of a Shape, Concat, Unsqueeze, Add, ...), the
// result is computed here, so ops that need concrete values find them on the host and no kernel is built. Anything
// unexpected returns nullopt and the node runs as Tensor ops instead: folding never decides semantics on its own.
#include <algorithm>
#include <cmath>
#include <functional>

#include "engine/onnx/runner.h"

namespace kiln::onnx {
namespace {

constexpr int64_t kMaxFoldElements = 4096;

using Shp = std::vector<int64_t>;

Shp ToShp(const Shape& s) { return Shp(s.begin(), s.end()); }
int64_t Numel(const Shp& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::optional<Shp> Broadcast(const Shp& a, const Shp& b) {
  const size_t n = std::max(a.size(), b.size());
  Shp out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// Flat index into an array of shape `s` broadcast to `out` for the out position with multi-index `idx`.
int64_t BroadcastFlat(const Shp& s, const Shp& out, const std::vector<int64_t>& idx) {
  const size_t off = out.size() - s.size();
  int64_t flat = 0;
  for (size_t i = 0; i < s.size(); ++i) flat = flat * s[i] + (s[i] == 1 ? 0 : idx[off + i]);
  return flat;
}

void Unflatten(int64_t flat, const Shp& s, std::vector<int64_t>* idx) {
  idx->resize(s.size());
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    (*idx)[i] = s[i] == 0 ? 0 : flat % s[i];
    flat = s[i] == 0 ? 0 : flat / s[i];
  }
}

Value Make(HostArray a) { return Value::Constant(std::move(a)); }

// An elementwise n-ary op over broadcast inputs. `f` gets the element values as doubles for float outputs or as
// int64 for int/bool outputs (computed in the output dtype class).
std::optional<Value> Elementwise(const std::vector<HostArrayPtr>& in, DType out_dtype, bool float_math,
                                 const std::function<double(const std::vector<double>&)>& ff,
                                 const std::function<int64_t(const std::vector<int64_t>&)>& fi) {
  Shp out;
  for (const HostArrayPtr& a : in) {
    std::optional<Shp> b = Broadcast(out, ToShp(a->shape));
    if (!b) return std::nullopt;
    out = *b;
  }
  if (Numel(out) > kMaxFoldElements) return std::nullopt;
  HostArray r = HostArray::Zeros(out_dtype, Shape(out.begin(), out.end()));
  std::vector<int64_t> idx;
  std::vector<double> dv(in.size());
  std::vector<int64_t> iv(in.size());
  for (int64_t f = 0; f < Numel(out); ++f) {
    Unflatten(f, out, &idx);
    for (size_t k = 0; k < in.size(); ++k) {
      const int64_t src = BroadcastFlat(ToShp(in[k]->shape), out, idx);
      if (float_math) dv[k] = in[k]->GetDouble(src);
      else iv[k] = in[k]->GetInt(src);
    }
    if (float_math) r.SetDouble(f, ff(dv));
    else r.SetInt(f, fi(iv));
  }
  return Make(std::move(r));
}

bool IsIntLike(DType d) { return d.IsInt() || d.IsBool(); }

std::optional<std::vector<Value>> FoldBinary(const std::string& op, const HostArrayPtr& a, const HostArrayPtr& b) {
  const DType dt = a->dtype;
  const bool fl = dt.IsFloat();
  if (b->dtype != dt && !(op == "Pow")) return std::nullopt;
  auto one = [](std::optional<Value> v) -> std::optional<std::vector<Value>> {
    if (!v) return std::nullopt;
    return std::vector<Value>{*std::move(v)};
  };
  using DV = const std::vector<double>&;
  using IV = const std::vector<int64_t>&;
  if (op == "Add") return one(Elementwise({a, b}, dt, fl, [](DV v) { return v[0] + v[1]; }, [](IV v) { return static_cast<int64_t>(static_cast<uint64_t>(v[0]) + static_cast<uint64_t>(v[1])); }));
  if (op == "Sub") return one(Elementwise({a, b}, dt, fl, [](DV v) { return v[0] - v[1]; }, [](IV v) { return static_cast<int64_t>(static_cast<uint64_t>(v[0]) - static_cast<uint64_t>(v[1])); }));
  if (op == "Mul") return one(Elementwise({a, b}, dt, fl, [](DV v) { return v[0] * v[1]; }, [](IV v) { return static_cast<int64_t>(static_cast<uint64_t>(v[0]) * static_cast<uint64_t>(v[1])); }));
  if (op == "Div") {
    if (!fl) {
      for (int64_t i = 0; i < b->numel(); ++i) {
        if (b->GetInt(i) == 0 || b->GetInt(i) == -1) return std::nullopt;  // leave x/0 to the kernels' defined behaviour
      }
    }
    return one(Elementwise({a, b}, dt, fl, [](DV v) { return v[0] / v[1]; }, [](IV v) { return v[0] / v[1]; }));
  }
  const DType bl = dtypes::kBool;
  if (op == "Equal") return one(Elementwise({a, b}, bl, fl, [](DV v) { return v[0] == v[1] ? 1.0 : 0.0; }, [](IV v) { return int64_t{v[0] == v[1]}; }));
  if (op == "Less") return one(Elementwise({a, b}, bl, fl, [](DV v) { return v[0] < v[1] ? 1.0 : 0.0; }, [](IV v) { return int64_t{v[0] < v[1]}; }));
  if (op == "Greater") return one(Elementwise({a, b}, bl, fl, [](DV v) { return v[0] > v[1] ? 1.0 : 0.0; }, [](IV v) { return int64_t{v[0] > v[1]}; }));
  if (op == "LessOrEqual") return one(Elementwise({a, b}, bl, fl, [](DV v) { return v[0] <= v[1] ? 1.0 : 0.0; }, [](IV v) { return int64_t{v[0] <= v[1]}; }));
  if (op == "GreaterOrEqual") return one(Elementwise({a, b}, bl, fl, [](DV v) { return v[0] >= v[1] ? 1.0 : 0.0; }, [](IV v) { return int64_t{v[0] >= v[1]}; }));
  if ((op == "And" || op == "Or") && dt.IsBool()) {
    const bool is_and = op == "And";
    return one(Elementwise({a, b}, bl, false, nullptr,
                           [is_and](IV v) { return int64_t{is_and ? (v[0] && v[1]) : (v[0] || v[1])}; }));
  }
  return std::nullopt;
}

std::optional<std::vector<Value>> Fold(const Node& node, const std::vector<HostArrayPtr>& in) {
  const std::string& op = node.op;
  const int64_t opset = node.opset;
  auto attr_ints = [&](const char* name) -> std::optional<std::vector<int64_t>> {
    const Attribute* a = node.Find(name);
    if (a == nullptr) return std::nullopt;
    return a->type == Attribute::Type::kInt ? std::vector<int64_t>{a->i} : a->ints;
  };
  auto attr_int = [&](const char* name, int64_t def) {
    const Attribute* a = node.Find(name);
    return a == nullptr ? def : a->i;
  };
  auto norm = [](int64_t ax, int64_t r) -> std::optional<int64_t> {
    const int64_t a = ax < 0 ? ax + r : ax;
    if (a < 0 || a >= r) return std::nullopt;
    return a;
  };
  auto with_shape = [](const HostArrayPtr& a, const Shp& s) {
    HostArray r = *a;
    r.shape = Shape(s.begin(), s.end());
    return std::vector<Value>{Make(std::move(r))};
  };
  if (in.empty() || !in[0]) return std::nullopt;
  const HostArrayPtr& x = in[0];
  const Shp xs = ToShp(x->shape);

  if (op == "Identity") return std::vector<Value>{Value::Constant(x)};
  if (op == "Cast" || op == "CastLike") {
    DType to;
    if (op == "Cast") {
      absl::StatusOr<DType> d = OnnxToDType(static_cast<int32_t>(attr_int("to", 1)));
      if (!d.ok()) return std::nullopt;
      to = *d;
    } else {
      if (in.size() < 2 || !in[1]) return std::nullopt;
      to = in[1]->dtype;
    }
    HostArray r = HostArray::Zeros(to, x->shape);
    for (int64_t i = 0; i < x->numel(); ++i) {
      if (IsIntLike(x->dtype) && IsIntLike(to)) {
        r.SetInt(i, x->GetInt(i));
      } else if (x->dtype.IsFloat() && IsIntLike(to) && !to.IsBool()) {
        const double v = x->GetDouble(i);
        if (!std::isfinite(v)) return std::nullopt;
        r.SetInt(i, static_cast<int64_t>(std::trunc(v)));
      } else {
        r.SetDouble(i, x->GetDouble(i));
      }
    }
    return std::vector<Value>{Make(std::move(r))};
  }
  if (op == "Reshape" && opset >= 5 && in.size() >= 2 && in[1]) {
    std::vector<int64_t> shape = in[1]->Ints();
    const bool allowzero = attr_int("allowzero", 0) != 0;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !allowzero) {
        if (i >= xs.size()) return std::nullopt;
        shape[i] = xs[i];
      }
      if (shape[i] == -1) {
        if (infer >= 0) return std::nullopt;
        infer = static_cast<int64_t>(i);
      } else if (shape[i] < 0) {
        return std::nullopt;
      } else {
        known *= shape[i];
      }
    }
    if (infer >= 0) {
      if (known == 0 || x->numel() % known != 0) return std::nullopt;
      shape[infer] = x->numel() / known;
    }
    if (Numel(shape) != x->numel()) return std::nullopt;
    return with_shape(x, shape);
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes;
    if (opset < 13) {
      axes = attr_ints("axes").value_or(std::vector<int64_t>{});
    } else if (in.size() >= 2 && in[1]) {
      axes = in[1]->Ints();
    }
    if (op == "Unsqueeze") {
      const int64_t r = static_cast<int64_t>(xs.size() + axes.size());
      std::vector<bool> is_new(r, false);
      for (int64_t a : axes) {
        auto n = norm(a, r);
        if (!n || is_new[*n]) return std::nullopt;
        is_new[*n] = true;
      }
      Shp out;
      size_t next = 0;
      for (int64_t i = 0; i < r; ++i) out.push_back(is_new[i] ? 1 : xs[next++]);
      return with_shape(x, out);
    }
    std::vector<bool> drop(xs.size(), false);
    if (axes.empty()) {
      for (size_t i = 0; i < xs.size(); ++i) drop[i] = xs[i] == 1;
    }
    for (int64_t a : axes) {
      auto n = norm(a, static_cast<int64_t>(xs.size()));
      if (!n || xs[*n] != 1) return std::nullopt;
      drop[*n] = true;
    }
    Shp out;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!drop[i]) out.push_back(xs[i]);
    }
    return with_shape(x, out);
  }
  if (op == "Flatten") {
    auto a = norm(attr_int("axis", 1), static_cast<int64_t>(xs.size()) + 1);
    if (!a) return std::nullopt;
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < xs.size(); ++i) (static_cast<int64_t>(i) < *a ? outer : inner) *= xs[i];
    return with_shape(x, {outer, inner});
  }
  if (op == "Concat") {
    auto a = norm(attr_int("axis", 1), static_cast<int64_t>(xs.size()));
    if (!a) return std::nullopt;
    Shp out = xs;
    out[*a] = 0;
    for (const HostArrayPtr& p : in) {
      if (!p || p->dtype != x->dtype || p->shape.size() != xs.size()) return std::nullopt;
      for (size_t d = 0; d < xs.size(); ++d) {
        if (static_cast<int64_t>(d) != *a && p->shape[d] != xs[d]) return std::nullopt;
      }
      out[*a] += p->shape[*a];
    }
    if (Numel(out) > kMaxFoldElements) return std::nullopt;
    HostArray r = HostArray::Zeros(x->dtype, Shape(out.begin(), out.end()));
    const int64_t outer = Numel(Shp(out.begin(), out.begin() + *a));
    const int64_t inner = Numel(Shp(out.begin() + *a + 1, out.end()));
    const int64_t isz = x->dtype.ItemSize();
    int64_t dst = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (const HostArrayPtr& p : in) {
        const int64_t chunk = p->shape[*a] * inner * isz;
        std::copy_n(p->bytes.begin() + o * chunk, chunk, r.bytes.begin() + dst);
        dst += chunk;
      }
    }
    return std::vector<Value>{Make(std::move(r))};
  }
  if (op == "Gather" && in.size() >= 2 && in[1]) {
    auto a = norm(attr_int("axis", 0), static_cast<int64_t>(xs.size()));
    if (!a) return std::nullopt;
    const std::vector<int64_t> idx = in[1]->Ints();
    const int64_t n = xs[*a];
    Shp out(xs.begin(), xs.begin() + *a);
    for (int64_t d : in[1]->shape) out.push_back(d);
    out.insert(out.end(), xs.begin() + *a + 1, xs.end());
    if (Numel(out) > kMaxFoldElements) return std::nullopt;
    const int64_t outer = Numel(Shp(xs.begin(), xs.begin() + *a)), inner = Numel(Shp(xs.begin() + *a + 1, xs.end()));
    const int64_t isz = x->dtype.ItemSize();
    HostArray r = HostArray::Zeros(x->dtype, Shape(out.begin(), out.end()));
    int64_t dst = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i : idx) {
        const int64_t j = i < 0 ? i + n : i;
        if (j < 0 || j >= n) return std::nullopt;
        std::copy_n(x->bytes.begin() + (o * n + j) * inner * isz, inner * isz, r.bytes.begin() + dst);
        dst += inner * isz;
      }
    }
    return std::vector<Value>{Make(std::move(r))};
  }
  if (op == "Slice" && opset >= 10 && xs.size() == 1 && in.size() >= 3 && in[1] && in[2]) {
    const std::vector<int64_t> st = in[1]->Ints(), en = in[2]->Ints();
    if (st.size() != 1 || en.size() != 1) return std::nullopt;
    if (in.size() >= 4 && in[3] && (in[3]->numel() != 1 || (in[3]->GetInt(0) != 0 && in[3]->GetInt(0) != -1))) {
      return std::nullopt;
    }
    int64_t step = 1;
    if (in.size() >= 5 && in[4]) {
      if (in[4]->numel() != 1) return std::nullopt;
      step = in[4]->GetInt(0);
    }
    if (step == 0) return std::nullopt;
    const int64_t n = xs[0];
    auto clampv = [&](int64_t v, bool positive) {
      if (v < 0) v += n;
      return positive ? std::clamp<int64_t>(v, 0, n) : std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t s = clampv(st[0], step > 0), e = clampv(en[0], step > 0);
    std::vector<int64_t> picks;
    for (int64_t i = s; step > 0 ? i < e : i > e; i += step) picks.push_back(i);
    HostArray r = HostArray::Zeros(x->dtype, {static_cast<int64_t>(picks.size())});
    const int64_t isz = x->dtype.ItemSize();
    for (size_t k = 0; k < picks.size(); ++k) {
      std::copy_n(x->bytes.begin() + picks[k] * isz, isz, r.bytes.begin() + static_cast<int64_t>(k) * isz);
    }
    return std::vector<Value>{Make(std::move(r))};
  }
  if (op == "Not" && x->dtype.IsBool()) {
    HostArray r = *x;
    for (int64_t i = 0; i < r.numel(); ++i) r.SetInt(i, x->GetInt(i) == 0);
    return std::vector<Value>{Make(std::move(r))};
  }
  if (op == "Neg" && (x->dtype.IsInt() || x->dtype.IsFloat())) {
    HostArray r = *x;
    for (int64_t i = 0; i < r.numel(); ++i) {
      if (x->dtype.IsFloat()) r.SetDouble(i, -x->GetDouble(i));
      else r.SetInt(i, static_cast<int64_t>(0 - static_cast<uint64_t>(x->GetInt(i))));
    }
    return std::vector<Value>{Make(std::move(r))};
  }
  if ((op == "Max" || op == "Min") && IsIntLike(x->dtype)) {
    for (const HostArrayPtr& p : in) {
      if (!p || p->dtype != x->dtype) return std::nullopt;
    }
    const bool mx = op == "Max";
    std::optional<Value> v = Elementwise(in, x->dtype, false, nullptr, [mx](const std::vector<int64_t>& v) {
      return mx ? *std::max_element(v.begin(), v.end()) : *std::min_element(v.begin(), v.end());
    });
    if (!v) return std::nullopt;
    return std::vector<Value>{*std::move(v)};
  }
  if (op == "Where" && in.size() == 3 && in[1] && in[2] && x->dtype.IsBool() && in[1]->dtype == in[2]->dtype) {
    const DType dt = in[1]->dtype;
    const bool fl = dt.IsFloat();
    std::optional<Value> v = Elementwise(
        in, dt, fl, [](const std::vector<double>& v) { return v[0] != 0 ? v[1] : v[2]; },
        [](const std::vector<int64_t>& v) { return v[0] != 0 ? v[1] : v[2]; });
    if (!v) return std::nullopt;
    return std::vector<Value>{*std::move(v)};
  }
  if ((op == "ReduceProd" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin") && xs.size() == 1 &&
      IsIntLike(x->dtype) && x->numel() > 0) {
    // 1-D integer reductions over the only axis (shape products)
    if (op == "ReduceSum" && opset >= 13 && in.size() >= 2 && in[1] && in[1]->numel() > 0) {
      if (in[1]->numel() != 1 || (in[1]->GetInt(0) != 0 && in[1]->GetInt(0) != -1)) return std::nullopt;
    }
    if (opset >= 18 && op != "ReduceSum" && in.size() >= 2 && in[1] && in[1]->numel() > 0) {
      if (in[1]->numel() != 1 || (in[1]->GetInt(0) != 0 && in[1]->GetInt(0) != -1)) return std::nullopt;
    }
    int64_t acc = x->GetInt(0);
    for (int64_t i = 1; i < x->numel(); ++i) {
      const int64_t v = x->GetInt(i);
      if (op == "ReduceProd") acc = static_cast<int64_t>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
      else if (op == "ReduceSum") acc = static_cast<int64_t>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
      else if (op == "ReduceMax") acc = std::max(acc, v);
      else acc = std::min(acc, v);
    }
    const bool keep = attr_int("keepdims", 1) != 0;
    return std::vector<Value>{Make(HostArray::FromInts(x->dtype, keep ? Shape{1} : Shape{}, {acc}))};
  }
  if (in.size() == 2 && in[1] && in[0]) return FoldBinary(op, in[0], in[1]);
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<Value>> FoldOnHost(const Node& node, const std::vector<const Value*>& inputs) {
  if (!node.domain.empty()) return std::nullopt;
  static const char* kOps[] = {"Identity", "Cast",    "CastLike", "Reshape",     "Unsqueeze",      "Squeeze",
                               "Flatten",  "Concat",  "Gather",   "Slice",       "Not",            "Neg",
                               "Max",      "Min",     "Where",    "ReduceProd",  "ReduceSum",      "ReduceMax",
                               "ReduceMin", "Add",    "Sub",      "Mul",         "Div",            "Equal",
                               "Less",     "Greater", "LessOrEqual", "GreaterOrEqual", "And",      "Or"};
  if (std::find(std::begin(kOps), std::end(kOps), node.op) == std::end(kOps)) return std::nullopt;
  std::vector<HostArrayPtr> in;
  for (const Value* v : inputs) {
    if (v == nullptr || v->is_none()) {
      in.push_back(nullptr);
      continue;
    }
    if (!v->is_tensor() || !v->host || !v->host_constant) return std::nullopt;
    if (v->host->numel() > kMaxFoldElements) return std::nullopt;
    in.push_back(v->host);
  }
  return Fold(node, in);
}

}  // namespace kiln::onnx
