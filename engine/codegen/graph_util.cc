#include "engine/codegen/graph_util.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "engine/dtype/dtype.h"

namespace kiln::codegen {

UOpPtr RewriteBottomUp(const UOpPtr& root, const RebuildFn& fn) {
  std::vector<const UOp*> topo = Toposort(root);
  absl::flat_hash_map<const UOp*, UOpPtr> done;
  done.reserve(topo.size());
  UOpVec src;
  for (const UOp* u : topo) {
    src.clear();
    bool changed = false;
    for (const UOpPtr& s : u->src()) {
      const UOpPtr& ns = done.at(s.get());
      changed |= ns != s;
      src.push_back(ns);
    }
    UOpPtr rebuilt = changed ? u->WithSrc(src) : UOpPtr::FromRaw(u);
    UOpPtr repl = fn(u, rebuilt);
    done.emplace(u, repl ? std::move(repl) : std::move(rebuilt));
  }
  return done.at(root.get());
}

UOpPtr Substitute(const UOpPtr& root, const absl::flat_hash_map<const UOp*, UOpPtr>& map) {
  if (map.empty()) return root;
  return RewriteBottomUp(root, [&](const UOp* orig, const UOpPtr&) -> UOpPtr {
    auto it = map.find(orig);
    return it == map.end() ? UOpPtr() : it->second;
  });
}

// ---------------------------------------------------------------------------------------------
// RangeSets
// ---------------------------------------------------------------------------------------------

namespace {
void UnionInto(std::vector<const UOp*>& dst, const std::vector<const UOp*>& add) {
  if (add.empty()) return;
  std::vector<const UOp*> out;
  out.reserve(dst.size() + add.size());
  std::set_union(dst.begin(), dst.end(), add.begin(), add.end(), std::back_inserter(out));
  dst.swap(out);
}
}  // namespace

RangeSets::RangeSets(const UOpPtr& root) : root_(root) {
  for (const UOp* u : Toposort(root)) {
    std::vector<const UOp*> s;
    bool closes = u->op() == Op::END || u->op() == Op::REDUCE;
    std::vector<const UOp*> closed;
    for (size_t i = 0; i < u->num_src(); ++i) {
      const UOp* c = u->src(i).get();
      if (closes && c->op() == Op::RANGE && (u->op() == Op::END || i > 0)) {
        closed.push_back(c);
        continue;
      }
      UnionInto(s, sets_.at(c));
    }
    if (u->op() == Op::RANGE) UnionInto(s, {u});
    if (!closed.empty()) {
      std::sort(closed.begin(), closed.end());
      std::vector<const UOp*> out;
      std::set_difference(s.begin(), s.end(), closed.begin(), closed.end(), std::back_inserter(out));
      s.swap(out);
    }
    sets_.emplace(u, std::move(s));
  }
}

const std::vector<const UOp*>& RangeSets::Of(const UOp* u) const {
  auto it = sets_.find(u);
  return it == sets_.end() ? empty_ : it->second;
}

// ---------------------------------------------------------------------------------------------
// FoldIndexMath
// ---------------------------------------------------------------------------------------------

std::pair<UOpPtr, int64_t> SplitOffset(const UOpPtr& idx) {
  int64_t c = 0;
  if (ConstInt(idx, &c)) return {nullptr, c};
  if (idx->op() == Op::ADD) {
    if (ConstInt(idx->src(1), &c)) return {idx->src(0), c};
    if (ConstInt(idx->src(0), &c)) return {idx->src(1), c};
  }
  return {idx, 0};
}

bool ConstInt(const UOpPtr& u, int64_t* v) {
  if (!u || u->op() != Op::CONST) return false;
  if (const auto* i = std::get_if<int64_t>(&u->arg())) {
    *v = *i;
    return true;
  }
  if (const auto* b = std::get_if<bool>(&u->arg())) {
    *v = *b ? 1 : 0;
    return true;
  }
  return false;
}

namespace {

bool Foldable(DType d) { return d.count == 1 && !d.is_ptr && (d.scalar == ScalarType::kIndex || d.IsBool()); }

// One folding step on a node whose sources are already folded; null = no change.
UOpPtr FoldOne(const UOpPtr& u) {
  if (!IsALU(u->op())) return nullptr;
  int64_t a = 0, b = 0;
  const size_t n = u->num_src();
  const bool ca = n > 0 && ConstInt(u->src(0), &a);
  const bool cb = n > 1 && ConstInt(u->src(1), &b);
  const DType d = u->dtype();
  if (u->op() == Op::WHERE) {
    if (ca) return a != 0 ? u->src(1) : u->src(2);
    if (u->src(1) == u->src(2)) return u->src(1);
    return nullptr;
  }
  // Only index-dtype math (unbounded, no wraparound) and bool logic fold; typed int data is left to the
  // device so per-dtype wraparound stays exact.
  const DType sd = u->src(0)->dtype();
  if (!Foldable(sd)) return nullptr;
  auto mk = [&](int64_t v) { return d.IsBool() ? UOp::ConstBool(v != 0) : UOp::Const(d, v); };
  if (ca && (n == 1 || cb)) {
    switch (u->op()) {
      case Op::NEG: return sd.IsBool() ? nullptr : mk(-a);
      case Op::ADD: return mk(a + b);
      case Op::SUB: return mk(a - b);
      case Op::MUL: return mk(a * b);
      case Op::MAX: return mk(std::max(a, b));
      case Op::CDIV: return b == 0 ? nullptr : mk(a / b);
      case Op::CMOD: return b == 0 ? nullptr : mk(a % b);
      case Op::CMPLT: return mk(a < b);
      case Op::CMPNE: return mk(a != b);
      case Op::CMPEQ: return mk(a == b);
      case Op::AND: return mk(a & b);
      case Op::OR: return mk(a | b);
      case Op::XOR: return mk(a ^ b);
      default: return nullptr;
    }
  }
  if (sd.IsBool()) return nullptr;
  const UOpPtr& x = u->src(0);
  switch (u->op()) {
    case Op::ADD:
      if (cb && b == 0) return x;                                  // x+0 -> x
      if (ca && a == 0) return u->src(1);                          // 0+x -> x
      if (cb && x->op() == Op::ADD) {                              // (y+c1)+c2 -> y+(c1+c2)
        int64_t c1 = 0;
        if (ConstInt(x->src(1), &c1)) return x->src(0) + (c1 + b);
      }
      break;
    case Op::SUB:
      if (cb && b == 0) return x;  // x-0 -> x
      break;
    case Op::MUL:
      if (cb && b == 1) return x;                      // x*1 -> x
      if (ca && a == 1) return u->src(1);              // 1*x -> x
      if ((cb && b == 0) || (ca && a == 0)) return mk(0);  // x*0 -> 0
      if (cb && x->op() == Op::MUL) {                  // (y*c1)*c2 -> y*(c1*c2)
        int64_t c1 = 0;
        if (ConstInt(x->src(1), &c1)) return x->src(0) * (c1 * b);
      }
      break;
    case Op::CDIV:
      if (cb && b == 1) return x;  // x/1 -> x
      break;
    case Op::CMOD:
      if (cb && (b == 1 || b == -1)) return mk(0);  // x%1 -> 0
      break;
    default: break;
  }
  return nullptr;
}

}  // namespace

UOpPtr FoldIndexMathAt(const UOpPtr& u) {
  UOpPtr cur = u;
  for (int i = 0; i < 8; ++i) {
    UOpPtr next = FoldOne(cur);
    if (!next || next == cur) break;
    cur = next;
  }
  return cur == u ? nullptr : cur;
}

UOpPtr FoldIndexMath(const UOpPtr& root) {
  return RewriteBottomUp(root, [](const UOp*, const UOpPtr& u) -> UOpPtr { return FoldIndexMathAt(u); });
}

}  // namespace kiln::codegen
