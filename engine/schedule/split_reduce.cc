#include "engine/schedule/split_reduce.h"

#include <algorithm>

#include "engine/uop/uop_key.h"

namespace kiln::schedule {
namespace {

UOpPtr Reduce(const UOpPtr& x, IntVec axes) {
  return UOp::Make(Op::REDUCE_AXIS, x->dtype(), {x}, ReduceArg{Op::ADD, std::move(axes)});
}
UOpPtr Movement(Op op, const UOpPtr& x, IntVec arg) { return UOp::Make(op, x->dtype(), {x}, std::move(arg)); }
UOpPtr Contiguous(const UOpPtr& x) { return UOp::Make(Op::CONTIGUOUS, x->dtype(), {x}); }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A float sum adding at least `at` elements per output.
bool IsLongFloatSum(const UOp& u, int64_t at = kSplitReduceAt) {
  if (u.op() != Op::REDUCE_AXIS || !u.dtype().IsFloat()) return false;
  const ReduceArg& ra = std::get<ReduceArg>(u.arg());
  if (ra.op != Op::ADD) return false;
  int64_t n = 1;
  for (int64_t a : ra.axes) n *= u.src(0)->shape()[a];
  return n >= at;
}

// Stage 1 over one reduced axis `a` cut into `s` groups: x viewed as [..., s, n_a / s, ...], summed over the
// original axes (with `a` standing for the group's inner axis), then the groups summed.
UOpPtr SplitAxis(const UOpPtr& x, const IntVec& axes, int64_t a, int64_t s, const Shape& out) {
  const Shape& in = x->shape();
  IntVec split;
  for (int64_t i = 0; i < static_cast<int64_t>(in.size()); ++i) {
    if (i == a) {
      split.push_back(s);
      split.push_back(in[i] / s);
    } else {
      split.push_back(in[i]);
    }
  }
  IntVec inner;
  for (int64_t b : axes) inner.push_back(b < a ? b : b + 1);
  UOpPtr partial = Contiguous(Reduce(Movement(Op::RESHAPE, x, split), inner));
  return Movement(Op::RESHAPE, Reduce(partial, {a}), IntVec(out.begin(), out.end()));
}

// Stage 1 over all reduced axes flattened into one of R elements, zero-padded to s groups of ceil(R / s).
UOpPtr SplitFlat(const UOpPtr& x, const IntVec& axes, int64_t r, int64_t s, const Shape& out) {
  const Shape& in = x->shape();
  const int64_t rank = static_cast<int64_t>(in.size());
  IntVec perm, flat;
  for (int64_t i = 0; i < rank; ++i)
    if (!std::binary_search(axes.begin(), axes.end(), i)) {
      perm.push_back(i);
      flat.push_back(in[i]);
    }
  const int64_t kept = static_cast<int64_t>(perm.size());
  perm.insert(perm.end(), axes.begin(), axes.end());
  UOpPtr v = x;
  bool identity = true;
  for (int64_t i = 0; i < rank; ++i) identity &= perm[i] == i;
  if (!identity) v = Movement(Op::PERMUTE, v, perm);
  flat.push_back(r);
  v = Movement(Op::RESHAPE, v, flat);
  const int64_t len = CeilDiv(r, s);
  if (len * s != r) {
    IntVec pad(2 * flat.size(), 0);
    pad.back() = len * s - r;
    v = Movement(Op::PAD, v, pad);
  }
  flat.back() = s;
  flat.push_back(len);
  v = Movement(Op::RESHAPE, v, flat);
  UOpPtr partial = Contiguous(Reduce(v, {kept + 1}));
  return Movement(Op::RESHAPE, Reduce(partial, {kept}), IntVec(out.begin(), out.end()));
}

// The two-stage form of a long float sum `u` whose source is `x` (already rewritten): groups of at most `part`.
UOpPtr SplitOne(const UOp& u, const UOpPtr& x, int64_t part) {
  const IntVec& axes = std::get<ReduceArg>(u.arg()).axes;
  const Shape& in = x->shape();
  int64_t r = 1;
  for (int64_t a : axes) r *= in[a];
  const int64_t want = CeilDiv(r, part);  // the fewest groups that keep each within `part`
  for (int64_t a : axes) {
    // The smallest divisor of the axis that gives enough groups, if it gives not many more than needed.
    for (int64_t s = want; s <= std::min(in[a], 2 * want); ++s)
      if (in[a] % s == 0) return SplitAxis(x, axes, a, s, u.shape());
  }
  return SplitFlat(x, axes, r, want, u.shape());
}

}  // namespace

std::vector<UOpPtr> SplitLongReduces(absl::Span<const UOpPtr> roots) {
  std::vector<UOpPtr> out(roots.begin(), roots.end());
  std::vector<const UOp*> topo = Toposort(roots);
  if (std::none_of(topo.begin(), topo.end(), [](const UOp* u) { return IsLongFloatSum(*u); })) return out;
  UOpMap<UOpPtr> done;  // keys: nodes of `topo`, alive while `roots` are held
  for (const UOp* u : topo) {
    bool changed = false;
    UOpVec src;
    for (const UOpPtr& s : u->src()) {
      auto it = done.find(s.get());
      src.push_back(it == done.end() ? s : it->second);
      changed |= src.back() != s;
    }
    UOpPtr n = changed ? u->WithSrc(src) : nullptr;
    if (IsLongFloatSum(*u)) {
      n = SplitOne(*u, src[0], kSplitPartMax);
      // The sum of the partials is split again while it adds more than kSplitFanIn of them.
      while (n->op() == Op::RESHAPE && IsLongFloatSum(*n->src(0), kSplitFanIn + 1)) {
        const UOp& last = *n->src(0);
        const UOpPtr again = SplitOne(last, last.src(0), kSplitFanIn);  // RESHAPE(new last sum, last's shape)
        n = Movement(Op::RESHAPE, again->src(0), n->ArgVec());
      }
    }
    if (n != nullptr) done.emplace(u, std::move(n));
  }
  for (UOpPtr& r : out)
    if (auto it = done.find(r.get()); it != done.end()) r = it->second;
  return out;
}

}  // namespace kiln::schedule
