// GPU kernel optimisations for targets with work-groups (has_local): LOCAL/GROUP legality, the lowering of grouped
// reduces through local memory, and the GPU hand-coded heuristic (tinygrad codegen/opt/heuristic.py, simplified).
// CPU targets never reach this file (ApplyOpt rejects LOCAL/GROUP without has_local; the CPU heuristic is opt.cc's).
#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {
namespace {

int64_t SizeOf(const UOpPtr& r) {
  int64_t v = 0;
  return ConstInt(r->src(0), &v) ? v : -1;
}

int64_t Product(const std::vector<UOpPtr>& axes) {
  int64_t p = 1;
  for (const UOpPtr& r : axes) p *= std::max<int64_t>(1, SizeOf(r));
  return p;
}

// True when some REDUCE sits inside the value of another REDUCE (a pool or conv followed by a sum in one kernel).
bool HasNestedReduce(const UOpPtr& sink) {
  for (const UOp* u : Toposort(sink)) {
    if (u->op() != Op::REDUCE || u->num_src() == 0) continue;
    for (const UOp* v : Toposort(u->src(0)))
      if (v->op() == Op::REDUCE) return true;
  }
  return false;
}

bool IsGroupRange(const UOp* u) {
  const auto* a = u->op() == Op::RANGE ? std::get_if<AxisArg>(&u->arg()) : nullptr;
  return a != nullptr && a->type == AxisType::kGroupReduce;
}

}  // namespace

