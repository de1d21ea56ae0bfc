// GPU launch dimensions: output (global) and LOCAL/GROUP axes -> SPECIAL work-group / work-item indices, for targets
// with has_local (tinygrad's get_grouped_dims, simplified). CPU targets pass through unchanged.
//
// Global axes (kLoop/kGlobal, in loop-nest order) are numbered from the innermost: the innermost output axis is
// dimension 0 (adjacent work-items touch adjacent elements). With more than three, the outermost ones are merged into
// dimension 2 and recovered with / and %. When a dimension would exceed the target's grid (Target::global_max, e.g.
// CUDA's 65535 blocks in y and z), all global axes fold into dimension 0. Local axes (kLocal, kGroupReduce) map the
// same way onto lidx0..2. A kernel with local axes uses "gidxK" (work-group index) and "lidxK"; one without uses "idxK" (global work-item index) and
// leaves local_size at 1 so an OpenCL launcher may let the driver choose the work-group size.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"
#include "engine/rewrite/graph_rewrite.h"
#include "engine/rewrite/pattern_matcher.h"

namespace kiln::codegen {
namespace {

void FlattenGroups(const UOpPtr& u, UOpVec& out) {
  if (u->op() == Op::GROUP) {
    for (const UOpPtr& s : u->src()) FlattenGroups(s, out);
  } else if (std::find(out.begin(), out.end(), u) == out.end()) {
    out.push_back(u);
  }
}

// Maps `axes` (loop-nest order) onto SPECIALs named prefix0..2; fills `sizes`, adds RANGE -> expression to `map`.
// When a dimension would exceed `limit` (0 = none), every axis is folded into dimension 0 instead.
absl::Status MapAxes(const std::vector<UOpPtr>& axes, const char* prefix, int64_t sizes[3],
                     const int64_t limit[3], absl::flat_hash_map<const UOp*, UOpPtr>& map) {
  if (axes.empty()) return absl::OkStatus();
  std::vector<int64_t> n;
  for (const UOpPtr& r : axes) {
    int64_t s = 0;
    if (!ConstInt(r->src(0), &s) || s <= 0)
      return absl::InvalidArgumentError("gpu dims: launch axes need a constant positive size");
    n.push_back(s);
  }
  const int count = static_cast<int>(axes.size());
  const int merged = std::max(0, count - 2);  // axes [0, merged) share dimension 2 when count > 3
  auto too_big = [&](int dim, int64_t size) {
    return limit != nullptr && limit[dim] > 0 && size > limit[dim];
  };
  bool fold = false;
  if (count <= 3) {
    for (int i = 0; i < count; ++i) fold |= too_big(count - 1 - i, n[i]);
  } else {
    int64_t outer = 1;
    for (int i = 0; i < merged; ++i) outer *= n[i];
    fold = too_big(2, outer) || too_big(1, n[count - 2]) || too_big(0, n[count - 1]);
  }
  auto special = [&](int dim, int64_t size) {
    sizes[dim] = size;
    return UOp::Make(Op::SPECIAL, dtypes::kIndex, {UOp::Const(dtypes::kIndex, size)},
                     absl::StrCat(prefix, dim));
  };
  if (fold) {
    int64_t total = 1;
    for (int64_t s : n) total *= s;
    if (too_big(0, total))
      return absl::InvalidArgumentError("gpu dims: the launch exceeds the target's grid");
    UOpPtr s0 = special(0, total);
    int64_t stride = total;
    for (int i = 0; i < count; ++i) {
      stride /= n[i];
      UOpPtr e = stride == 1 ? s0 : s0 / stride;
      if (i > 0) e = e % n[i];
      map.emplace(axes[i].get(), e);
    }
    return absl::OkStatus();
  }
  if (count <= 3) {
    for (int i = 0; i < count; ++i) map.emplace(axes[i].get(), special(count - 1 - i, n[i]));
    return absl::OkStatus();
  }
  int64_t total = 1;
  for (int i = 0; i < merged; ++i) total *= n[i];
  UOpPtr s2 = special(2, total);
  int64_t stride = total;
  for (int i = 0; i < merged; ++i) {
    stride /= n[i];
    UOpPtr e = stride == 1 ? s2 : s2 / stride;
    if (i > 0) e = e % n[i];
    map.emplace(axes[i].get(), e);
  }
  map.emplace(axes[count - 2].get(), special(1, n[count - 2]));
  map.emplace(axes[count - 1].get(), special(0, n[count - 1]));
  return absl::OkStatus();
}

// The launch-dim rules, keyed by the original RANGE nodes (RANGE -> its SPECIAL expression). They run top-down
// (RewriteOptions::bottom_up), so an END is seen with its original RANGE sources before they are replaced.
using LaunchMap = absl::flat_hash_map<const UOp*, UOpPtr>;

UOpPtr RangeToSpecial(const Bindings& b) {
  const LaunchMap& map = *b.ctx<LaunchMap>();
  auto it = map.find(b.root().get());
  return it == map.end() ? nullptr : it->second;
}

// Drops the launch axes from an END's ranges (they are no loops any more).
UOpPtr DropLaunchRanges(const Bindings& b) {
  const LaunchMap& map = *b.ctx<LaunchMap>();
  const UOpPtr& u = b.root();
  UOpVec vals, ranges;
  bool dropped = false;
  for (const UOpPtr& s : u->src()) {
    if (s->op() == Op::RANGE && map.contains(s.get())) {
      dropped = true;
    } else if (s->op() == Op::RANGE) {
      ranges.push_back(s);
    } else {
      vals.push_back(s);
    }
  }
  if (!dropped) return nullptr;
  if (ranges.empty()) return vals.size() == 1 ? vals[0] : UOp::Make(Op::GROUP, dtypes::kVoid, vals);
  for (const UOpPtr& r : ranges) vals.push_back(r);
  return u->WithSrc(vals);
}

UOpPtr FlattenSinkGroups(const Bindings& b) {
  const UOpPtr& u = b.root();
  UOpVec vals;
  for (const UOpPtr& s : u->src()) FlattenGroups(s, vals);
  return vals.size() == u->num_src() ? nullptr : UOp::Sink(vals);
}

const PatternMatcher& GpuDimsRules() {
  static const PatternMatcher pm({{UPat(Op::RANGE), RangeToSpecial, "range(launch axis) -> special index"},
                                  {UPat(Op::END), DropLaunchRanges, "end(v, launch r) -> v"},
                                  {UPat(Op::SINK), FlattenSinkGroups, "sink(group(a, b)) -> sink(a, b)"}},
                                 "gpu_dims");
  return pm;
}

}  // namespace

absl::StatusOr<UOpPtr> LowerGpuDims(const UOpPtr& sink, LowerContext& ctx) {
  // A target without work-groups (and a kernel with no launch axes) passes through: counted as a run of the table
  // that rewrote nothing, so the pass table lists every stage.
  auto unchanged = [&] {
    if (ctx.stats != nullptr) ctx.stats->AddPass("lower gpu dims", GpuDimsRules().name(), 0);
    return sink;
  };
  if (!ctx.target.has_local) return unchanged();
  // Axes of symbolic size (a Variable-bound batch; AxesOfType leaves them out) stay loops inside every work-item; the
  // rest become launch dims.
  std::vector<UOpPtr> globals = AxesOfType(sink, ctx, {AxisType::kLoop, AxisType::kGlobal});
  std::vector<UOpPtr> locals = AxesOfType(sink, ctx, {AxisType::kLocal, AxisType::kGroupReduce});
  absl::flat_hash_map<const UOp*, UOpPtr> map;
  for (int i = 0; i < 3; ++i) ctx.global_size[i] = ctx.local_size[i] = 1;
  KILN_RETURN_IF_ERROR(MapAxes(globals, locals.empty() ? "idx" : "gidx", ctx.global_size,
                               ctx.target.global_max, map));
  KILN_RETURN_IF_ERROR(MapAxes(locals, "lidx", ctx.local_size, nullptr, map));
  if (map.empty()) return unchanged();
  RewriteOptions o = ctx.PassOptions("lower gpu dims", /*walk=*/false);
  o.bottom_up = true;
  o.ctx = &map;
  KILN_ASSIGN_OR_RETURN(UOpPtr out, GraphRewrite(sink, GpuDimsRules(), o));
  // The removed ranges leave ctx.order (so later passes never look for them).
  for (const auto& [r, e] : map) {
    const int64_t id = std::get<AxisArg>(r->arg()).id;
    ctx.order.erase(std::remove(ctx.order.begin(), ctx.order.end(), id), ctx.order.end());
  }
  return out;
}

}  // namespace kiln::codegen
