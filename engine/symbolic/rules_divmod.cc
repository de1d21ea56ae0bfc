// Div/mod folding (tinygrad divandmod.py) for C-semantics CDIV/CMOD and Python FLOORDIV/FLOORMOD.
//
// The identities below are floor-division identities. CDIV/CMOD truncate toward zero, which equals
// floor only for a non-negative numerator and a positive divisor, so every CDIV/CMOD rewrite except
// the constant-quotient one requires range analysis to prove numerator >= 0 (and the rewritten
// numerators >= 0 where the result divides again). FLOORDIV/FLOORMOD become CDIV/CMOD when both
// operands are proven non-negative.
#include <algorithm>
#include <vector>

#include "engine/symbolic/rules_util.h"

namespace kiln::symbolic_internal {

namespace {

using i128 = __int128;

struct Term {
  UOpPtr t;   // the term without its constant factor
  int64_t f;  // the constant factor
};

// x / c or x % c (op CDIV or CMOD, c > 0) for x >= 0 except where noted. Null if nothing folds.
UOpPtr FoldDivModConst(Op op, const UOpPtr& x, int64_t c) {
  const bool is_div = op == Op::CDIV;
  const DType dt = x->dtype();
  VRange xr = VMinMax(x);
  // constant quotient (any sign: truncation is monotone): x/c -> q, x%c -> x - q*c
  int64_t qlo = xr.lo / c, qhi = xr.hi / c;
  if (qlo == qhi) return is_div ? MakeConst(dt, qlo) : AddC(x, -qlo * c);
  if (xr.lo < 0) return nullptr;
  // nested div: (a%(k*c))/c -> (a/c)%k
  if (is_div && x->op() == Op::CMOD) {
    if (auto m = IntConstOf(*x->src(1)); m && *m > 0 && *m % c == 0 && VMin(x->src(0)) >= 0) {
      return UOp::Alu(Op::CMOD, {x->src(0) / c, MakeConst(dt, *m / c)});
    }
  }
  auto [x_peeled, k] = PopConst(x);
  Terms raw;
  SplitAdd(x_peeled, &raw);
  // nested mod in a sum: (a%(m*c) + b)%c -> (a+b)%c
  if (!is_div) {
    bool changed = false;
    Terms nt;
    for (const UOpPtr& u : raw) {
      if (u->op() == Op::CMOD) {
        if (auto m = IntConstOf(*u->src(1)); m && *m > 0 && *m % c == 0 && VMin(u->src(0)) >= 0) {
          nt.push_back(u->src(0));
          changed = true;
          continue;
        }
      }
      nt.push_back(u);
    }
    if (changed) {
      UOpPtr nx = AddC(Sum(nt, dt), k);
      if (VMin(nx) >= 0) return UOp::Alu(Op::CMOD, {nx, MakeConst(dt, c)});
    }
  }
  std::vector<Term> terms;
  terms.reserve(raw.size());
  for (const UOpPtr& u : raw) {
    auto [t, f] = PopMulConst(u);
    if (auto uc = IntConstOf(*u)) {
      k += *uc;  // a stray constant term
      continue;
    }
    terms.push_back({t, f});
  }
  // congruence: x == sum(r_i*t_i) + k%c (mod c) with r_i == f_i (mod c); if that remainder sum
  // stays within one multiple of c, the quotient and remainder are linear.
  {
    const size_t n = terms.size();
    std::vector<int64_t> r0(n), r1(n);
    std::vector<char> two(n);
    size_t choices = 1;
    for (size_t i = 0; i < n; ++i) {
      int64_t r = FloorModI(terms[i].f, c);
      bool tie = 2 * r == c;
      if (tie || n == 1) {
        r0[i] = r;
        r1[i] = r - c;
        two[i] = 1;
        choices *= 2;
      } else {
        r0[i] = (r < c - r) ? r : r - c;
        two[i] = 0;
      }
    }
    if (choices <= 16) {
      for (size_t mask = 0; mask < choices; ++mask) {
        i128 lo = FloorModI(k, c), hi = lo;
        size_t bit = 0;
        std::vector<int64_t> rs(n);
        for (size_t i = 0; i < n; ++i) {
          int64_t r = r0[i];
          if (two[i]) r = ((mask >> bit++) & 1) ? r1[i] : r0[i];
          rs[i] = r;
          VRange tr = VMinMax(terms[i].t);
          i128 a = static_cast<i128>(r) * tr.lo, b = static_cast<i128>(r) * tr.hi;
          lo += std::min(a, b);
          hi += std::max(a, b);
        }
        auto fdiv = [c](i128 v) { i128 q = v / c; return (v % c != 0 && v < 0) ? q - 1 : q; };
        if (fdiv(lo) != fdiv(hi)) continue;
        int64_t q0 = static_cast<int64_t>(fdiv(lo));
        Terms out;
        if (!is_div) {
          for (size_t i = 0; i < n; ++i) {
            if (rs[i] != 0) out.push_back(MulC(terms[i].t, rs[i]));
          }
          return AddC(Sum(out, dt), FloorModI(k, c) - q0 * c);
        }
        for (size_t i = 0; i < n; ++i) {
          int64_t qf = (terms[i].f - rs[i]) / c;
          if (qf != 0) out.push_back(MulC(terms[i].t, qf));
        }
        return AddC(Sum(out, dt), FloorDivI(k, c) + q0);
      }
    }
  }
  // gcd: x = g*X + k with g = gcd(factors, c) > 1 -> fold into X / (c/g)
  {
    int64_t g = c;
    for (const Term& t : terms) g = Gcd(g, t.f);
    if (g > 1 && !terms.empty()) {
      Terms xs;
      for (const Term& t : terms) xs.push_back(MulC(t.t, t.f / g));
      int64_t m = c / g;
      UOpPtr nx = AddC(Sum(xs, dt), FloorModI(FloorDivI(k, g), m));
      if (VMin(nx) >= 0) {
        if (!is_div) return AddC(MulC(UOp::Alu(Op::CMOD, {nx, MakeConst(dt, m)}), g), FloorModI(k, g));
        return AddC(UOp::Alu(Op::CDIV, {nx, MakeConst(dt, m)}), FloorDivI(k, c));
      }
    }
  }
  // factor remainder: (c*a + b)/c -> a + b/c, (c*a + b)%c -> b%c, with b >= 0
  {
    Terms quo, rem;
    auto split = [&](const UOpPtr& t, int64_t f) {
      if (f % c == 0) {
        quo.push_back(MulC(t, f / c));
      } else if (FloorModI(f, c) != f) {
        rem.push_back(MulC(t, FloorModI(f, c)));
        quo.push_back(MulC(t, FloorDivI(f, c)));
      } else {
        rem.push_back(MulC(t, f));
      }
    };
    for (const Term& t : terms) split(t.t, t.f);
    if (k != 0) split(MakeConst(dt, 1), k);
    if (quo.empty()) return nullptr;
    UOpPtr nx = Sum(rem, dt);
    if (VMin(nx) < 0) return nullptr;
    if (!is_div) return UOp::Alu(Op::CMOD, {nx, MakeConst(dt, c)});
    quo.push_back(UOp::Alu(Op::CDIV, {nx, MakeConst(dt, c)}));
    return Sum(quo, dt);
  }
}

UOpPtr FoldDivModRule(const Bindings& b) {
  int64_t c = ConstInt(*b["c"]);
  if (c <= 1) return nullptr;  // c == 1, 0, negative: SymbolicSimple or left alone
  return FoldDivModConst(b.root()->op(), b["x"], c);
}

// (x%c)*m + (x/c)*(c*m) -> x*m (exact for C and floor semantics, c != 0), and the partial form
// (x%c)*m + ((x/c)%d)*(c*m) -> (x%(c*d))*m for x >= 0, d > 0.
UOpPtr RecombineDivMod(const Bindings& b) {
  const UOpPtr& root = b.root();
  Terms terms;
  SplitAdd(root, &terms);
  for (size_t i = 0; i < terms.size(); ++i) {
    auto [mod, mul] = PopMulConst(terms[i]);
    if (mod->op() != Op::CMOD && mod->op() != Op::FLOORMOD) continue;
    auto cv = IntConstOf(*mod->src(1));
    if (!cv || *cv == 0) continue;
    const Op div_op = mod->op() == Op::CMOD ? Op::CDIV : Op::FLOORDIV;
    const UOpPtr& base = mod->src(0);
    for (size_t j = 0; j < terms.size(); ++j) {
      if (i == j) continue;
      auto [q, scale] = PopMulConst(terms[j]);
      if (scale != *cv * mul) continue;
      UOpPtr repl;
      if (q->op() == div_op && q->src(0) == base && q->src(1) == mod->src(1)) {
        repl = MulC(base, mul);
      } else if (q->op() == mod->op() && q->src(0)->op() == div_op && q->src(0)->src(0) == base &&
                 q->src(0)->src(1) == mod->src(1) && *cv > 0 && VMin(base) >= 0) {
        auto d = IntConstOf(*q->src(1));
        if (!d || *d <= 0) continue;
        repl = MulC(UOp::Alu(mod->op(), {base, MakeConst(base->dtype(), *cv * *d)}), mul);
      } else {
        continue;
      }
      Terms rest;
      for (size_t t = 0; t < terms.size(); ++t) {
        if (t != i && t != j) rest.push_back(terms[t]);
      }
      rest.push_back(repl);
      return Sum(rest, root->dtype());
    }
  }
  return nullptr;
}

}  // namespace

std::vector<Rule> DivModRules() {
  const UPat x = IVar("x"), y = IVar("y"), c = ICVar("c"), c1 = ICVar("c1"), c2 = ICVar("c2");
  const UPat range = UPat(Op::RANGE).Src({UPat::Var("end")}).Named("r");
  const OpSet divs{Op::CDIV, Op::FLOORDIV}, mods{Op::CMOD, Op::FLOORMOD};
  return {
      // ** floor -> C semantics **
      {UPat(Op::FLOORDIV).Src({x, y}), [](const Bindings& b) {
         return VMin(b["x"]) >= 0 && VMin(b["y"]) >= 0 ? b["x"] / b["y"] : UOpPtr();
       }, "x//y -> x/y (x,y >= 0)"},
      {UPat(Op::FLOORMOD).Src({x, y}), [](const Bindings& b) {
         return VMin(b["x"]) >= 0 && VMin(b["y"]) >= 0 ? b["x"] % b["y"] : UOpPtr();
       }, "x%%y -> x%y (x,y >= 0)"},
      // ** exact multiples (any sign) **
      {UPat(divs).Src({x * y, y}), [](const Bindings& b) { return b["x"]; }, "(x*y)/y -> x"},
      {UPat(divs).Src({x * c1, c2}), [](const Bindings& b) {
         int64_t a = ConstInt(*b["c1"]), d = ConstInt(*b["c2"]);
         return d != 0 && a % d == 0 ? MulC(b["x"], a / d) : UOpPtr();
       }, "(x*c1)/c2 -> x*(c1/c2) when c2 | c1"},
      {UPat(mods).Src({x * c1, c2}), [](const Bindings& b) {
         int64_t a = ConstInt(*b["c1"]), d = ConstInt(*b["c2"]);
         return d != 0 && a % d == 0 ? MakeConst(b["x"]->dtype(), 0) : UOpPtr();
       }, "(x*c1)%c2 -> 0 when c2 | c1"},
      // ** ranges **
      {UPat(mods).Src({range, UPat::Var("end")}), [](const Bindings& b) { return b["r"]; }, "r%end -> r"},
      {UPat(divs).Src({range, UPat::Var("end")}), [](const Bindings& b) { return MakeConst(b["r"]->dtype(), 0); }, "r/end -> 0"},
      // ** nested division **
      {UPat(Op::CDIV).Src({UPat(Op::CDIV).Src({x, c1}), c2}), [](const Bindings& b) {
         int64_t a = ConstInt(*b["c1"]), d = ConstInt(*b["c2"]);
         if (a <= 0 || d <= 0 || a > (int64_t{1} << 31) || d > (int64_t{1} << 31)) return UOpPtr();
         return b["x"] / (a * d);
       }, "(x/c1)/c2 -> x/(c1*c2)"},
      {UPat(Op::CDIV).Src({UPat(Op::CDIV).Src({x, c1}) + UPat::CVar("a"), c2}), [](const Bindings& b) {
         int64_t cc = ConstInt(*b["c1"]), a = ConstInt(*b["a"]), d = ConstInt(*b["c2"]);
         if (cc <= 0 || d <= 0 || cc > (int64_t{1} << 31) || d > (int64_t{1} << 31) || VMin(b["x"]) < 0) return UOpPtr();
         if (VMin(b.root()->src(0)) < 0 || VMin(b["x"]) + a * cc < 0) return UOpPtr();
         return AddC(b["x"], a * cc) / (cc * d);
       }, "(x/c+a)/d -> (x+a*c)/(c*d)"},
      // ** constant divisor folding (congruence, gcd, factor remainder) **
      {UPat(OpSet{Op::CDIV, Op::CMOD}).Src({x, c}), FoldDivModRule, "x/c, x%c folding"},
      // ** split the multiple of d out of a constant **
      {UPat(OpSet{Op::CDIV, Op::CMOD}).Src({x + c1, c2}), [](const Bindings& b) {
         int64_t k = ConstInt(*b["c1"]), d = ConstInt(*b["c2"]);
         if (d <= 0) return UOpPtr();
         int64_t km = FloorModI(k, d);
         if (km == k || VMin(b["x"]) + km < 0 || VMin(b.root()->src(0)) < 0) return UOpPtr();
         UOpPtr nx = AddC(b["x"], km);
         if (b.root()->op() == Op::CMOD) return nx % d;
         return AddC(nx / d, FloorDivI(k, d));
       }, "(x+c)/d -> (x+c%d)/d + c//d"},
      // ** recombine **
      {UPat(Op::ADD).WithDTypes(IntDTypes()), RecombineDivMod, "(x%c)*m+(x/c)*(c*m) -> x*m"},
  };
}

}  // namespace kiln::symbolic_internal

namespace kiln {

UOpPtr FoldDivMod(Op op, const UOpPtr& x, int64_t c) {
  if ((op != Op::CDIV && op != Op::CMOD) || c <= 1) return nullptr;
  return symbolic_internal::FoldDivModConst(op, x, c);
}

}  // namespace kiln
