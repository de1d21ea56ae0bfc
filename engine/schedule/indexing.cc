#include "engine/schedule/indexing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/symbolic/range.h"
#include "engine/symbolic/symbolic.h"

namespace kiln::schedule {
namespace {

bool IsIConst(const UOpPtr& u, int64_t* v = nullptr) {
  if (u->op() != Op::CONST) return false;
  const int64_t* p = std::get_if<int64_t>(&u->arg());
  if (p == nullptr) return false;
  if (v != nullptr) *v = *p;
  return true;
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

// x/c and x%c fold by engine/symbolic's div/mod rules (FoldDivMod), with range analysis (VMinMax) proving the
// signs they need; what does not fold stays a CDIV/CMOD node.
UOpPtr IDiv(const UOpPtr& a, int64_t c) {
  int64_t x;
  if (c == 1) return a;
  if (IsIConst(a, &x) && x >= 0) return IConst(x / c);
  if (UOpPtr f = FoldDivMod(Op::CDIV, a, c)) return f;
  return UOp::Make(Op::CDIV, dtypes::kIndex, {a, IConst(c)});
}

UOpPtr IMod(const UOpPtr& a, int64_t c) {
  int64_t x;
  if (c == 1) return IConst(0);
  if (IsIConst(a, &x) && x >= 0) return IConst(x % c);
  if (UOpPtr f = FoldDivMod(Op::CMOD, a, c)) return f;
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
  const VRange r = VMinMax(u);
  return {r.lo, r.hi};
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
