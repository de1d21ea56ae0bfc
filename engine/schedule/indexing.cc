#include "engine/schedule/indexing.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kiln::schedule {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

bool IsIConst(const UOpPtr& u, int64_t* v = nullptr) {
  if (u->op() != Op::CONST) return false;
  const int64_t* p = std::get_if<int64_t>(&u->arg());
  if (p == nullptr) return false;
  if (v != nullptr) *v = *p;
  return true;
}

int64_t SatAdd(int64_t a, int64_t b) { return std::clamp(a + b, -kInf, kInf); }
int64_t SatMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (std::abs(a) > kInf / std::abs(b)) return (a > 0) == (b > 0) ? kInf : -kInf;
  return a * b;
}

std::pair<int64_t, int64_t> BoundsRec(const UOp* u, absl::flat_hash_map<const UOp*, std::pair<int64_t, int64_t>>& memo) {
  if (auto it = memo.find(u); it != memo.end()) return it->second;
  std::pair<int64_t, int64_t> r{-kInf, kInf};
  switch (u->op()) {
    case Op::CONST:
      if (const int64_t* v = std::get_if<int64_t>(&u->arg())) r = {*v, *v};
      else if (const bool* b = std::get_if<bool>(&u->arg())) r = {*b, *b};
      break;
    case Op::RANGE: {
      auto e = BoundsRec(u->src(0).get(), memo);
      r = {0, std::max<int64_t>(0, e.second - 1)};
      break;
    }
    case Op::DEFINE_VAR:
      if (const VarArg* v = std::get_if<VarArg>(&u->arg())) r = {v->min, v->max};
      break;
    case Op::ADD: {
      auto a = BoundsRec(u->src(0).get(), memo), b = BoundsRec(u->src(1).get(), memo);
      r = {SatAdd(a.first, b.first), SatAdd(a.second, b.second)};
      break;
    }
    case Op::MUL: {
      auto a = BoundsRec(u->src(0).get(), memo), b = BoundsRec(u->src(1).get(), memo);
      int64_t c[4] = {SatMul(a.first, b.first), SatMul(a.first, b.second), SatMul(a.second, b.first),
                      SatMul(a.second, b.second)};
      r = {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
      break;
    }
    case Op::CDIV: {
      auto a = BoundsRec(u->src(0).get(), memo), b = BoundsRec(u->src(1).get(), memo);
      if (b.first == b.second && b.first > 0 && a.first >= 0) r = {a.first / b.first, a.second / b.first};
      break;
    }
    case Op::CMOD: {
      auto a = BoundsRec(u->src(0).get(), memo), b = BoundsRec(u->src(1).get(), memo);
      if (b.first == b.second && b.first > 0 && a.first >= 0) r = {0, std::min(a.second, b.first - 1)};
      break;
    }
    case Op::MAX: {
      auto a = BoundsRec(u->src(0).get(), memo), b = BoundsRec(u->src(1).get(), memo);
      r = {std::max(a.first, b.first), std::max(a.second, b.second)};
      break;
    }
    case Op::WHERE: {
      auto a = BoundsRec(u->src(1).get(), memo), b = BoundsRec(u->src(2).get(), memo);
      r = {std::min(a.first, b.first), std::max(a.second, b.second)};
      break;
    }
    case Op::CMPLT:
    case Op::CMPNE:
    case Op::CMPEQ:
    case Op::AND:
    case Op::OR:
      r = {0, 1};
      break;
    default: break;
  }
  memo[u] = r;
  return r;
}

// An index expression as a sum of (term, coefficient); a constant term has term == nullptr.
struct Term {
  UOpPtr x;
  int64_t c;
};

void Decompose(const UOpPtr& u, int64_t scale, std::vector<Term>* out) {
  int64_t v;
  if (IsIConst(u, &v)) {
    out->push_back({nullptr, v * scale});
  } else if (u->op() == Op::ADD) {
    Decompose(u->src(0), scale, out);
    Decompose(u->src(1), scale, out);
  } else if (u->op() == Op::MUL && IsIConst(u->src(1), &v)) {
    Decompose(u->src(0), scale * v, out);
  } else {
    out->push_back({u, scale});
  }
}

UOpPtr Rebuild(const std::vector<Term>& terms) {
  UOpPtr acc = IConst(0);
  int64_t k = 0;
  for (const Term& t : terms) {
    if (t.x == nullptr) k += t.c;
    else acc = IAdd(acc, IMul(t.x, t.c));
  }
  return IAdd(acc, k);
}

// Splits a >= 0 as a = c*quot + rest: positive coefficients (and the constant) are split into a multiple of c and a
// remainder in [0, c); other terms stay in rest. floor(a/c) = quot + floor(rest/c) holds whenever rest >= 0.
void SplitByMultiple(const UOpPtr& a, int64_t c, std::vector<Term>* quot, std::vector<Term>* rest) {
  std::vector<Term> terms;
  Decompose(a, 1, &terms);
  for (Term& t : terms) {
    if (t.c > 0) {
      if (t.c / c != 0) quot->push_back({t.x, t.c / c});
      if (t.c % c != 0) rest->push_back({t.x, t.c % c});
    } else {
      rest->push_back(t);
    }
  }
}

}  // namespace