absl::Status CheckLocalOpt(const UOpPtr& sink, const Opt& opt, int64_t amt,
                           const LowerContext& ctx) {
  const std::string what = opt.ToString();
  if (!ctx.target.has_local)
    return absl::InvalidArgumentError(
        absl::StrCat("opt ", what, ": target has no local memory/workgroups"));
  const int64_t now = Product(AxesOfType(sink, ctx, {AxisType::kLocal, AxisType::kGroupReduce}));
  const int64_t limit = std::max<int64_t>(1, ctx.target.max_local_size);
  if (now * amt > limit)
    return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": work-group of ", now * amt,
                                                   " items exceeds the target's ", limit));
  if (opt.op == OptOp::kGroup || opt.op == OptOp::kGroupTop) {
    if (!AxesOfType(sink, ctx, {AxisType::kGroupReduce}).empty())
      return absl::InvalidArgumentError(
          absl::StrCat("opt ", what, ": only one GROUP/GROUPTOP axis"));
    if (HasNestedReduce(sink))
      return absl::InvalidArgumentError(
          absl::StrCat("opt ", what, ": GROUP of a kernel with nested reduces"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UOpPtr> ApplyGpuHeuristic(const UOpPtr& sink, LowerContext& ctx,
                                         std::vector<Opt>* chosen) {
  UOpPtr cur = sink;
  auto apply = [&](Opt o) -> absl::Status {
    KILN_ASSIGN_OR_RETURN(cur, ApplyOpt(cur, o, ctx));
    chosen->push_back(o);
    return absl::OkStatus();
  };
  auto sizes = [&](std::initializer_list<AxisType> t) {
    std::vector<int64_t> s;
    for (const UOpPtr& r : AxesOfType(cur, ctx, t)) s.push_back(SizeOf(r));
    return s;
  };
  std::vector<int64_t> out = sizes({AxisType::kLoop, AxisType::kGlobal});
  std::vector<int64_t> red = sizes({AxisType::kReduce});
  if (std::any_of(out.begin(), out.end(), [](int64_t s) { return s < 0; }) ||
      std::any_of(red.begin(), red.end(), [](int64_t s) { return s < 0; }))
    return cur;  // symbolic sizes: leave the kernel as it is
  int64_t out_prod = 1;
  for (int64_t s : out) out_prod *= s;
  const int64_t max_local = std::max<int64_t>(1, ctx.target.max_local_size);

  // 0. Tensor cores first (tinygrad heuristic step 1; TC=0 disables): a kernel the TC opt accepts gets it, then its
  // M and N tile axes are upcast (4, else 2: one warp computes several 16 x 8 tiles and reuses fragments) and the
  // M tiles split over two warps per work-group; nothing else.
  if (GetKnob(Knob::kTc) > 0 && !ctx.target.tensor_cores.empty() && ctx.has_reduce) {
    LowerContext saved = ctx;
    absl::StatusOr<UOpPtr> tc = ApplyOpt(cur, {OptOp::kTc, 0, -1}, ctx);
    if (tc.ok()) {
      cur = *tc;
      chosen->push_back({OptOp::kTc, 0, -1});
      auto axis_of = [&](int64_t id) {
        std::vector<UOpPtr> axes = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
        for (size_t i = 0; i < axes.size(); ++i)
          if (std::get<AxisArg>(axes[i]->arg()).id == id) return std::make_pair(static_cast<int>(i), SizeOf(axes[i]));
        return std::make_pair(-1, int64_t{0});
      };
      for (int64_t id : {ctx.tc_n_axis, ctx.tc_m_axis}) {
        auto [i, size] = axis_of(id);
        for (int64_t u : {4, 2}) {
          if (i >= 0 && size % u == 0) {
            KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, i, u}));
            break;
          }
        }
      }
      auto [i, size] = axis_of(ctx.tc_m_axis);
      if (i >= 0 && size % 2 == 0 && 64 <= max_local) KILN_RETURN_IF_ERROR(apply({OptOp::kLocal, i, 2}));
      return cur;
    }
    ctx = saved;
  }

  // 1. Few outputs and a long reduce: split the first reduce axis across a work-group (tinygrad GROUPTOP 256/16).
  int64_t grouped = 1;
  if (ctx.has_reduce && !red.empty() && out_prod <= 2048 && !HasNestedReduce(cur)) {
    for (int64_t sz : {256, 16}) {
      if (sz <= max_local && red[0] % sz == 0 && red[0] >= 2 * sz) {
        KILN_RETURN_IF_ERROR(apply({OptOp::kGroupTop, 0, sz}));
        grouped = sz;
        break;
      }
    }
  }
  // 2. Upcasts: reduce kernels with two or more output axes get a 4x4 register tile and the last reduce axis
  // unrolled by 4; elementwise kernels upcast the innermost axis by 4.
  out = sizes({AxisType::kLoop, AxisType::kGlobal});
  if (grouped == 1 && !out.empty()) {
    const int last = static_cast<int>(out.size()) - 1;
    if (ctx.has_reduce && out.size() >= 2) {
      if (out[last] % 4 == 0 && out[last] >= 16)
        KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, last, 4}));
      if (out[last - 1] % 4 == 0 && out[last - 1] >= 16)
        KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, last - 1, 4}));
      red = sizes({AxisType::kReduce});
      if (!red.empty() && red.back() % 4 == 0 && red.back() >= 8)
        KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, static_cast<int>(red.size()) - 1, 4}));
    } else if (!ctx.has_reduce && out[last] % 4 == 0 && out[last] >= 64) {
      KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, last, 4}));
    }
  }
  // 3. Work-group sizes over the innermost output axes, at most 128 work-items (with the group's).
  out = sizes({AxisType::kLoop, AxisType::kGlobal});
  int64_t budget = std::min<int64_t>(128, max_local) / grouped;
  int used_dims = 0;
  for (int i = static_cast<int>(out.size()) - 1; i >= 0 && budget > 1 && used_dims < 3; --i) {
    for (int64_t l : {32, 16, 8, 4, 2}) {
      if (l <= budget && out[i] % l == 0) {
        KILN_RETURN_IF_ERROR(apply({OptOp::kLocal, i, l}));
        budget /= l;
        ++used_dims;
        break;
      }
    }
  }
  return cur;
}

