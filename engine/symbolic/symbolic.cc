#include "engine/symbolic/symbolic.h"

#include <cstring>

#include "engine/rewrite/graph_rewrite.h"
#include "engine/symbolic/rules_util.h"

namespace kiln {

namespace si = symbolic_internal;

namespace {

// Three-way structural order (tinygrad's tuplize): op, leaf arg, dtype, arity, then sources
// lexicographically; below `depth` levels the structural Key() decides. A total order on
// distinct nodes (nodes differing only by tag compare equal).
int Compare(const UOp& a, const UOp& b, int depth) {
  if (&a == &b) return 0;
  if (a.op() != b.op()) return a.op() < b.op() ? -1 : 1;
  auto cmp = [](const auto& p, const auto& q) { return p < q ? -1 : (q < p ? 1 : 0); };
  int r = 0;
  switch (a.op()) {
    case Op::DEFINE_VAR: {
      const auto* va = std::get_if<VarArg>(&a.arg());
      const auto* vb = std::get_if<VarArg>(&b.arg());
      if (va && vb) {
        if ((r = va->name.compare(vb->name)) != 0) return r < 0 ? -1 : 1;
        if ((r = cmp(va->min, vb->min)) != 0) return r;
        if ((r = cmp(va->max, vb->max)) != 0) return r;
      }
      break;
    }
    case Op::RANGE: {
      const auto* ra = std::get_if<AxisArg>(&a.arg());
      const auto* rb = std::get_if<AxisArg>(&b.arg());
      if (ra && rb && (r = cmp(ra->id, rb->id)) != 0) return r;
      break;
    }
    case Op::SPECIAL: {
      const auto* sa = std::get_if<std::string>(&a.arg());
      const auto* sb = std::get_if<std::string>(&b.arg());
      if (sa && sb && (r = sa->compare(*sb)) != 0) return r < 0 ? -1 : 1;
      break;
    }
    case Op::CONST:
      if (a.dtype() == b.dtype() && !a.dtype().IsFloat() && (r = cmp(ConstInt(a), ConstInt(b))) != 0) return r;
      break;
    default:
      break;
  }
  if (a.dtype() != b.dtype() || a.num_src() != b.num_src() || depth == 0 || a.arg() != b.arg()) {
    return cmp(a.Key(), b.Key());
  }
  for (size_t i = 0; i < a.num_src(); ++i) {
    if ((r = Compare(*a.src(i), *b.src(i), depth - 1)) != 0) return r;
  }
  return 0;
}

}  // namespace

bool CanonicalBefore(const UOp& a, const UOp& b) {
  if (&a == &b) return false;
  if (a.IsConst() != b.IsConst()) return !a.IsConst();
  return Compare(a, b, 4) < 0;
}

namespace symbolic_internal {

std::vector<Rule> SymExtraRules() {
  const UPat x = UPat::Var("x"), y = UPat::Var("y"), c = UPat::CVar("c");
  const UPat xidx = UPat::Var("x", dtypes::kIndex);
  return {
      // ** distribute (lowering-friendly) **
      {(x + y) * -1, [](const Bindings& b) { return MulC(b["x"], -1) + MulC(b["y"], -1); }, "-(x+y) -> -x+-y"},
      {(xidx + y) * c, [](const Bindings& b) { return b["x"] * b["c"] + b["y"] * b["c"]; }, "(x+y)*c -> x*c+y*c"},
      // ** where **
      {Cast(Where(UPat::Var("s"), UPat::Var("a"), UPat::Var("b"))), [](const Bindings& b) {
         DType d = b.root()->dtype();
         return Where(b["s"], Cast(b["a"], d), Cast(b["b"], d));
       }, "cast(where(s,a,b)) -> where(s,cast(a),cast(b))"},
  };
}

}  // namespace symbolic_internal

namespace {

std::vector<Rule> Concat(std::initializer_list<std::vector<Rule>> lists) {
  std::vector<Rule> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

}  // namespace

const PatternMatcher& SymbolicSimple() {
  static const PatternMatcher* pm = new PatternMatcher(si::SimpleRules(), "symbolic_simple");
  return *pm;
}

const PatternMatcher& Symbolic() {
  static const PatternMatcher* pm = new PatternMatcher(
      Concat({si::SimpleRules(), si::CommutativeRules(), si::SymbolicRules(), si::DivModRules()}),
      "symbolic");
  return *pm;
}

const PatternMatcher& Sym() {
  static const PatternMatcher* pm = new PatternMatcher(
      Concat({si::SimpleRules(), si::CommutativeRules(), si::SymbolicRules(), si::DivModRules(),
              si::SymExtraRules()}),
      "sym");
  return *pm;
}

// Untraced: called per index and gate inside the lowering's traced passes, which get its matches.
UOpPtr Simplify(const UOpPtr& u) {
  return GraphRewriteOrDie(u, Symbolic(), {.name = "simplify", .traced = false});
}

}  // namespace kiln
