#include "engine/symbolic/variable.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/symbolic/const_fold.h"

namespace kiln {

namespace {

const VarArg* GetVarArg(const UOpPtr& u) {
  if (!u || u->op() != Op::DEFINE_VAR) return nullptr;
  return std::get_if<VarArg>(&u->arg());
}

}  // namespace

absl::StatusOr<UOpPtr> Bind(const UOpPtr& var, int64_t value) {
  const VarArg* va = GetVarArg(var);
  if (va == nullptr) return absl::InvalidArgumentError("Bind: not a Variable (DEFINE_VAR)");
  if (value < va->min || value > va->max) {
    return absl::InvalidArgumentError(absl::StrCat("Bind: value ", value, " of variable '",
                                                   va->name, "' is outside its range [", va->min,
                                                   ", ", va->max, "]"));
  }
  return UOp::Make(Op::BIND, var->dtype(), {var, UOp::Const(var->dtype(), value)});
}

absl::StatusOr<std::pair<UOpPtr, int64_t>> Unbind(const UOpPtr& bound) {
  if (!bound || bound->op() != Op::BIND || bound->num_src() != 2 || !GetVarArg(bound->src(0)) ||
      !bound->src(1)->IsConst()) {
    return absl::InvalidArgumentError("Unbind: not a bound Variable (BIND(DEFINE_VAR, CONST))");
  }
  return std::make_pair(bound->src(0), ConstInt(*bound->src(1)));
}

namespace {

// Rebuilds `root` bottom-up; `replace(node, new_srcs_changed)` returns the replacement of a node
// (null: keep, rebuilt with new sources if they changed).
template <typename Fn>
absl::StatusOr<UOpPtr> Rebuild(const UOpPtr& root, const Fn& replace) {
  std::vector<const UOp*> order = Toposort(root);
  absl::flat_hash_map<const UOp*, UOpPtr> out;
  out.reserve(order.size());
  UOpVec srcs;
  for (const UOp* n : order) {
    absl::StatusOr<UOpPtr> r = replace(n);
    if (!r.ok()) return r.status();
    if (*r) {
      out[n] = *std::move(r);
      continue;
    }
    bool changed = false;
    srcs.clear();
    for (const UOpPtr& s : n->src()) {
      const UOpPtr& ns = out.at(s.get());
      changed = changed || ns != s;
      srcs.push_back(ns);
    }
    out[n] = changed ? n->WithSrc(srcs) : UOpPtr::FromRaw(n);
  }
  return out.at(root.get());
}

}  // namespace

UOpPtr Substitute(const UOpPtr& root, const absl::flat_hash_map<UOpPtr, UOpPtr>& subs) {
  if (subs.empty()) return root;
  // Nodes inside a replacement are not searched: only original nodes are looked up.
  absl::StatusOr<UOpPtr> r = Rebuild(root, [&](const UOp* n) -> absl::StatusOr<UOpPtr> {
    auto it = subs.find(UOpPtr::FromRaw(n));
    return it == subs.end() ? UOpPtr() : it->second;
  });
  return *std::move(r);  // the callback never fails
}

absl::StatusOr<UOpPtr> UnbindAll(const UOpPtr& root, VarVals* var_vals) {
  return Rebuild(root, [&](const UOp* n) -> absl::StatusOr<UOpPtr> {
    if (n->op() != Op::BIND) return UOpPtr();
    KILN_ASSIGN_OR_RETURN(auto vv, Unbind(UOpPtr::FromRaw(n)));
    const std::string& name = std::get<VarArg>(vv.first->arg()).name;
    auto [it, inserted] = var_vals->emplace(name, vv.second);
    if (!inserted && it->second != vv.second) {
      return absl::InvalidArgumentError(absl::StrCat("UnbindAll: variable '", name,
                                                     "' is bound to both ", it->second, " and ",
                                                     vv.second));
    }
    return vv.first;
  });
}

absl::StatusOr<UOpPtr> SubstituteValues(const UOpPtr& root, const VarVals& var_vals) {
  return Rebuild(root, [&](const UOp* n) -> absl::StatusOr<UOpPtr> {
    if (n->op() != Op::DEFINE_VAR) return UOpPtr();
    const VarArg& va = std::get<VarArg>(n->arg());
    auto it = var_vals.find(va.name);
    if (it == var_vals.end()) return UOpPtr();
    KILN_ASSIGN_OR_RETURN(UOpPtr b, Bind(UOpPtr::FromRaw(n), it->second));
    return b->src(1);
  });
}

absl::StatusOr<int64_t> Evaluate(const UOpPtr& expr, const VarVals& var_vals) {
  if (!expr) return absl::InvalidArgumentError("Evaluate: null expression");
  // Post-order that treats BIND as a leaf (its DEFINE_VAR needs no value).
  std::vector<const UOp*> order;
  {
    absl::flat_hash_map<const UOp*, bool> seen;
    std::vector<std::pair<const UOp*, bool>> stack = {{expr.get(), false}};
    while (!stack.empty()) {
      auto [n, expanded] = stack.back();
      stack.pop_back();
      if (expanded) {
        order.push_back(n);
        continue;
      }
      if (!seen.emplace(n, true).second) continue;
      stack.emplace_back(n, true);
      if (n->op() == Op::BIND) continue;
      for (size_t i = n->num_src(); i-- > 0;) stack.emplace_back(n->src(i).get(), false);
    }
  }
  absl::flat_hash_map<const UOp*, int64_t> val;
  val.reserve(order.size());
  auto describe = [](const UOp* n) { return std::string(OpName(n->op())); };
  for (const UOp* n : order) {
    int64_t v = 0;
    switch (n->op()) {
      case Op::CONST:
        if (n->dtype().IsFloat()) {
          return absl::InvalidArgumentError("Evaluate: float constant in an integer expression");
        }
        v = ConstInt(*n);
        break;
      case Op::BIND:
        if (!n->src(1)->IsConst()) return absl::InvalidArgumentError("Evaluate: BIND of a non-constant");
        v = ConstInt(*n->src(1));
        break;
      case Op::DEFINE_VAR:
      case Op::SPECIAL: {
        const std::string* name = nullptr;
        if (const auto* va = std::get_if<VarArg>(&n->arg())) name = &va->name;
        if (const auto* s = std::get_if<std::string>(&n->arg())) name = s;
        if (name == nullptr) return absl::InvalidArgumentError("Evaluate: unnamed variable");
        auto it = var_vals.find(*name);
        if (it == var_vals.end()) {
          return absl::InvalidArgumentError(absl::StrCat("Evaluate: no value for variable '", *name, "'"));
        }
        v = it->second;
        if (const auto* va = std::get_if<VarArg>(&n->arg()); va && (v < va->min || v > va->max)) {
          return absl::InvalidArgumentError(absl::StrCat("Evaluate: value ", v, " of variable '",
                                                         *name, "' is outside its range [",
                                                         va->min, ", ", va->max, "]"));
        }
        break;
      }
      case Op::CAST:
        if (n->dtype().IsFloat() || n->src(0)->dtype().IsFloat()) {
          return absl::InvalidArgumentError("Evaluate: float cast in an integer expression");
        }
        v = WrapInt(n->dtype(), val.at(n->src(0).get()));
        break;
      default: {
        if (!IsALU(n->op()) || n->num_src() > 3) {
          return absl::InvalidArgumentError(
              absl::StrCat("Evaluate: ", describe(n), " is not integer arithmetic"));
        }
        int64_t in[3];
        for (size_t i = 0; i < n->num_src(); ++i) in[i] = val.at(n->src(i).get());
        DType vd = n->op() == Op::WHERE ? n->src(1)->dtype() : n->src(0)->dtype();
        if (vd.IsFloat()) {
          return absl::InvalidArgumentError("Evaluate: float arithmetic in an integer expression");
        }
        bool is_div = n->op() == Op::CDIV || n->op() == Op::CMOD || n->op() == Op::FLOORDIV ||
                      n->op() == Op::FLOORMOD;
        if (is_div && in[1] == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("Evaluate: division by zero in ", describe(n)));
        }
        std::optional<int64_t> r = ExecIntAlu(n->op(), vd, absl::MakeConstSpan(in, n->num_src()));
        if (!r) {
          return absl::InvalidArgumentError(
              absl::StrCat("Evaluate: ", describe(n), " cannot be evaluated on these values"));
        }
        v = n->dtype().IsBool() ? (*r != 0) : *r;
      }
    }
    val[n] = v;
  }
  return val.at(expr.get());
}

}  // namespace kiln
