// diff_eval: the kiln side of the differential test (tests/differential/README.md). Reads cases from stdin, builds
// each case's expression with engine/tensor on one device, realizes it and prints the result; numpy (diffcheck.py)
// computes the reference and compares. The driver knows nothing about expected values.
//
//   diff_eval --device CPU < cases.txt > results.txt
//   diff_eval --device CPU --jit < cases.txt > results.txt
//
// --jit runs each expression as a TinyJit function of its inputs, called four times: with two decoy input sets (the
// case's values rotated and reversed: same shapes and dtypes, other contents), which run it eagerly (cnt 0) and
// capture it (cnt 1), then replays with the first decoys and with the case's own inputs, whose result is printed. A
// capture that baked an input's values in, or a replay that read a stale buffer, prints the decoys' answer. An
// expression that launches no kernel (a view of an input) has nothing to capture and runs without the JIT.
//
// Input, per case:
//   case NAME
//   input DTYPE NDIM D1 ... Dn        (any number; referenced as (in 0), (in 1), ...)
//   V1 V2 ...                         (one line: the row-major values; bools 0/1)
//   expr SEXPR
//   end
// Output, per case: `begin NAME` (flushed before the case runs, so a crash names its case), then either
//   result NAME DTYPE NDIM D1 ... Dn
//   V1 V2 ...                          (floats with enough digits to round-trip)
// or `error NAME MESSAGE` (one line) when kiln returns an error Status.
//
// Expressions are s-expressions over the Tensor API; ops and their integer arguments are listed in kOps below.
// `n` stands for an absent slice bound.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/register_all.h"
#include "engine/base/status.h"
#include "engine/jit/tiny_jit.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"

