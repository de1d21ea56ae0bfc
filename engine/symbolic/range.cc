#include "engine/symbolic/range.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/symbolic/const_fold.h"

namespace kiln {

namespace {

using i128 = __int128;

VRange DTypeRange(DType d) {
  if (d.IsBool()) return {0, 1};
  return {DTypeMin(d), DTypeMax(d)};
}

// [lo, hi] if it is a proper interval inside the dtype's range, else the dtype's range.
VRange Fit(DType d, i128 lo, i128 hi) {
  VRange dr = DTypeRange(d);
  if (lo > hi || lo < dr.lo || hi > dr.hi) return dr;
  return {static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
}

VRange Bool(bool lo, bool hi) { return {lo ? 1 : 0, hi ? 1 : 0}; }

// Truncating and flooring division of int128 values (b != 0).
i128 TDiv(i128 a, i128 b) { return a / b; }
i128 FDiv(i128 a, i128 b) {
  i128 q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
i128 FMod(i128 a, i128 b) { return a - FDiv(a, b) * b; }

i128 Abs(i128 a) { return a < 0 ? -a : a; }

// Whether computing u's range reads its sources' ranges.
bool UsesSrc(const UOp& u) {
  switch (u.op()) {
    case Op::CMPLT:
    case Op::CMPNE:
    case Op::CMPEQ:
      return !u.src(0)->dtype().IsFloat();
    case Op::CAST:
      return !u.dtype().IsFloat() && !u.src(0)->dtype().IsFloat();
    case Op::RANGE:
    case Op::SPECIAL:
    case Op::BIND:
    case Op::AFTER:
      return true;
    case Op::ADD:
    case Op::SUB:
    case Op::MUL:
    case Op::NEG:
    case Op::CDIV:
    case Op::CMOD:
    case Op::FLOORDIV:
    case Op::FLOORMOD:
    case Op::MAX:
    case Op::SHL:
    case Op::SHR:
    case Op::AND:
    case Op::OR:
    case Op::XOR:
    case Op::WHERE:
      return !u.dtype().IsFloat();
    default:
      return false;
  }
}

// Smallest 2^k - 1 >= v (v >= 0).
i128 BitCeilMask(i128 v) {
  i128 m = 0;
  while (m < v) m = m * 2 + 1;
  return m;
}

template <typename Get>
VRange Compute(const UOp& u, const Get& get) {
  const DType d = u.dtype();
  switch (u.op()) {
    case Op::CONST:
      if (d.IsFloat()) return DTypeRange(d);
      return {ConstInt(u), ConstInt(u)};
    case Op::DEFINE_VAR: {
      const auto* v = std::get_if<VarArg>(&u.arg());
      if (v == nullptr || v->min > v->max) return DTypeRange(d);
      return {v->min, v->max};
    }
    case Op::BIND:
    case Op::AFTER:
      return get(0);
    case Op::RANGE:
    case Op::SPECIAL: {
      int64_t end_max = get(0).hi;
      return {0, std::max<int64_t>(end_max, 1) - 1};
    }
    default:
      break;
  }
  if (!UsesSrc(u)) return DTypeRange(d);
  switch (u.op()) {
    case Op::NEG: {
      VRange a = get(0);
      if (d.IsBool()) return Bool(a.hi == 0, a.lo == 0);
      return Fit(d, -static_cast<i128>(a.hi), -static_cast<i128>(a.lo));
    }
    case Op::CAST: {
      VRange a = get(0);
      if (d.IsBool()) return Bool(a.lo > 0 || a.hi < 0, !(a.lo == 0 && a.hi == 0));
      return Fit(d, a.lo, a.hi);
    }
    case Op::WHERE: {
      VRange c = get(0), t = get(1), f = get(2);
      if (c.lo == 1) return t;
      if (c.hi == 0) return f;
      return {std::min(t.lo, f.lo), std::max(t.hi, f.hi)};
    }
    default:
      break;
  }
  VRange a = get(0), b = get(1);
  const i128 alo = a.lo, ahi = a.hi, blo = b.lo, bhi = b.hi;
  switch (u.op()) {
    case Op::ADD:
      if (d.IsBool()) return Bool(a.lo || b.lo, a.hi || b.hi);
      return Fit(d, alo + blo, ahi + bhi);
    case Op::SUB:
      return Fit(d, alo - bhi, ahi - blo);
    case Op::MUL: {
      if (d.IsBool()) return Bool(a.lo && b.lo, a.hi && b.hi);
      i128 p[4] = {alo * blo, alo * bhi, ahi * blo, ahi * bhi};
      return Fit(d, *std::min_element(p, p + 4), *std::max_element(p, p + 4));
    }
    case Op::MAX:
      return Fit(d, std::max(alo, blo), std::max(ahi, bhi));
    case Op::CDIV:
    case Op::FLOORDIV: {
      auto div = u.op() == Op::CDIV ? TDiv : FDiv;
      if (blo * bhi > 0) {  // divisor never 0, one sign
        i128 p[4] = {div(alo, blo), div(alo, bhi), div(ahi, blo), div(ahi, bhi)};
        return Fit(d, *std::min_element(p, p + 4), *std::max_element(p, p + 4));
      }
      if (blo == 0 && bhi == 0) return {0, 0};
      // |x / y| <= |x| for |y| >= 1 (floor may add -1: bounded by |x| too for integers); y == 0 -> 0.
      if (blo >= 0 && u.op() == Op::CDIV) return Fit(d, std::min<i128>(alo, 0), std::max<i128>(ahi, 0));
      i128 m = std::max(Abs(alo), Abs(ahi));
      return Fit(d, -m, m);
    }
    case Op::CMOD: {
      if (blo == bhi && blo != 0) {  // constant divisor: exact within one quotient bucket
        i128 c = blo;
        if (TDiv(alo, c) == TDiv(ahi, c)) {
          i128 q = TDiv(alo, c);
          return Fit(d, alo - q * c, ahi - q * c);
        }
      }
      i128 m = std::max(Abs(blo), Abs(bhi));
      if (m == 0) return {0, 0};
      i128 lo = alo >= 0 ? 0 : std::max(alo, -(m - 1));
      i128 hi = ahi <= 0 ? 0 : std::min(ahi, m - 1);
      return Fit(d, lo, hi);
    }
    case Op::FLOORMOD: {
      if (blo == bhi && blo != 0) {
        i128 c = blo;
        if (FDiv(alo, c) == FDiv(ahi, c)) return Fit(d, FMod(alo, c), FMod(ahi, c));
        return c > 0 ? Fit(d, 0, c - 1) : Fit(d, c + 1, 0);
      }
      if (blo > 0) return Fit(d, 0, bhi - 1);
      if (bhi < 0) return Fit(d, blo + 1, 0);
      i128 m = std::max(Abs(blo), Abs(bhi));
      if (m == 0) return {0, 0};
      return Fit(d, -(m - 1), m - 1);
    }
    case Op::SHL:
    case Op::SHR: {
      if (blo != bhi || blo < 0 || blo >= 63) return DTypeRange(d);
      int k = static_cast<int>(blo);
      if (u.op() == Op::SHL) return Fit(d, alo * (i128{1} << k), ahi * (i128{1} << k));
      if (d.IsUnsigned() && alo < 0) return DTypeRange(d);
      return Fit(d, alo >> k, ahi >> k);
    }
    case Op::CMPLT:
      return Bool(ahi < blo, alo < bhi);
    case Op::CMPNE:
      return Bool(ahi < blo || bhi < alo, !(alo == ahi && ahi == blo && blo == bhi));
    case Op::CMPEQ:
      return Bool(alo == ahi && ahi == blo && blo == bhi, !(ahi < blo || bhi < alo));
    case Op::AND:
      if (d.IsBool()) return Bool(a.lo && b.lo, a.hi && b.hi);
      if (alo >= 0 && blo >= 0) return Fit(d, 0, std::min(ahi, bhi));
      if (blo == bhi && blo >= 0) return Fit(d, 0, bhi);
      if (alo == ahi && alo >= 0) return Fit(d, 0, ahi);
      return DTypeRange(d);
    case Op::OR:
      if (d.IsBool()) return Bool(a.lo || b.lo, a.hi || b.hi);
      if (alo >= 0 && blo >= 0) return Fit(d, std::max(alo, blo), BitCeilMask(std::max(ahi, bhi)));
      return DTypeRange(d);
    case Op::XOR:
      if (d.IsBool()) {
        if (a.IsConst() && b.IsConst()) return Bool(a.lo != b.lo, a.lo != b.lo);
        return {0, 1};
      }
      if (alo >= 0 && blo >= 0) return Fit(d, 0, BitCeilMask(std::max(ahi, bhi)));
      if (blo == bhi && blo == -1) return Fit(d, ~ahi, ~alo);
      return DTypeRange(d);
    default:
      return DTypeRange(d);
  }
}

bool Ready(const UOp& u) { return u.range_cache().state.load(std::memory_order_acquire) == 2; }
VRange Cached(const UOp& u) { return {u.range_cache().lo, u.range_cache().hi}; }

void Publish(const UOp& u, VRange r) {
  const UOp::RangeCache& c = u.range_cache();
  uint8_t expected = 0;
  if (c.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    c.lo = r.lo;
    c.hi = r.hi;
    c.state.store(2, std::memory_order_release);
  }
}

}  // namespace

VRange VMinMax(const UOp& u) {
  if (Ready(u)) return Cached(u);
  // Fast path: every source already known (the common case inside a bottom-up rewrite).
  bool srcs_ready = true;
  if (UsesSrc(u) || u.op() == Op::RANGE || u.op() == Op::SPECIAL) {
    for (const UOpPtr& s : u.src()) srcs_ready = srcs_ready && Ready(*s);
  }
  if (srcs_ready) {
    VRange r = Compute(u, [&](size_t i) { return Cached(*u.src(i)); });
    Publish(u, r);
    return r;
  }
  // Slow path: iterative post-order over the sources not yet known. Values that another thread
  // is publishing at the same time are kept in `local`.
  absl::flat_hash_map<const UOp*, VRange> local;
  auto known = [&](const UOp* n) { return Ready(*n) || local.contains(n); };
  auto value = [&](const UOp* n) { return Ready(*n) ? Cached(*n) : local.at(n); };
  std::vector<std::pair<const UOp*, bool>> stack;
  stack.emplace_back(&u, false);
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    if (known(n)) {
      stack.pop_back();
      continue;
    }
    bool needs = UsesSrc(*n) || n->op() == Op::RANGE || n->op() == Op::SPECIAL;
    if (!expanded && needs) {
      stack.back().second = true;
      for (const UOpPtr& s : n->src()) {
        if (!known(s.get())) stack.emplace_back(s.get(), false);
      }
      continue;
    }
    stack.pop_back();
    const UOp* node = n;  // (a structured binding cannot be captured before C++20's P1091 in clang 16)
    VRange r = Compute(*node, [&](size_t i) { return value(node->src(i).get()); });
    local[node] = r;
    Publish(*node, r);
  }
  return value(&u);
}

}  // namespace kiln
