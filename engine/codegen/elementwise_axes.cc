// Axis choices of the CPU heuristic (heuristic.cc) for elementwise kernels whose gates or selects decide the loop
// order and upcasts: a gated in-place store's gate-free axes innermost, and a stack of differently computed values
// upcast whole along its stacked axes. Declared in lower_context.h.
#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/base/status.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {
namespace {

// StackedAxesWhole's bounds: lanes upcast together, and one axis's size.
constexpr int64_t kMaxStackedLanes = 64;
constexpr int64_t kMaxStackedAxis = 8;

}  // namespace

// An elementwise kernel with a gated store (an in-place update of a few elements, kernel_builder's InPlaceWhere)
// whose gate varies along the innermost axis: the axes the gate does not read go innermost (ctx.order), so the gate
// is loop-invariant there and LLVM's unswitching skips those loops where it is false; the new innermost axis is
// upcast by up to 16 lanes, every one stored under the same gate. A transposed KV cache [S, H, D, M] written at one
// position m per slot: 393K predicated lanes (150 us per layer at 8 slots) became 6K gate checks (SmolLM2, 2-core
// Zen 5). Returns false (nothing changed) for other kernels.
absl::StatusOr<bool> GateFreeAxesInnermost(UOpPtr& cur, LowerContext& ctx, ApplyOptFn apply) {
  if (ctx.has_reduce) return false;
  const std::vector<UOpPtr> axes = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
  if (axes.empty()) return false;
  absl::flat_hash_set<const UOp*> gate_ranges;
  bool gated = false;
  for (const UOp* u : Toposort(cur)) {
    if (u->op() != Op::STORE || u->src(0)->op() != Op::INDEX || u->src(0)->num_src() != 3) continue;
    gated = true;
    for (const UOp* g : Toposort(u->src(0)->src(2)))
      if (g->op() == Op::RANGE) gate_ranges.insert(g);
  }
  auto in_gate = [&](const UOpPtr& a) { return gate_ranges.contains(a.get()); };
  if (!gated || !in_gate(axes.back()) || std::all_of(axes.begin(), axes.end(), in_gate)) return false;
  std::vector<int64_t> ids;  // the gate's axes, then the others, each in their loop order
  for (const UOpPtr& a : axes)
    if (in_gate(a)) ids.push_back(std::get<AxisArg>(a->arg()).id);
  for (const UOpPtr& a : axes)
    if (!in_gate(a)) ids.push_back(std::get<AxisArg>(a->arg()).id);
  std::vector<size_t> slots;  // the axes' places in ctx.order, refilled in the new order
  for (size_t i = 0; i < ctx.order.size(); ++i)
    for (const UOpPtr& a : axes)
      if (ctx.order[i] == std::get<AxisArg>(a->arg()).id) slots.push_back(i);
  if (slots.size() != ids.size()) return false;
  for (size_t i = 0; i < slots.size(); ++i) ctx.order[slots[i]] = ids[i];
  const std::vector<UOpPtr> now = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
  const int last = static_cast<int>(now.size()) - 1;
  const int64_t n = RangeSize(now[last].get());
  if (n > 1 && n <= 16) KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, last, 0}));
  else if (n % 16 == 0) KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, last, 16}));
  return true;
}

// An elementwise kernel that stacks a few differently computed values along small axes (Tensor::Stack, a pad and an
// add per value, or a select per value: Winograd's transforms in winograd.cc, 36 or 64 sums of a few terms each): the
// output axes that the loads' pad gates or the selects' conditions read, of at most kMaxStackedLanes lanes together, are upcast whole, leading axes first, so that
// every lane's gates fold to constants and it computes its own value only (a loop over them computed all 36 values,
// each under its gate, for every output). tinygrad's heuristic upcasts masked axes of up to 7 x 7 the same way.

absl::StatusOr<int64_t> StackedAxesWhole(UOpPtr& cur, LowerContext& ctx, ApplyOptFn apply) {
  if (ctx.has_reduce) return 1;
  absl::flat_hash_set<const UOp*> store_indices, gates;
  const std::vector<const UOp*> order = Toposort(cur);
  for (const UOp* u : order)
    if (u->op() == Op::STORE) store_indices.insert(u->src(0).get());
  for (const UOp* u : order) {
    if (u->op() == Op::INDEX && u->num_src() == 3 && !store_indices.contains(u)) gates.insert(u->src(2).get());
    if (u->op() == Op::WHERE) gates.insert(u->src(0).get());
  }
  if (gates.empty()) return 1;
  // How many distinct load gates and select conditions read each range: a stack of n values selects along its axis
  // n ways (or gates its loads so), a padded view's bounds one or two.
  absl::flat_hash_map<const UOp*, int64_t> readers;
  for (const UOp* g : gates)
    for (const UOp* r : Toposort(g->Ptr()))
      if (r->op() == Op::RANGE) ++readers[r];
  const std::vector<UOpPtr> axes = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
  std::vector<int64_t> ids;
  int64_t lanes = 1;
  for (const UOpPtr& a : axes) {
    const int64_t n = RangeSize(a.get());
    const auto it = readers.find(a.get());
    if (it == readers.end() || n < 2 || n > kMaxStackedAxis || it->second < n || lanes * n > kMaxStackedLanes)
      continue;
    ids.push_back(std::get<AxisArg>(a->arg()).id);
    lanes *= n;
  }
  // Upcast innermost-first by position, so the earlier positions stay valid.
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const std::vector<UOpPtr> now = AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal});
    for (size_t i = 0; i < now.size(); ++i)
      if (std::get<AxisArg>(now[i]->arg()).id == *it) {
        KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, static_cast<int>(i), 0}));
        break;
      }
  }
  return lanes;
}

}  // namespace kiln::codegen