namespace kiln::differential {
namespace {

// ---- s-expressions ----

struct Node {
  std::string atom;                          // leaf when children is empty and atom is set
  std::vector<std::unique_ptr<Node>> items;  // list: items[0] is the op name
  bool list = false;
};

absl::StatusOr<std::unique_ptr<Node>> Parse(const std::string& s, size_t& pos) {
  while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  if (pos >= s.size()) return absl::InvalidArgumentError("unexpected end of expression");
  auto n = std::make_unique<Node>();
  if (s[pos] == '(') {
    n->list = true;
    ++pos;
    for (;;) {
      while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
      if (pos >= s.size()) return absl::InvalidArgumentError("unclosed '('");
      if (s[pos] == ')') {
        ++pos;
        break;
      }
      auto c = Parse(s, pos);
      if (!c.ok()) return c.status();
      n->items.push_back(*std::move(c));
    }
    if (n->items.empty() || n->items[0]->list) return absl::InvalidArgumentError("a list must start with an op name");
    return n;
  }
  if (s[pos] == ')') return absl::InvalidArgumentError("unexpected ')'");
  size_t start = pos;
  while (pos < s.size() && !std::isspace(static_cast<unsigned char>(s[pos])) && s[pos] != '(' && s[pos] != ')') ++pos;
  n->atom = s.substr(start, pos - start);
  return n;
}

// ---- evaluation ----

struct Ctx {
  std::vector<Tensor> inputs;
  std::string device;
};

struct Args {
  std::vector<Tensor> t;            // tensor operands, in order
  std::vector<std::string> atoms;   // atom operands, in order (ints, `n`, dtype names, float constants)
  int64_t Int(size_t i) const { return std::stoll(atoms.at(i)); }
  std::optional<int64_t> OptInt(size_t i) const {
    if (atoms.at(i) == "n") return std::nullopt;
    return Int(i);
  }
  IntVec Ints(size_t from) const {
    IntVec v;
    for (size_t i = from; i < atoms.size(); ++i) v.push_back(Int(i));
    return v;
  }
};

using OpFn = std::function<Tensor(const Args&)>;

DType DTypeArg(const std::string& name) {
  std::optional<DType> d = ParseDType(name);
  return d ? *d : dtypes::kVoid;
}

std::vector<std::pair<int64_t, int64_t>> Pairs(const IntVec& v) {
  std::vector<std::pair<int64_t, int64_t>> p;
  for (size_t i = 0; i + 1 < v.size(); i += 2) p.emplace_back(v[i], v[i + 1]);
  return p;
}

// (op x KEEPDIM AX...): a reduction over AX.
template <typename F>
OpFn Reduction(F f) {
  return [f](const Args& a) { return f(a.t.at(0), Axes(a.Ints(1)), a.Int(0) != 0); };
}

// Stride and padding of (maxpool|avgpool x KH KW SH SW PT PB PL PR ...).
PoolOptions PoolArgs(const Args& a) {
  PoolOptions o;
  o.stride = {a.Int(2), a.Int(3)};
  o.padding = {a.Int(4), a.Int(5), a.Int(6), a.Int(7)};
  return o;
}

const absl::flat_hash_map<std::string, OpFn>& Ops() {
  static const auto* ops = new absl::flat_hash_map<std::string, OpFn>{
      // unary
      {"neg", [](const Args& a) { return a.t.at(0).Neg(); }},
      {"exp", [](const Args& a) { return a.t.at(0).Exp(); }},
      {"log", [](const Args& a) { return a.t.at(0).Log(); }},
      {"sqrt", [](const Args& a) { return a.t.at(0).Sqrt(); }},
      {"sin", [](const Args& a) { return a.t.at(0).Sin(); }},
      {"cos", [](const Args& a) { return a.t.at(0).Cos(); }},
      {"abs", [](const Args& a) { return a.t.at(0).Abs(); }},
      {"relu", [](const Args& a) { return a.t.at(0).Relu(); }},
      {"sigmoid", [](const Args& a) { return a.t.at(0).Sigmoid(); }},
      {"tanh", [](const Args& a) { return a.t.at(0).Tanh(); }},
      {"square", [](const Args& a) { return a.t.at(0).Square(); }},
      {"recip", [](const Args& a) { return a.t.at(0).Reciprocal(); }},
      {"floor", [](const Args& a) { return a.t.at(0).Floor(); }},
      {"ceil", [](const Args& a) { return a.t.at(0).Ceil(); }},
      {"trunc", [](const Args& a) { return a.t.at(0).Trunc(); }},
      {"round", [](const Args& a) { return a.t.at(0).Round(); }},
      {"lnot", [](const Args& a) { return a.t.at(0).LogicalNot(); }},
      {"bnot", [](const Args& a) { return a.t.at(0).BitwiseNot(); }},
      {"contig", [](const Args& a) { return a.t.at(0).Contiguous(); }},
      // binary (numpy broadcasting)
      {"add", [](const Args& a) { return a.t.at(0).Add(a.t.at(1)); }},
      {"sub", [](const Args& a) { return a.t.at(0).Sub(a.t.at(1)); }},
      {"mul", [](const Args& a) { return a.t.at(0).Mul(a.t.at(1)); }},
      {"div", [](const Args& a) { return a.t.at(0).Div(a.t.at(1)); }},
      {"idiv", [](const Args& a) { return a.t.at(0).FloorDiv(a.t.at(1)); }},
      {"mod", [](const Args& a) { return a.t.at(0).Mod(a.t.at(1)); }},
      {"max2", [](const Args& a) { return a.t.at(0).Maximum(a.t.at(1)); }},
      {"min2", [](const Args& a) { return a.t.at(0).Minimum(a.t.at(1)); }},
      {"lt", [](const Args& a) { return a.t.at(0).Lt(a.t.at(1)); }},
      {"le", [](const Args& a) { return a.t.at(0).Le(a.t.at(1)); }},
      {"gt", [](const Args& a) { return a.t.at(0).Gt(a.t.at(1)); }},
      {"ge", [](const Args& a) { return a.t.at(0).Ge(a.t.at(1)); }},
      {"eq", [](const Args& a) { return a.t.at(0).Eq(a.t.at(1)); }},
      {"ne", [](const Args& a) { return a.t.at(0).Ne(a.t.at(1)); }},
      {"band", [](const Args& a) { return a.t.at(0).BitwiseAnd(a.t.at(1)); }},
      {"bor", [](const Args& a) { return a.t.at(0).BitwiseOr(a.t.at(1)); }},
      {"bxor", [](const Args& a) { return a.t.at(0).BitwiseXor(a.t.at(1)); }},
      {"land", [](const Args& a) { return a.t.at(0).LogicalAnd(a.t.at(1)); }},
      {"lor", [](const Args& a) { return a.t.at(0).LogicalOr(a.t.at(1)); }},
      {"where", [](const Args& a) { return a.t.at(0).Where(a.t.at(1), a.t.at(2)); }},
      {"matmul", [](const Args& a) { return a.t.at(0).Matmul(a.t.at(1)); }},
      // (conv x w [bias] SH SW PT PB PL PR DH DW GROUPS): Conv2d, x (N, Ci, H, W), w (Co, Ci/GROUPS, KH, KW), padding
      // before/after per spatial dim. On the CPU a stride-1 3x3 or 5x5 conv with >= 16 channels takes a Winograd form
      // and its pointwise consumers channel lanes (winograd.cc, nn_ops.cc), so the conv blocks of gen.py reach those.
      {"conv",
       [](const Args& a) {
         ConvOptions o;
         o.stride = {a.Int(0), a.Int(1)};
         o.padding = {a.Int(2), a.Int(3), a.Int(4), a.Int(5)};
         o.dilation = {a.Int(6), a.Int(7)};
         o.groups = a.Int(8);
         std::optional<Tensor> bias;
         if (a.t.size() > 2) bias = a.t.at(2);
         return a.t.at(0).Conv2d(a.t.at(1), bias, o);
       }},
      // (maxpool x KH KW SH SW PT PB PL PR DH DW), (avgpool x KH KW SH SW PT PB PL PR COUNT_INCLUDE_PAD)
      {"maxpool",
       [](const Args& a) {
         PoolOptions o = PoolArgs(a);
         o.dilation = {a.Int(8), a.Int(9)};
         return a.t.at(0).MaxPool2d({a.Int(0), a.Int(1)}, o);
       }},
      {"avgpool",
       [](const Args& a) {
         PoolOptions o = PoolArgs(a);
         o.count_include_pad = a.Int(8) != 0;
         return a.t.at(0).AvgPool2d({a.Int(0), a.Int(1)}, o);
       }},
      // (multi A B ...): A, B, ... realized together in one schedule (shared and sibling reduces become one kernel
      // with several outputs), then their elements flattened one after the other. Same dtype.
      {"multi",
       [](const Args& a) {
         std::vector<Tensor> ts = a.t;
         std::vector<Tensor*> ptrs;
         for (Tensor& t : ts) ptrs.push_back(&t);
         if (absl::Status st = Tensor::Realize(ptrs); !st.ok()) return Tensor::FromStatus(st);
         std::vector<Tensor> flat;
         for (const Tensor& t : ts) flat.push_back(t.Reshape({t.numel()}));
         return Tensor::Cat(flat, 0);
       }},
      // (cast DTYPE x)
      {"cast", [](const Args& a) { return a.t.at(0).Cast(DTypeArg(a.atoms.at(0))); }},
      // reductions: (op x KEEPDIM AX...)
      {"sum", Reduction([](const Tensor& x, const Axes& ax, bool k) { return x.Sum(ax, k); })},
      {"rmax", Reduction([](const Tensor& x, const Axes& ax, bool k) { return x.Max(ax, k); })},
      {"rmin", Reduction([](const Tensor& x, const Axes& ax, bool k) { return x.Min(ax, k); })},
      {"mean", Reduction([](const Tensor& x, const Axes& ax, bool k) { return x.Mean(ax, k); })},
      {"var", Reduction([](const Tensor& x, const Axes& ax, bool k) { return x.Var(ax, k); })},
      {"any", Reduction([](const Tensor& x, const Axes& ax, bool k) { return x.Any(ax, k); })},
      {"all", Reduction([](const Tensor& x, const Axes& ax, bool k) { return x.All(ax, k); })},
      // (argmax x AXIS KEEPDIM)
      {"argmax", [](const Args& a) { return a.t.at(0).Argmax(a.Int(0), a.Int(1) != 0); }},
      {"argmin", [](const Args& a) { return a.t.at(0).Argmin(a.Int(0), a.Int(1) != 0); }},
      // movement
      {"reshape", [](const Args& a) { return a.t.at(0).Reshape(a.Ints(0)); }},
      {"permute", [](const Args& a) { return a.t.at(0).Permute(a.Ints(0)); }},
      {"expand", [](const Args& a) { return a.t.at(0).Expand(a.Ints(0)); }},
      {"pad", [](const Args& a) { return a.t.at(0).Pad(Pairs(a.Ints(0))); }},     // (pad x B0 A0 B1 A1 ...)
      {"shrink", [](const Args& a) { return a.t.at(0).Shrink(Pairs(a.Ints(0))); }},  // (shrink x S0 E0 ...)
      {"flip", [](const Args& a) { return a.t.at(0).Flip(Axes(a.Ints(0))); }},
      // (slice x START STOP STEP ...) per dim, python semantics, `n` = absent
      {"slice",
       [](const Args& a) {
         std::vector<SliceArg> s;
         for (size_t i = 0; i + 2 < a.atoms.size(); i += 3)
           s.push_back(SliceArg::Range(a.OptInt(i), a.OptInt(i + 1), a.Int(i + 2)));
         return a.t.at(0).Slice(s);
       }},
  };
  return *ops;
}

absl::StatusOr<Tensor> Eval(const Node& n, const Ctx& ctx) {
  if (!n.list) return absl::InvalidArgumentError(absl::StrCat("a bare atom where a tensor is needed: ", n.atom));
  const std::string& op = n.items[0]->atom;
  if (op == "in") {
    if (n.items.size() != 2) return absl::InvalidArgumentError("(in K)");
    const size_t k = std::stoul(n.items[1]->atom);
    if (k >= ctx.inputs.size()) return absl::InvalidArgumentError("input index out of range");
    return ctx.inputs[k];
  }
  if (op == "const") {  // (const DTYPE VALUE): a 0-d tensor
    if (n.items.size() != 3) return absl::InvalidArgumentError("(const DTYPE VALUE)");
    DType d = DTypeArg(n.items[1]->atom);
    const std::string& v = n.items[2]->atom;
    Scalar s = d.IsFloat() ? Scalar(std::stod(v)) : d.IsBool() ? Scalar(v != "0") : Scalar(std::stoll(v));
    return Tensor::Full({}, s, d, ctx.device);
  }
  if (op == "vjp") {  // (vjp Y C K...): d sum(Y * C) / d input K for each K, flattened and concatenated
    if (n.items.size() < 4 || !n.items[1]->list || !n.items[2]->list)
      return absl::InvalidArgumentError("(vjp Y C K...)");
    auto y = Eval(*n.items[1], ctx);
    if (!y.ok()) return y.status();
    auto c = Eval(*n.items[2], ctx);
    if (!c.ok()) return c.status();
    std::vector<Tensor> targets;
    for (size_t i = 3; i < n.items.size(); ++i) {
      const size_t k = std::stoul(n.items[i]->atom);
      if (k >= ctx.inputs.size()) return absl::InvalidArgumentError("vjp input index out of range");
      targets.push_back(ctx.inputs[k]);
    }
    auto grads = y->Gradient(targets, *c);
    if (!grads.ok()) return grads.status();
    std::vector<Tensor> flat;
    for (const Tensor& g : *grads) flat.push_back(g.Reshape({g.numel()}));
    return Tensor::Cat(flat, 0);
  }
  auto it = Ops().find(op);
  if (it == Ops().end()) return absl::InvalidArgumentError(absl::StrCat("unknown op ", op));
  Args args;
  for (size_t i = 1; i < n.items.size(); ++i) {
    const Node& c = *n.items[i];
    if (c.list) {
      auto t = Eval(c, ctx);
      if (!t.ok()) return t.status();
      args.t.push_back(*std::move(t));
    } else {
      args.atoms.push_back(c.atom);
    }
  }
  try {
    Tensor r = it->second(args);
    if (!r.ok()) return r.status();
    return r;
  } catch (const std::exception& e) {  // std::stoll / .at() on a malformed case
    return absl::InvalidArgumentError(absl::StrCat("malformed arguments of ", op, ": ", e.what()));
  }
}

// ---- values ----

template <typename T>
std::vector<T> ParseValues(const std::string& line, int64_t n) {
  std::vector<T> v;
  v.reserve(n);
  std::istringstream in(line);
  std::string tok;
  while (in >> tok) {
    if constexpr (std::is_floating_point_v<T>) v.push_back(static_cast<T>(std::strtod(tok.c_str(), nullptr)));
    else v.push_back(static_cast<T>(std::strtoll(tok.c_str(), nullptr, 10)));
  }
  return v;
}

absl::StatusOr<Tensor> MakeInput(DType d, const IntVec& shape, const std::string& line, const std::string& device) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  auto check = [&](size_t got) -> absl::Status {
    if (static_cast<int64_t>(got) != n) return absl::InvalidArgumentError("input value count does not match its shape");
    return absl::OkStatus();
  };
  auto make = [&](const auto& v) -> absl::StatusOr<Tensor> {
    if (absl::Status st = check(v.size()); !st.ok()) return st;
    Tensor t = Tensor::FromHost(v.data(), d, shape, device);
    if (!t.ok()) return t.status();
    return t;
  };
  switch (d.scalar) {
    case ScalarType::kFloat32: return make(ParseValues<float>(line, n));
    case ScalarType::kFloat64: return make(ParseValues<double>(line, n));
    case ScalarType::kInt8: return make(ParseValues<int8_t>(line, n));
    case ScalarType::kUInt8: return make(ParseValues<uint8_t>(line, n));
    case ScalarType::kInt16: return make(ParseValues<int16_t>(line, n));
    case ScalarType::kUInt16: return make(ParseValues<uint16_t>(line, n));
    case ScalarType::kInt32: return make(ParseValues<int32_t>(line, n));
    case ScalarType::kUInt32: return make(ParseValues<uint32_t>(line, n));
    case ScalarType::kInt64: return make(ParseValues<int64_t>(line, n));
    case ScalarType::kBool: return make(ParseValues<uint8_t>(line, n));
    default: return absl::InvalidArgumentError(absl::StrCat("unsupported input dtype ", d.Name()));
  }
}

template <typename T>
std::string FormatValues(const std::string& bytes) {
  const size_t n = bytes.size() / sizeof(T);
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    if (i) out += ' ';
    if constexpr (std::is_same_v<T, float>) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
      out += buf;
    } else if constexpr (std::is_same_v<T, double>) {
      char buf[40];
      std::snprintf(buf, sizeof(buf), "%.17g", v);
      out += buf;
    } else {
      out += std::to_string(static_cast<int64_t>(v));
    }
  }
  return out;
}

