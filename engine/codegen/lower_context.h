// Internal to engine/codegen: the state the lowering passes share, and the pass functions themselves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/program.h"
#include "engine/rewrite/graph_rewrite.h"
#include "engine/uop/uop.h"

namespace kiln::codegen {

struct LowerContext {
  Target target;
  LowerOptions options;
  // Axis ids in loop-nest order (outermost first): output axes, then reduce axes. Split axes are inserted next to
  // the axis they came from.
  std::vector<int64_t> order;
  int64_t next_axis_id = 0;
  std::vector<std::string> applied_opts;
  std::string name;   // kernel name, set after opts
  int threads = 1;
  int64_t global_size[3] = {1, 1, 1};  // GPU launch dims (gpu_dims.cc): work-groups and work-items per group
  int64_t local_size[3] = {1, 1, 1};
  bool has_reduce = false;
  DType index_dtype = dtypes::kInt32;
  int64_t tc_m_axis = -1, tc_n_axis = -1;  // after the TC opt: the ids of the M-tile and N-tile output axes
  int64_t tc_k_axis = -1;                  // and of the k-slice reduce axis (CPU layout; -1: one slice)
  // UPCAST axis ids whose lanes ExpandUpcasts makes the fastest-varying copies of an END (in this order, the last
  // fastest), whatever their place in the loop nest: MatmulTile's lane axis. LLVM's SLP vectorizer packs runs of
  // consecutive accumulators into vectors, so those runs must be the lane axis's (not the row axis's) copies.
  std::vector<int64_t> lanes_last;
  bool no_gather = false;  // Program::no_gather
  bool strided_loads = false;  // Program::strided_loads
  int slp_max_vf = 0;          // Program::slp_max_vf
  RewriteStats* stats = nullptr;  // where the passes count their rule hits (LowerOptions::stats, or DEBUG's own)

  // GraphRewrite options for a rule-table stage: named `pass`, this context as the rules' ctx, counted in `stats`.
  RewriteOptions PassOptions(const char* pass, bool walk) {
    RewriteOptions o;
    o.name = pass;
    o.walk = walk;
    o.ctx = this;
    o.stats = stats;
    return o;
  }

