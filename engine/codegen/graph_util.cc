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
// Bounds
// ---------------------------------------------------------------------------------------------

namespace {
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t Sat(__int128 v) {
  if (v > kMax) return kMax;
  if (v < kMin) return kMin;
  return static_cast<int64_t>(v);
}

std::pair<int64_t, int64_t> DTypeBounds(DType d) {
  if (d.IsBool()) return {0, 1};
  if (d.scalar == ScalarType::kIndex) return {kMin, kMax};
  if (d.IsInt()) return {DTypeMin(d), DTypeMax(d)};
  return {kMin, kMax};
}
}  // namespace

std::pair<int64_t, int64_t> Bounds::Of(const UOpPtr& root) {
  auto hit = cache_.find(root.get());
  if (hit != cache_.end()) return hit->second;
  keep_.push_back(root);
  // Post-order over the nodes not cached yet (cached subgraphs are not walked again).
  std::vector<const UOp*> order;
  {
    absl::flat_hash_set<const UOp*> seen;
    std::vector<std::pair<const UOp*, size_t>> stack{{root.get(), 0}};
    seen.insert(root.get());
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->num_src()) {
        const UOp* c = n->src(i++).get();
        if (!cache_.contains(c) && seen.insert(c).second) stack.emplace_back(c, 0);
      } else {
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  for (const UOp* u : order) {
    if (cache_.contains(u)) continue;
    std::pair<int64_t, int64_t> r = DTypeBounds(u->dtype());
    auto b = [&](size_t i) { return cache_.at(u->src(i).get()); };
    int64_t c = 0;
    switch (u->op()) {
      case Op::CONST:
        if (ConstInt(UOpPtr::FromRaw(u), &c)) r = {c, c};
        break;
      case Op::RANGE: r = {0, std::max<int64_t>(0, Sat(__int128{b(0).second} - 1))}; break;
      case Op::SPECIAL: r = {0, std::max<int64_t>(0, Sat(__int128{b(0).second} - 1))}; break;
      case Op::DEFINE_VAR:
        if (const auto* v = std::get_if<VarArg>(&u->arg())) r = {v->min, v->max};
        break;
      case Op::ADD: r = {Sat(__int128{b(0).first} + b(1).first), Sat(__int128{b(0).second} + b(1).second)}; break;
      case Op::SUB: r = {Sat(__int128{b(0).first} - b(1).second), Sat(__int128{b(0).second} - b(1).first)}; break;
      case Op::NEG: r = {Sat(-__int128{b(0).second}), Sat(-__int128{b(0).first})}; break;
      case Op::MUL: {
        auto x = b(0), y = b(1);
        __int128 p[4] = {__int128{x.first} * y.first, __int128{x.first} * y.second,
                         __int128{x.second} * y.first, __int128{x.second} * y.second};
        r = {Sat(*std::min_element(p, p + 4)), Sat(*std::max_element(p, p + 4))};
        break;
      }
      case Op::MAX: r = {std::max(b(0).first, b(1).first), std::max(b(0).second, b(1).second)}; break;
      case Op::CDIV: {
        auto x = b(0), y = b(1);
        if (y.first == y.second && y.first > 0) {
          r = {x.first / y.first, x.second / y.first};
        } else if (y.first > 0 && x.first >= 0) {
          r = {0, x.second};
        }
        break;
      }
      case Op::CMOD: {
        auto x = b(0), y = b(1);
        if (y.first > 0 && x.first >= 0) r = {0, std::min(x.second, y.second - 1)};
        else if (y.first > 0) r = {-(y.second - 1), y.second - 1};
        break;
      }
      case Op::WHERE: r = {std::min(b(1).first, b(2).first), std::max(b(1).second, b(2).second)}; break;
      case Op::CMPLT: {
        auto x = b(0), y = b(1);
        if (x.second < y.first) r = {1, 1};
        else if (x.first >= y.second) r = {0, 0};
        break;
      }
      case Op::CAST: {
        if (u->src(0)->dtype().IsInt() || u->src(0)->dtype().IsBool()) {
          auto x = b(0);
          auto d = DTypeBounds(u->dtype());
          if (x.first >= d.first && x.second <= d.second) r = x;
        }
        break;
      }
      default: break;
    }
    if (r.first > r.second) r = DTypeBounds(u->dtype());
    cache_.emplace(u, r);
  }
  return cache_.at(root.get());
}

// ---------------------------------------------------------------------------------------------
// FoldIndexMath
// ---------------------------------------------------------------------------------------------

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