absl::StatusOr<std::string> Format(DType d, const std::string& bytes) {
  switch (d.scalar) {
    case ScalarType::kFloat32: return FormatValues<float>(bytes);
    case ScalarType::kFloat64: return FormatValues<double>(bytes);
    case ScalarType::kInt8: return FormatValues<int8_t>(bytes);
    case ScalarType::kUInt8: return FormatValues<uint8_t>(bytes);
    case ScalarType::kInt16: return FormatValues<int16_t>(bytes);
    case ScalarType::kUInt16: return FormatValues<uint16_t>(bytes);
    case ScalarType::kInt32: return FormatValues<int32_t>(bytes);
    case ScalarType::kUInt32: return FormatValues<uint32_t>(bytes);
    case ScalarType::kInt64: return FormatValues<int64_t>(bytes);
    case ScalarType::kBool: return FormatValues<uint8_t>(bytes);
    default: return absl::InvalidArgumentError(absl::StrCat("unsupported result dtype ", d.Name()));
  }
}

struct Case {
  std::string name;
  std::vector<std::pair<std::string, std::string>> inputs;  // (header after "input ", values line)
  std::string expr;
};

// The values line with its tokens rotated by `k` and, when `reverse`, reversed: a decoy input for --jit.
std::string Decoy(const std::string& values, size_t k, bool reverse) {
  std::istringstream in(values);
  std::vector<std::string> toks;
  for (std::string t; in >> t;) toks.push_back(t);
  if (toks.size() < 2) return values;
  std::rotate(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(k % toks.size()), toks.end());
  if (reverse) std::reverse(toks.begin(), toks.end());
  std::string out;
  for (const std::string& t : toks) absl::StrAppend(&out, out.empty() ? "" : " ", t);
  return out;
}