  // Position of an axis id in `order` (ids not in it sort after every known one, by id).
  int64_t OrderOf(int64_t id) const;
  int64_t OrderOf(const UOp* range) const;
};

// ---- opt.cc ----
// Validates the AST's shape (SINK of END/STORE) and fills ctx.order / next_axis_id / has_reduce.
absl::Status InitAxes(const UOpPtr& sink, LowerContext& ctx);
// The RANGE nodes of the kernel with one of `types`, in loop-nest order. Output axes of symbolic size (a row count
// bound at run time, Tensor::Rows) are left out unless `symbolic`: opts never split them, so they stay plain loops
// around the optimized rest (and inside every work-item on GPUs).
std::vector<UOpPtr> AxesOfType(const UOpPtr& sink, const LowerContext& ctx, std::initializer_list<AxisType> types,
                               bool symbolic = false);
absl::StatusOr<UOpPtr> ApplyOpt(const UOpPtr& sink, const Opt& opt, LowerContext& ctx);
// A RANGE's constant size, -1 when symbolic.
int64_t RangeSize(const UOp* r);

// ---- heuristic.cc ----
// Picks and applies the hand-coded heuristic's opts; appends them to `chosen`.
absl::StatusOr<UOpPtr> ApplyHeuristic(const UOpPtr& sink, LowerContext& ctx, std::vector<Opt>* chosen);
// "E_4_16" / "r_16_4_32" from the current axes.
std::string KernelName(const UOpPtr& sink, const LowerContext& ctx);

// ---- elementwise_axes.cc (steps of ApplyHeuristic) ----
// Applies one opt to the heuristic's current kernel and records it.
using ApplyOptFn = absl::FunctionRef<absl::Status(Opt)>;
// A gated in-place store whose gate varies along the innermost axis: the axes the gate does not read go innermost
// and the new innermost axis is upcast; false (nothing changed) for other kernels.
absl::StatusOr<bool> GateFreeAxesInnermost(UOpPtr& cur, LowerContext& ctx, ApplyOptFn apply);
// A stack of differently computed values (Tensor::Stack, Winograd's transforms): the small output axes its load gates
// or select conditions read are upcast whole, so every lane folds to its own value. Returns the lanes upcast (1: none).
absl::StatusOr<int64_t> StackedAxesWhole(UOpPtr& cur, LowerContext& ctx, ApplyOptFn apply);

// ---- expand.cc ----
absl::StatusOr<UOpPtr> ExpandUpcasts(const UOpPtr& sink, LowerContext& ctx);

// ---- narrow.cc ----
// Reduce loops whose every ADD term is 0 outside a window of the loop (a padded view's gate, `lo <= r + f < hi`)
// run over that window only, and the window's conditions leave the gates.
absl::StatusOr<UOpPtr> NarrowGatedReduces(const UOpPtr& sink, LowerContext& ctx);
// A sum over r of values that are 0 unless r == e (e fixed outside the reduce: a one-hot gather) becomes the value
// at r = e, 0 when e is outside the range.
absl::StatusOr<UOpPtr> CollapseOneHotReduces(const UOpPtr& sink, LowerContext& ctx);

// ---- reduce.cc ----
absl::StatusOr<UOpPtr> LowerReduces(const UOpPtr& sink, LowerContext& ctx);
absl::StatusOr<UOpPtr> LowerThreads(const UOpPtr& sink, LowerContext& ctx);
// Splits multi-range ENDs into nested single-range ENDs and merges ENDs closing the same range.
absl::StatusOr<UOpPtr> NormalizeEnds(const UOpPtr& sink, LowerContext& ctx);

// ---- gpu_opt.cc ----
// LOCAL/GROUP/GROUPTOP legality: the target has work-groups, the work-group stays within max_local_size, at most one
// GROUP axis, and GROUP only on kernels whose reduces are not nested in another reduce.
absl::Status CheckLocalOpt(const UOpPtr& sink, const Opt& opt, int64_t amt, const LowerContext& ctx);
// The GPU hand-coded heuristic (tinygrad hand_coded_optimizations, simplified) for has_local targets.
absl::StatusOr<UOpPtr> ApplyGpuHeuristic(const UOpPtr& sink, LowerContext& ctx, std::vector<Opt>* chosen);
// GROUP/GROUPTOP reduces -> per-work-item partial reduce, local memory, BARRIER, final reduce; output stores gated
// to the first work-item of the group.
absl::StatusOr<UOpPtr> LowerGroupReduces(const UOpPtr& sink, LowerContext& ctx);

// ---- tc.cc ----
// The TC opt (codegen.h OptOp::kTc): InvalidArgument naming the reason when the kernel or target does not qualify.
absl::StatusOr<UOpPtr> ApplyTensorCore(const UOpPtr& sink, const Opt& opt, LowerContext& ctx);
// The CPU heuristic's first step (TC=0 disables): a kernel the TC opt accepts on the CPU's integer tensor core gets
// it and a register tile over its rows and column tiles; false (nothing applied) when the opt does not apply.
absl::StatusOr<bool> ApplyCpuTensorCore(UOpPtr& cur, LowerContext& ctx, std::vector<Opt>* chosen);
// After "lower reduces": a WMMA whose lanes are only added to accumulators takes them as its C operand.
absl::StatusOr<UOpPtr> FoldWmmaAccumulators(const UOpPtr& sink, LowerContext& ctx);

// ---- gpu_dims.cc ----
// Targets with has_local: global and local axes -> SPECIAL gidx/idx/lidx; fills ctx.global_size/local_size.
absl::StatusOr<UOpPtr> LowerGpuDims(const UOpPtr& sink, LowerContext& ctx);

// ---- lower_index.cc ----
absl::StatusOr<UOpPtr> LowerIndexDType(const UOpPtr& sink, LowerContext& ctx);
absl::StatusOr<UOpPtr> MoveGates(const UOpPtr& sink, LowerContext& ctx);
absl::StatusOr<UOpPtr> GuardDivision(const UOpPtr& sink, LowerContext& ctx);

// ---- vector_loads.cc ----
// Targets with supports_vectors: a run of >= 4 plain scalar loads of consecutive elements of a buffer the kernel
// does not store to, two or more of which one stored value reads (a pool window), becomes vector LOADs (power-of-two
// widths up to 32), each scalar load a GEP of its lane.
absl::StatusOr<UOpPtr> VectorizeLoads(const UOpPtr& sink, LowerContext& ctx);

// ---- vector_lanes.cc ----
// LLVM targets (supports_vectors, no work-groups): lane copies that several lane-wise computations share (a batched
// decode's dequantized weights, one multiply-add per slot) become vector ops, each copy a GEP of its lane. Only in
// kernels that read a narrow (< 32-bit) buffer in runs of 16 consecutive elements and share such a value.
absl::StatusOr<UOpPtr> VectorizeSharedLanes(const UOpPtr& sink, LowerContext& ctx);

// ---- vector_accumulators.cc ----
// LLVM targets: runs of 16, 8 or 4 stores to consecutive accumulator slots whose values are one expression lane by
// lane (the lanes of an upcast reduce) become one vector load, op and store of those slots; a chain summing 4..64
// consecutive slots after their loop becomes a vector load and a tree of halves.
absl::StatusOr<UOpPtr> VectorizeAccumulators(const UOpPtr& sink, LowerContext& ctx);

// ---- linearize.cc ----
// The linear order of every node under `sink` (SINK itself excluded), per docs/kernel-ir.md §3.
absl::StatusOr<std::vector<UOpPtr>> Linearize(const UOpPtr& sink, const LowerContext& ctx);

}  // namespace kiln::codegen