UOpPtr IConst(int64_t v) { return UOp::ConstInt(v); }

UOpPtr IAdd(const UOpPtr& a, const UOpPtr& b) {
  int64_t x, y;
  bool ca = IsIConst(a, &x), cb = IsIConst(b, &y);
  if (ca && cb) return IConst(x + y);
  if (ca && x == 0) return b;
  if (cb && y == 0) return a;
  if (ca) return IAdd(b, a);  // constants on the right
  if (cb && a->op() == Op::ADD && IsIConst(a->src(1), &x)) return IAdd(a->src(0), x + y);  // (x+c1)+c2
  if (!cb && a->op() == Op::ADD && IsIConst(a->src(1), &x)) return IAdd(IAdd(a->src(0), b), x);  // (x+c)+b -> (x+b)+c
  if (b->op() == Op::ADD && IsIConst(b->src(1), &y)) return IAdd(IAdd(a, b->src(0)), y);
  return UOp::Make(Op::ADD, dtypes::kIndex, {a, b});
}

UOpPtr IAdd(const UOpPtr& a, int64_t b) { return IAdd(a, IConst(b)); }

UOpPtr IMul(const UOpPtr& a, int64_t c) {
  int64_t x;
  if (c == 0) return IConst(0);
  if (c == 1) return a;
  if (IsIConst(a, &x)) return IConst(x * c);
  if (a->op() == Op::MUL && IsIConst(a->src(1), &x)) return IMul(a->src(0), x * c);
  if (a->op() == Op::ADD) return IAdd(IMul(a->src(0), c), IMul(a->src(1), c));
  return UOp::Make(Op::MUL, dtypes::kIndex, {a, IConst(c)});
}

UOpPtr IDiv(const UOpPtr& a, int64_t c) {
  int64_t x;
  if (c == 1) return a;
  if (IsIConst(a, &x) && x >= 0) return IConst(x / c);
  auto [lo, hi] = Bounds(a);
  if (lo >= 0 && hi < c) return IConst(0);
  if (lo >= 0) {
    std::vector<Term> quot, rest;
    SplitByMultiple(a, c, &quot, &rest);
    UOpPtr r = Rebuild(rest);
    auto [rlo, rhi] = Bounds(r);
    if (!quot.empty() && rlo >= 0) {
      UOpPtr q = Rebuild(quot);
      if (rhi < c) return q;
      return IAdd(q, UOp::Make(Op::CDIV, dtypes::kIndex, {r, IConst(c)}));
    }
  }
  return UOp::Make(Op::CDIV, dtypes::kIndex, {a, IConst(c)});
}

UOpPtr IMod(const UOpPtr& a, int64_t c) {
  int64_t x;
  if (c == 1) return IConst(0);
  if (IsIConst(a, &x) && x >= 0) return IConst(x % c);
  auto [lo, hi] = Bounds(a);
  if (lo >= 0 && hi < c) return a;
  if (lo >= 0) {
    std::vector<Term> quot, rest;
    SplitByMultiple(a, c, &quot, &rest);
    UOpPtr r = Rebuild(rest);
    auto [rlo, rhi] = Bounds(r);
    if (!quot.empty() && rlo >= 0) {
      if (rhi < c) return r;
      return UOp::Make(Op::CMOD, dtypes::kIndex, {r, IConst(c)});
    }
  }
  return UOp::Make(Op::CMOD, dtypes::kIndex, {a, IConst(c)});
}

UOpPtr BAnd(const UOpPtr& a, const UOpPtr& b) {
  if (a == nullptr) return b;
  if (b == nullptr || a == b) return a;
  return UOp::Make(Op::AND, dtypes::kBool, {a, b});
}

UOpPtr ILt(const UOpPtr& a, int64_t c) {
  auto [lo, hi] = Bounds(a);
  if (hi < c) return nullptr;
  if (lo >= c) return UOp::ConstBool(false);
  return UOp::Make(Op::CMPLT, dtypes::kBool, {a, IConst(c)});
}

UOpPtr IGe(const UOpPtr& a, int64_t c) {
  auto [lo, hi] = Bounds(a);
  if (lo >= c) return nullptr;
  if (hi < c) return UOp::ConstBool(false);
  // c <= a  <=>  c-1 < a
  return UOp::Make(Op::CMPLT, dtypes::kBool, {IConst(c - 1), a});
}