absl::StatusOr<std::vector<Tensor>> Inputs(const Case& c, const std::string& device, int decoy) {
  std::vector<Tensor> inputs;
  for (const auto& [header, values] : c.inputs) {
    std::istringstream in(header);
    std::string dt;
    int nd = 0;
    in >> dt >> nd;
    IntVec shape(nd);
    for (int i = 0; i < nd; ++i) in >> shape[i];
    DType d = DTypeArg(dt);
    if (!in || d == dtypes::kVoid) return absl::InvalidArgumentError("malformed input header: " + header);
    auto t = MakeInput(d, shape, decoy == 0 ? values : Decoy(values, static_cast<size_t>(decoy), decoy == 2), device);
    if (!t.ok()) return t.status();
    inputs.push_back(*std::move(t));
  }
  return inputs;
}

// The expression under TinyJit (see --jit above): the result of the replay with the case's own inputs.
absl::StatusOr<Tensor> RunJitted(const Case& c, const Node& tree, const std::string& device) {
  jit::TinyJit fn([&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    KILN_ASSIGN_OR_RETURN(Tensor t, Eval(tree, Ctx{in, device}));
    return std::vector<Tensor>{t};
  });
  absl::StatusOr<std::vector<Tensor>> out;
  for (int decoy : {1, 2, 1, 0}) {
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> in, Inputs(c, device, decoy));
    out = fn(in);
    if (!out.ok()) {
      if (absl::IsFailedPrecondition(out.status()) &&
          absl::StrContains(out.status().message(), "didn't JIT anything")) {  // a view: nothing to capture
        KILN_ASSIGN_OR_RETURN(std::vector<Tensor> own, Inputs(c, device, 0));
        return Eval(tree, Ctx{own, device});
      }
      return out.status();
    }
  }
  if (fn.cnt() < 4) return absl::InternalError("the JIT did not replay");
  return (*out)[0];
}