absl::StatusOr<UOpPtr> LowerGroupReduces(const UOpPtr& sink, LowerContext& ctx) {
  if (!ctx.target.has_local) return sink;
  // Slots: one per grouped REDUCE, numbered per dtype.
  absl::flat_hash_map<const UOp*, int64_t> slot;
  absl::flat_hash_map<DType, int64_t> count;
  const UOp* group = nullptr;
  for (const UOp* u : Toposort(sink)) {
    if (u->op() != Op::REDUCE) continue;
    for (size_t i = 1; i < u->num_src(); ++i) {
      if (!IsGroupRange(u->src(i).get())) continue;
      if (group != nullptr && group != u->src(i).get())
        return absl::InvalidArgumentError("group reduces: more than one GROUP axis");
      group = u->src(i).get();
      slot.emplace(u, count[u->dtype()]++);
    }
  }
  if (group == nullptr) return sink;
  const int64_t g_size = SizeOf(UOpPtr::FromRaw(group));
  if (g_size <= 0)
    return absl::InvalidArgumentError("group reduces: the GROUP axis needs a constant size");
  // This work-item's position among the LOCAL output axes (row-major), so each output lane has its own slice.
  std::vector<UOpPtr> locals = AxesOfType(sink, ctx, {AxisType::kLocal});
  const int64_t l_prod = Product(locals);
  UOpPtr lid = UOp::Const(dtypes::kIndex, int64_t{0});
  for (const UOpPtr& r : locals) lid = lid * SizeOf(r) + r;
  absl::flat_hash_map<DType, UOpPtr> mem;
  for (const auto& [d, n] : count)
    mem[d] = UOp::Make(Op::DEFINE_LOCAL, d.Ptr(AddrSpace::kLocal), {}, n * g_size * l_prod);
  const UOpPtr g = UOpPtr::FromRaw(group);
  absl::flat_hash_set<UOpPtr> barriers;  // held: the second rewrite looks them up after the first one returned
  UOpPtr out = RewriteBottomUp(sink, [&](const UOp* orig, const UOpPtr& u) -> UOpPtr {
    auto it = slot.find(orig);
    if (it == slot.end()) return nullptr;
    UOpVec others{u->src(0)};
    for (size_t i = 1; i < u->num_src(); ++i)
      if (u->src(i) != g) others.push_back(u->src(i));
    const UOpPtr partial =
        others.size() == 1 ? u->src(0) : UOp::Make(Op::REDUCE, u->dtype(), others, u->arg());
    const UOpPtr& local = mem.at(u->dtype());
    const UOpPtr base = UOp::Const(dtypes::kIndex, it->second * g_size * l_prod) + lid * g_size;
    UOpPtr st = UOp::Make(Op::STORE, dtypes::kVoid,
                          {UOp::Make(Op::INDEX, local->dtype(), {local, base + g}), partial});
    UOpPtr bar = UOp::Make(Op::BARRIER, dtypes::kVoid, {st});
    barriers.insert(bar);
    const int64_t id = ctx.next_axis_id++;
    ctx.order.push_back(id);
    UOpPtr r2 = UOp::Make(Op::RANGE, dtypes::kIndex, {UOp::Const(dtypes::kIndex, g_size)},
                          AxisArg{id, AxisType::kReduce});
    UOpPtr after = UOp::Make(Op::AFTER, local->dtype(), {local, bar});
    UOpPtr ld =
        UOp::Make(Op::LOAD, u->dtype(), {UOp::Make(Op::INDEX, local->dtype(), {after, base + r2})});
    return UOp::Make(Op::REDUCE, u->dtype(), {ld, r2}, u->arg());
  });
  // Every work-item of the group computes the same result; only the first one stores it.
  const UOpPtr first = Eq(g, UOp::Const(dtypes::kIndex, int64_t{0}));
  return RewriteBottomUp(out, [&](const UOp*, const UOpPtr& u) -> UOpPtr {
    if (u->op() != Op::STORE || u->num_src() < 2 || u->src(0)->op() != Op::INDEX ||
        u->src(0)->src(0)->op() != Op::PARAM)
      return nullptr;
    bool grouped = false;
    for (const UOp* v : Toposort(u->src(1)))
      if (barriers.contains(UOpPtr::FromRaw(v))) grouped = true;
    if (!grouped) return nullptr;
    const UOpPtr& ix = u->src(0);
    UOpPtr gate =
        ix->num_src() == 3 ? UOp::Make(Op::AND, dtypes::kBool, {ix->src(2), first}) : first;
    UOpVec src(u->src().begin(), u->src().end());
    src[0] = UOp::Make(Op::INDEX, ix->dtype(), {ix->src(0), ix->src(1), gate}, ix->arg());
    return u->WithSrc(src);
  });
}

}  // namespace kiln::codegen
