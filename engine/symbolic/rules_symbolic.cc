// Symbolic (phase 2): canonical order, term combining, associative constant collection, where
// folding, range folding and comparison folding (tinygrad symbolic, minus div/mod: rules_divmod.cc).
#include <numeric>

#include "engine/symbolic/rules_util.h"
#include "engine/symbolic/symbolic.h"

namespace kiln::symbolic_internal {

namespace {

// op applied to two CONSTs of one dtype, without building the intermediate node.
UOpPtr FoldC(Op op, const UOpPtr& a, const UOpPtr& b) {
  DType d = a->dtype();
  if (d.IsFloat()) {
    double v[2] = {a->ConstValue(), b->ConstValue()};
    std::optional<double> r = ExecFloatAlu(op, d, v);
    return r ? UOp::Const(d, *r) : FoldConstAlu(*UOp::Alu(op, {a, b}));
  }
  int64_t v[2] = {ConstInt(*a), ConstInt(*b)};
  std::optional<int64_t> r = ExecIntAlu(op, d, v);
  return r ? MakeConst(d, *r) : FoldConstAlu(*UOp::Alu(op, {a, b}));
}

// Commutative canonical order: constants to the right; for integer ops a full deterministic order.
UOpPtr Flip(const Bindings& b) {
  const UOp& u = *b.root();
  if (u.num_src() != 2) return nullptr;
  const UOp& a = *u.src(0);
  const UOp& c = *u.src(1);
  bool swap;
  if (a.IsConst() != c.IsConst()) {
    swap = a.IsConst();
  } else {
    swap = IsIntDType(a.dtype()) && CanonicalBefore(c, a);
  }
  if (!swap) return nullptr;
  return UOp::Make(u.op(), u.dtype(), {u.src(1), u.src(0)}, u.arg(), u.tag());
}

// x < c over a sum: with the terms of factor 1 summing into [0, d) and every other term a multiple
// of d = gcd(other factors, c): x < c  <->  (others / d) < c / d (tinygrad lt_folding).
UOpPtr LtFolding(const Bindings& b) {
  const UOpPtr& x = b["x"];
  int64_t c = ConstInt(*b["c"]);
  if (c <= 0 || x->op() != Op::ADD) return nullptr;
  Terms terms, p, np;
  SplitAdd(x, &terms);
  int64_t g = c;
  for (const UOpPtr& t : terms) {
    int64_t f = ConstFactor(t);
    if (f == 1) {
      p.push_back(t);
    } else {
      np.push_back(t);
      g = Gcd(g, f);
    }
  }
  if (np.empty() || g <= 1) return nullptr;
  __int128 lo = 0, hi = 0;
  for (const UOpPtr& t : p) {
    VRange r = VMinMax(t);
    lo += r.lo;
    hi += r.hi;
  }
  if (lo < 0 || hi >= g) return nullptr;
  Terms divided;
  for (const UOpPtr& t : np) {
    UOpPtr q = Divides(t, g);
    if (!q) return nullptr;
    divided.push_back(q);
  }
  return Lt(Sum(divided, x->dtype()), c / g);
}

bool SameConstBranches(const UOpPtr& a, const UOpPtr& b) { return a->IsConst() && b->IsConst(); }

}  // namespace

std::vector<Rule> CommutativeRules() {
  return {
      // ** commutative canonical order **
      {UPat(OpsWithFlag(kOpFlagCommutative)), Flip, "a op b -> b op a (canonical order)"},
  };
}

std::vector<Rule> SymbolicRules() {
  const UPat x = UPat::Var("x"), y = UPat::Var("y"), c = UPat::CVar("c"), c0 = UPat::CVar("c0"),
             c1 = UPat::CVar("c1"), c2 = UPat::CVar("c2");
  const UPat xi = IVar("x"), yi = IVar("y");
  const UPat xidx = UPat::Var("x", dtypes::kIndex);
  auto B = [](const Bindings& b, const char* n) -> const UOpPtr& { return b[n]; };
  std::vector<Rule> rules = {
      // ** boolean algebra **
      {BVar("x") | NotPat(BVar("x")), [](const Bindings& b) { return UOp::ConstBool(true); }, "x|!x -> true"},
      // ** combine terms **
      {x * c0 + x * c1, [](const Bindings& b) { return b["x"] * FoldC(Op::ADD, b["c0"], b["c1"]); }, "x*c0+x*c1 -> x*(c0+c1)"},
      {(y + x * c0) + x * c1, [](const Bindings& b) { return b["y"] + b["x"] * FoldC(Op::ADD, b["c0"], b["c1"]); }, "(y+x*c0)+x*c1 -> y+x*(c0+c1)"},
      {x + x * c, [](const Bindings& b) { return b["x"] * FoldC(Op::ADD, b["c"], UOp::Const(b["c"]->dtype(), int64_t{1})); }, "x+x*c -> x*(c+1)"},
      {(y + x) + x * c, [](const Bindings& b) { return b["y"] + b["x"] * FoldC(Op::ADD, b["c"], UOp::Const(b["c"]->dtype(), int64_t{1})); }, "(y+x)+x*c -> y+x*(c+1)"},
      {(y + x * c) + x, [](const Bindings& b) { return b["y"] + b["x"] * FoldC(Op::ADD, b["c"], UOp::Const(b["c"]->dtype(), int64_t{1})); }, "(y+x*c)+x -> y+x*(c+1)"},
      {x + x, [](const Bindings& b) { return b["x"] * int64_t{2}; }, "x+x -> x*2"},
      {(y + x) + x, [](const Bindings& b) { return b["y"] + b["x"] * int64_t{2}; }, "(y+x)+x -> y+x*2"},
      {(x + c) * -1, [](const Bindings& b) { return MulC(b["x"], -1) + FoldC(Op::MUL, b["c"], UOp::Const(b["c"]->dtype(), int64_t{-1})); }, "-(x+c) -> -x+-c"},
      {(xidx + c) * c2, [](const Bindings& b) { return b["x"] * b["c2"] + FoldC(Op::MUL, b["c"], b["c2"]); }, "(x+c)*c2 -> x*c2+c*c2"},
      // ** associative constant collection **
      {(x + c1) + c2, [](const Bindings& b) { return b["x"] + FoldC(Op::ADD, b["c1"], b["c2"]); }, "(x+c1)+c2 -> x+(c1+c2)"},
      {(x * c1) * c2, [](const Bindings& b) { return b["x"] * FoldC(Op::MUL, b["c1"], b["c2"]); }, "(x*c1)*c2 -> x*(c1*c2)"},
      {(x & c1) & c2, [](const Bindings& b) { return b["x"]->dtype().IsBool() ? UOpPtr() : UOp::Alu(Op::AND, {b["x"], FoldC(Op::AND, b["c1"], b["c2"])}); }, "(x&c1)&c2 -> x&(c1&c2)"},
      {(x | c1) | c2, [](const Bindings& b) { return b["x"]->dtype().IsBool() ? UOpPtr() : UOp::Alu(Op::OR, {b["x"], FoldC(Op::OR, b["c1"], b["c2"])}); }, "(x|c1)|c2 -> x|(c1|c2)"},
      {Max(Max(x, c1), c2), [](const Bindings& b) { return Max(b["x"], FoldC(Op::MAX, b["c1"], b["c2"])); }, "max(max(x,c1),c2) -> max(x,max(c1,c2))"},
      {(x + c1) + y, [](const Bindings& b) { return b["y"]->IsConst() ? UOpPtr() : (b["x"] + b["y"]) + b["c1"]; }, "(x+c1)+y -> (x+y)+c1"},
      {(x * c1) * y, [](const Bindings& b) { return b["y"]->IsConst() ? UOpPtr() : (b["x"] * b["y"]) * b["c1"]; }, "(x*c1)*y -> (x*y)*c1"},
      // ** where folding **
      {Where(NotPat(BVar("c")), UPat::Var("t"), UPat::Var("f")), [](const Bindings& b) { return Where(b["c"], b["f"], b["t"]); }, "where(!c,t,f) -> where(c,f,t)"},
      {AluPat(Op::ADD, {Where(UPat::Var("c"), UPat::Var("t"), UPat::Var("f")), Where(UPat::Var("c"), UPat::Var("tt"), UPat::Var("ff"))}),
       [](const Bindings& b) {
         if (!SameConstBranches(b["t"], b["tt"]) && !SameConstBranches(b["f"], b["ff"])) return UOpPtr();
         return Where(b["c"], b["t"] + b["tt"], b["f"] + b["ff"]);
       }, "where(c,t,f)+where(c,tt,ff) -> where(c,t+tt,f+ff)"},
      // ** range folding (vmin == vmax) **
      {UPat(OpSet{Op::CMPLT, Op::CMPNE, Op::CMPEQ}).Src({xi, UPat::Var()}),
       [](const Bindings& b) { VRange r = VMinMax(b.root()); return r.IsConst() ? UOp::ConstBool(r.lo != 0) : UOpPtr(); }, "cmp with vmin==vmax -> const"},
      {UPat(OpSet{Op::CDIV, Op::CMOD, Op::FLOORDIV, Op::FLOORMOD, Op::SPECIAL, Op::RANGE, Op::BIND}).WithDTypes(IntDTypes()),
       [](const Bindings& b) { VRange r = VMinMax(b.root()); return r.IsConst() && b.root()->op() != Op::BIND ? MakeConst(b.root()->dtype(), r.lo) : UOpPtr(); }, "x with vmin==vmax -> const"},
      {Max(xi, yi), [](const Bindings& b) {
         VRange rx = VMinMax(b["x"]), ry = VMinMax(b["y"]);
         return rx.lo >= ry.hi ? b["x"] : rx.hi <= ry.lo ? b["y"] : UOpPtr();
       }, "max(x,y) -> x when x.vmin >= y.vmax"},
      // ** lt **
      {Lt(xi + c0, c1), [](const Bindings& b) { return Lt(b["x"], FoldC(Op::SUB, b["c1"], b["c0"])); }, "x+c0<c1 -> x<c1-c0"},
      {Lt(xidx * c0, c1), [](const Bindings& b) {
         int64_t k = ConstInt(*b["c0"]), lim = ConstInt(*b["c1"]);
         if (k == 1 || k == -1 || k == 0) return UOpPtr();
         int64_t ak = k < 0 ? -k : k;
         return Lt(k > 0 ? b["x"] : MulC(b["x"], -1), -FloorDivI(-lim, ak));
       }, "x*c0<c1 -> sign(c0)*x < ceil(c1/|c0|)"},
      {Lt(UPat(Op::FLOORDIV).Src({xi, UPat::CVar("d")}), c), [](const Bindings& b) {
         int64_t d = ConstInt(*b["d"]), k = ConstInt(*b["c"]);
         if (d > 0) return Lt(b["x"], MakeConst(b["x"]->dtype(), k * d));
         if (d < 0) return Lt(MakeConst(b["x"]->dtype(), k * d), b["x"]);
         return UOpPtr();
       }, "x//d<c -> x<c*d"},
      {Lt(UPat(Op::CDIV).Src({xi, UPat::CVar("d")}), c), [](const Bindings& b) {
         int64_t d = ConstInt(*b["d"]), k = ConstInt(*b["c"]);
         if (d <= 0 || VMin(b["x"]) < 0) return UOpPtr();
         return Lt(b["x"], MakeConst(b["x"]->dtype(), k * d));
       }, "x/d<c -> x<c*d (x>=0, d>0)"},
      {Lt(xidx, c), LtFolding, "sum<c -> (sum/g)<(c/g)"},
      {Lt(xi * -1, yi * -1), [](const Bindings& b) { return Lt(b["y"], b["x"]); }, "-x<-y -> y<x"},
  };
  (void)B;
  return rules;
}

}  // namespace kiln::symbolic_internal