absl::StatusOr<std::string> Run(const Case& c, const std::string& device, bool use_jit) {
  size_t pos = 0;
  auto tree = Parse(c.expr, pos);
  if (!tree.ok()) return tree.status();
  absl::StatusOr<Tensor> r;
  if (use_jit) {
    r = RunJitted(c, **tree, device);
  } else {
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> inputs, Inputs(c, device, 0));
    r = Eval(**tree, Ctx{inputs, device});
  }
  if (!r.ok()) return r.status();
  Tensor t = *std::move(r);
  std::string bytes(static_cast<size_t>(t.numel()) * t.dtype().ItemSize(), '\0');
  if (absl::Status st = t.CopyToHost(bytes.data(), bytes.size()); !st.ok()) return st;
  auto vals = Format(t.dtype(), bytes);
  if (!vals.ok()) return vals.status();
  std::string head = absl::StrCat("result ", c.name, " ", t.dtype().Name(), " ", t.ndim());
  for (int64_t s : t.shape()) absl::StrAppend(&head, " ", s);
  return absl::StrCat(head, "\n", *vals, "\n");
}

int Main(int argc, char** argv) {
  std::string device = "CPU";
  bool use_jit = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = argv[++i];
    if (std::strcmp(argv[i], "--jit") == 0) use_jit = true;
  }
  backends::RegisterAllBackends();
  if (!runtime::GetDevice(device).ok()) {
    std::printf("unavailable %s\n", device.c_str());
    return 77;
  }
  std::string line;
  Case c;
  bool in_case = false;
  while (std::getline(std::cin, line)) {
    if (line.rfind("case ", 0) == 0) {
      c = Case{line.substr(5), {}, ""};
      in_case = true;
    } else if (in_case && line.rfind("input ", 0) == 0) {
      std::string values;
      std::getline(std::cin, values);
      c.inputs.emplace_back(line.substr(6), values);
    } else if (in_case && line.rfind("expr ", 0) == 0) {
      c.expr = line.substr(5);
    } else if (in_case && line == "end") {
      in_case = false;
      std::printf("begin %s\n", c.name.c_str());
      std::fflush(stdout);
      absl::StatusOr<std::string> out = Run(c, device, use_jit);
      if (out.ok()) {
        std::fputs(out->c_str(), stdout);
      } else {
        std::string msg(out.status().ToString());
        for (char& ch : msg)
          if (ch == '\n') ch = ' ';
        std::printf("error %s %s\n", c.name.c_str(), msg.c_str());
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kiln::differential

int main(int argc, char** argv) { return kiln::differential::Main(argc, argv); }