std::pair<int64_t, int64_t> Bounds(const UOpPtr& u) {
  absl::flat_hash_map<const UOp*, std::pair<int64_t, int64_t>> memo;
  return BoundsRec(u.get(), memo);
}

UOpPtr Flatten(const IndexVec& idx, const Shape& shape) {
  UOpPtr acc = IConst(0);
  int64_t stride = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] != 1) acc = IAdd(IMul(idx[i], stride), acc);
    stride *= shape[i];
  }
  return acc;
}

namespace {

// RESHAPE: groups the non-1 dims of both shapes into runs of equal products; within a run the source index is the
// run's flat output index re-split by the source dims.
IndexVec MapReshape(const Shape& in, const Shape& out, const IndexVec& idx) {
  IndexVec res(in.size(), IConst(0));
  // A zero-size tensor has no element to address (every loop over it runs zero times); its dims need not group.
  for (int64_t d : in)
    if (d == 0) return res;
  std::vector<int> in_dims, out_dims;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1) in_dims.push_back(static_cast<int>(i));
  for (size_t j = 0; j < out.size(); ++j)
    if (out[j] != 1) out_dims.push_back(static_cast<int>(j));
  size_t i = 0, j = 0;
  while (i < in_dims.size() && j < out_dims.size()) {
    std::vector<int> gi{in_dims[i++]}, gj{out_dims[j++]};
    int64_t pi = in[gi[0]], po = out[gj[0]];
    while (pi != po) {
      if (pi < po) {
        gi.push_back(in_dims[i++]);
        pi *= in[gi.back()];
      } else {
        gj.push_back(out_dims[j++]);
        po *= out[gj.back()];
      }
    }
    UOpPtr flat = IConst(0);
    int64_t stride = 1;
    for (int k = static_cast<int>(gj.size()) - 1; k >= 0; --k) {
      flat = IAdd(IMul(idx[gj[k]], stride), flat);
      stride *= out[gj[k]];
    }
    stride = 1;
    for (int k = static_cast<int>(gi.size()) - 1; k >= 0; --k) {
      UOpPtr q = IDiv(flat, stride);
      res[gi[k]] = k == 0 ? q : IMod(q, in[gi[k]]);
      stride *= in[gi[k]];
    }
  }
  return res;
}

}  // namespace

absl::StatusOr<IndexVec> MapMovement(const UOp& mv, const IndexVec& idx, UOpPtr* valid) {
  const Shape& in = mv.src(0)->shape();
  const Shape& out = mv.shape();
  if (idx.size() != out.size())
    return absl::InternalError(absl::StrCat("schedule: index rank ", idx.size(), " for ", std::string(OpName(mv.op())),
                                            " of rank ", out.size()));
  const IntVec& a = mv.ArgVec();
  IndexVec res(in.size());
  switch (mv.op()) {
    case Op::RESHAPE:
      return MapReshape(in, out, idx);
    case Op::EXPAND:
      for (size_t i = 0; i < in.size(); ++i) res[i] = in[i] == out[i] ? idx[i] : IConst(0);
      return res;
    case Op::PERMUTE:
      for (size_t i = 0; i < a.size(); ++i) res[a[i]] = idx[i];
      return res;
    case Op::PAD:
      for (size_t i = 0; i < in.size(); ++i) {
        int64_t before = a[2 * i];
        if (before == 0 && a[2 * i + 1] == 0) {
          res[i] = idx[i];
          continue;
        }
        *valid = BAnd(*valid, BAnd(IGe(idx[i], before), ILt(idx[i], before + in[i])));
        res[i] = IAdd(idx[i], -before);
      }
      return res;
    case Op::SHRINK:
      for (size_t i = 0; i < in.size(); ++i) res[i] = IAdd(idx[i], a[2 * i]);
      return res;
    case Op::FLIP:
      for (size_t i = 0; i < in.size(); ++i) res[i] = a[i] ? IAdd(IMul(idx[i], -1), in[i] - 1) : idx[i];
      return res;
    default:
      return absl::InternalError(absl::StrCat("schedule: not a movement op: ", std::string(OpName(mv.op()))));
  }
}

IndexVec BroadcastIndex(const IndexVec& idx, const Shape& from, const Shape& to) {
  // `to` is the source's shape, `from` the node's (broadcast) shape.
  IndexVec res(to.size());
  size_t off = from.size() - to.size();
  for (size_t i = 0; i < to.size(); ++i) res[i] = to[i] == 1 ? IConst(0) : idx[i + off];
  return res;
}

}  // namespace kiln::schedule
