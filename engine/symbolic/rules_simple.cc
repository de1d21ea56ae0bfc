// SymbolicSimple: constant folding and local identities (tinygrad symbolic_simple).
#include "engine/symbolic/rules_util.h"

namespace kiln::symbolic_internal {

namespace {

UOpPtr FoldRoot(const Bindings& b) { return FoldConstAlu(*b.root()); }
UOpPtr Zero(const UOpPtr& like) { return MakeConst(like->dtype(), 0); }

}  // namespace

std::vector<Rule> SimpleRules() {
  const UPat x = UPat::Var("x"), y = UPat::Var("y"), c = UPat::CVar("c");
  const UPat xi = IVar("x"), xb = BVar("x"), yb = BVar("y");
  const UPat k = UPat(Op::CONST);
  const UPat t = UPat::Const(int64_t{1}).WithDType(dtypes::kBool);   // true
  const UPat f = UPat::Const(int64_t{0}).WithDType(dtypes::kBool);   // false
  const OpSet unary = OpsWithFlag(kOpFlagUnary), binary = OpsWithFlag(kOpFlagBinary);
  const OpSet div{Op::CDIV, Op::FLOORDIV}, mod{Op::CMOD, Op::FLOORMOD};
  auto X = [](const Bindings& b) { return b["x"]; };
  return {
      // ** constant folding **
      {UPat(unary).Src({k}), FoldRoot, "op(c) -> c'"},
      {UPat(binary).Src({k, k}), FoldRoot, "c1 op c2 -> c3"},
      {UPat(OpSet{Op::WHERE, Op::MULACC}).Src({k, k, k}), FoldRoot, "op(c1,c2,c3) -> c4"},
      {UPat(Op::CAST).Src({k}), FoldRoot, "cast(c) -> c'"},
      {UPat(div).Src({xi, UPat::Const(int64_t{0})}), [](const Bindings& b) { return Zero(b["x"]); }, "x//0 -> 0 (defined, no trap)"},
      {UPat(mod).Src({xi, UPat::Const(int64_t{0})}), [](const Bindings& b) { return Zero(b["x"]); }, "x%0 -> 0 (defined, no trap)"},
      // ** self folding **
      {UPat(OpSet{Op::ADD, Op::XOR, Op::OR}).SrcPerm({x, UPat::Const(int64_t{0})}), X, "x+0 -> x"},
      {UPat(OpSet{Op::SHL, Op::SHR, Op::SUB}).Src({x, UPat::Const(int64_t{0})}), X, "x<<0 -> x"},
      {x * 1, X, "x*1 -> x"},
      {UPat(div).Src({x, UPat::Const(int64_t{1})}), X, "x//1 -> x"},
      {UPat(div).Src({xi, UPat::Const(int64_t{-1})}), [](const Bindings& b) { return MulC(b["x"], -1); }, "x//-1 -> -x"},
      {UPat(div).Src({xi, x}), [](const Bindings& b) { return MakeConst(b["x"]->dtype(), 1); }, "x//x -> 1"},
      {UPat(mod).Src({xi, UPat::Const(int64_t{1})}), [](const Bindings& b) { return Zero(b["x"]); }, "x%1 -> 0"},
      {UPat(mod).Src({xi, UPat::Const(int64_t{-1})}), [](const Bindings& b) { return Zero(b["x"]); }, "x%-1 -> 0"},
      {UPat(mod).Src({UPat(mod).Src({UPat::Var(), y}).Named("base"), y}),
       [](const Bindings& b) { return b.root()->op() == b["base"]->op() ? b["base"] : UOpPtr(); }, "(x%y)%y -> x%y"},
      {(x ^ y) ^ y, X, "(x^y)^y -> x"},
      {xb & UPat::CVar("c", dtypes::kBool), [](const Bindings& b) { return b["c"]->ArgBool() ? b["x"] : b["c"]; }, "x&c -> c ? x : false"},
      {xb | UPat::CVar("c", dtypes::kBool), [](const Bindings& b) { return b["c"]->ArgBool() ? b["c"] : b["x"]; }, "x|c -> c ? true : x"},
      {UPat(Op::CMPNE).Src({xb, f}), X, "x!=false -> x"},
      {UPat(OpSet{Op::MAX, Op::AND, Op::OR}).Src({x, x}), X, "max(x,x) -> x"},
      {Neg(Neg(x)), X, "-(-x) -> x"},
      {(x * -1) * -1, X, "(x*-1)*-1 -> x"},
      {NotPat(NotPat(xb)), X, "!!x -> x"},
      {Where(xb, t, f), X, "where(x,true,false) -> x"},
      {Where(xb, f, t), [](const Bindings& b) { return LogicalNot(b["x"]); }, "where(x,false,true) -> !x"},
      {UPat(Op::TRUNC).Src({xi}), X, "trunc(int x) -> x"},
      // ** zero folding **
      {Lt(x, x), [](const Bindings& b) { return UOp::ConstBool(false); }, "x<x -> false"},
      {UPat(mod).Src({xi, x}), [](const Bindings& b) { return Zero(b["x"]); }, "x%x -> 0"},
      {UPat(Op::XOR).Src({x, x}), [](const Bindings& b) { return b["x"]->dtype().IsFloat() ? UOpPtr() : Zero(b["x"]); }, "x^x -> 0"},
      {xi & UPat::Const(int64_t{0}), [](const Bindings& b) { return Zero(b["x"]); }, "x&0 -> 0"},
      {UPat(Op::CMPNE).Src({x, x}), [](const Bindings& b) { return b["x"]->dtype().IsFloat() ? UOpPtr() : UOp::ConstBool(false); }, "x!=x -> false"},
      {UPat(Op::CMPEQ).Src({x, x}), [](const Bindings& b) { return b["x"]->dtype().IsFloat() ? UOpPtr() : UOp::ConstBool(true); }, "x==x -> true"},
      {xi * 0, [](const Bindings& b) { return Zero(b["x"]); }, "x*0 -> 0"},
      {xi + xi * -1, [](const Bindings& b) { return Zero(b["x"]); }, "x+x*-1 -> 0"},
      {UPat(Op::SUB).Src({xi, x}), [](const Bindings& b) { return Zero(b["x"]); }, "x-x -> 0"},
      // ** bool ALU **
      {xb * yb, [](const Bindings& b) { return UOp::Alu(Op::AND, {b["x"], b["y"]}); }, "bool x*y -> x&y"},
      {xb + yb, [](const Bindings& b) { return UOp::Alu(Op::OR, {b["x"], b["y"]}); }, "bool x+y -> x|y"},
      {Max(xb, yb), [](const Bindings& b) { return UOp::Alu(Op::OR, {b["x"], b["y"]}); }, "bool max(x,y) -> x|y"},
      // ** casts **
      {UPat(OpSet{Op::CAST, Op::BITCAST}).Src({x}),
       [](const Bindings& b) { return b.root()->dtype() == b["x"]->dtype() ? b["x"] : UOpPtr(); }, "cast(x) to x.dtype -> x"},
      {Cast(Cast(x).Named("a")),
       [](const Bindings& b) {
         return b.root()->dtype() == b["x"]->dtype() && CanSafeCast(b["x"]->dtype(), b["a"]->dtype()) ? b["x"] : UOpPtr();
       }, "cast(cast(x)) -> x when lossless"},
      // ** where **
      {Where(UPat::Var(), x, x), X, "where(c,x,x) -> x"},
      {Where(UPat::CVar("g"), x, y), [](const Bindings& b) { return b["g"]->ConstValue() != 0 ? b["x"] : b["y"]; }, "where(const g,x,y) -> x or y"},
      {Where(UPat::Var("a"), Where(UPat::Var("b"), UPat::Var("c"), UPat::Var("d")), UPat::Var("d")),
       [](const Bindings& b) { return Where(UOp::Alu(Op::AND, {b["a"], b["b"]}), b["c"], b["d"]); }, "where(a,where(b,c,d),d) -> where(a&b,c,d)"},
      {Where(UPat::Var("a"), UPat::Var("c"), Where(UPat::Var("b"), UPat::Var("c"), UPat::Var("d"))),
       [](const Bindings& b) { return Where(UOp::Alu(Op::OR, {b["a"], b["b"]}), b["c"], b["d"]); }, "where(a,c,where(b,c,d)) -> where(a|b,c,d)"},
  };
}

}  // namespace kiln::symbolic_internal
