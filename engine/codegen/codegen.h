// Codegen: a kernel AST (docs/kernel-ir.md §2) lowered to a linear program (§3).
//
// LowerKernel runs a straight list of named passes (kLowerPasses in lower.cc):
//   "initial symbolic"  INDEX indices/gates and RANGE ends through engine/symbolic Simplify, plus index folding
//   "collapse one-hot reduces" sum over r of where(r == e, x, 0) with e fixed outside the reduce (an embedding
//                       lookup / Gather) -> x at r = clamp(e), 0 where e is outside [0, n) (narrow.cc)
//   "apply opts"        explicit LowerOptions::opts, else the hand-coded heuristic unless NOOPT=1 (the GPU one,
//                       gpu_opt.cc, for has_local targets: TC first when the target has tensor cores and TC != 0);
//                       names the kernel
//   "expand upcasts"    UPCAST/UNROLL ranges replicated into straight-line code, one copy of the body per lane
//                       (LLVM's SLP vectorizer turns the copies into vector code; no VECTORIZE/GEP are produced)
//   "postopt symbolic"  as above
//   "lower group reduces" has_local targets: a REDUCE over a GROUP axis -> per-work-item partial REDUCE, STORE into
//                       DEFINE_LOCAL, BARRIER, a REDUCE over the partials; output stores gated to group item 0
//   "lower reduces"     REDUCE -> DEFINE_REG accumulator + loop
//   "fold wmma accumulators" TC kernels: acc[k_i] += GEP(WMMA(A, B, 0), i) -> the accumulators are WMMA's C
//   "lower threads"     THREAD range -> SPECIAL("core_id"); Program.threads = its size
//   "lower gpu dims"    has_local targets: output axes -> SPECIAL gidx/idx, LOCAL/GROUP axes -> lidx; fills
//                       Program.global_size (work-groups) and local_size (work-items per group); see gpu_dims.cc
//   "normalize ends"    one single-range END per RANGE
//   "final symbolic"    as above
//   "lower index dtype" index -> int32, or int64 when some index value may leave int32
//   "move gates"        gated INDEX -> gated LOAD/STORE
//   "guard division"    integer div/mod guards (below)
// then Linearize. Each pass is recorded in the rewrite trace (TRACK_MATCH_STATS >= 2, VIZ) under its name; in debug
// builds the kernel spec verifier (engine/rewrite/spec.h) runs on the input and after every pass; DEBUG >= 6 prints
// the graph after each pass, DEBUG >= 5 each pass's rule counters (RewriteStats::Format) and DEBUG >= 3 the applied
// opts. Stages that are rule tables run through GraphRewrite under the stage's name (each table a PatternMatcher
// named after it, e.g. "move_gates"); the others are imperative and listed in the counters as "[imperative]" without rule rows.
// LowerOptions::hooks adds user tables before or after any stage (ExtraRules below).
//
// Output conventions (in addition to docs/kernel-ir.md §3):
//  - Accumulators: one DEFINE_REG per accumulator dtype, arg = number of accumulators of that dtype; each reduce
//    uses its own element INDEX(reg, k). Ordering between accumulator loads/stores is carried by AFTER nodes:
//    AFTER(reg, deps...) is a value alias of src[0] (the renderer treats it as src[0]); it appears in `uops`.
//  - Gates live on the LOAD/STORE, never on the INDEX: LOAD(INDEX(p, i), alt, gate), STORE(INDEX(p, i), v, gate).
//  - Every RANGE has exactly one END(values..., RANGE) later in the list; END's last source is its RANGE.
//  - Integer CDIV/CMOD/FLOORDIV/FLOORMOD whose divisor is not provably non-zero are guarded in the graph:
//    WHERE(d==0, 0, x / WHERE(d==0, 1, d)); signed divisors that may be -1 are guarded the same way
//    (x / -1 = 0 - x with wraparound, x % -1 = 0), so no backend traps on INT_MIN / -1 either.
//  - Program.name: "E_" (no reduce) or "r_" followed by the axis sizes after opts (tinygrad, without colors):
//    the THREAD axis first, then by axis type (global, local, loop, group, reduce, upcast, unroll), each type in
//    loop-nest order; e.g. "E_4_16", "r_16_4_32"; UPCAST(1,4) on E_4_16 gives "E_4_4_4".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/codegen/program.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/rewrite_stats.h"
#include "engine/uop/uop.h"

namespace kiln::codegen {

// What the renderer/device can do; the heuristic and opt checks read it.
struct Target {
  std::string renderer = "interp";  // "llvm", "opencl", "cuda", "interp", ...
  bool has_threads = false;         // CPU THREAD opt (core_id)
  int max_threads = 1;
  bool has_local = false;           // workgroups (GPUs)
  int max_upcast = 8;               // heuristic upper bound on the product of upcast sizes
  bool supports_vectors = false;    // vector LOADs and GEPs render (the "vectorize loads" pass)
  int vector_bytes =
      16;  // SIMD register width (RendererCaps::vector_bytes); sizes matmul register tiles
  int64_t max_local_size = 1;
  // Index math in 64 bits even when 32 would hold it. On the CPU, i32 offsets are sign-extended per lane before the
  // GEP, which hides from LLVM that the lanes of an upcast load are consecutive (it emits scalar loads and inserts
  // instead of one vector load); i64 offsets keep them visibly consecutive.
  bool wide_index = false;
  int64_t global_max[3] = {0, 0, 0};  // has_local targets: the most work-groups per launch dim (0 = no limit)
  // Tensor-core shapes the renderer can emit (RendererCaps::tensor_cores); empty = no TC opt.
  std::vector<TensorCore> tensor_cores;
};

// The kernel optimisations (tinygrad OptOps). The axis of UPCAST/THREAD/LOCAL counts the kernel's current output
// (loop) axes in loop-nest order; the axis of UNROLL/GROUP/GROUPTOP counts its current reduce axes. arg = split
// amount (0 = the whole axis).
// ACC (CPU): split a reduce axis into `arg` lanes that each keep their own accumulator through the reduce loop
// and are summed once after it (vector accumulators when the axis is contiguous in the loads).
// TC (tinygrad's TC): must be the first opt; arg = index into Target::tensor_cores (-1 = the first whose input
// dtypes match), axis must be 0. Applies to a kernel whose single REDUCE is an ADD (in the TC's accumulator dtype)
// over one reduce axis of MUL(a, b) with a and b in the TC's input dtypes (or CAST to the accumulator dtype from
// them; the operands are taken in either order), where a depends on an output axis M that b does not, b on an output
// axis N that a does not, and M, N, K are divisible by the TC's m, n, k. GPUs: the kernel is rewritten so that each
// warp (a new LOCAL axis of `threads` work-items, the innermost one, so it becomes lidx0) computes an m x n tile per
// WMMA, per k-slice of the reduce. The CPU's integer dot product (m1n16k4, one work-item) needs no M axis (a
// matrix-vector product), and reduces around the product's (a block-scaled sum) may stay. See tc.cc.
enum class OptOp : uint8_t { kUpcast, kUnroll, kThread, kLocal, kGroup, kGroupTop, kAcc, kTc };
std::string_view OptOpName(OptOp op);

struct Opt {
  OptOp op = OptOp::kUpcast;
  int axis = 0;
  int64_t arg = 0;
  std::string ToString() const;  // "UPCAST(0,4)"
  friend bool operator==(const Opt& a, const Opt& b) {
    return a.op == b.op && a.axis == b.axis && a.arg == b.arg;
  }
};

// ---- extension point: a user's rule table before or after a named stage ----
// A stage name is one of LowerStageNames() ("lower reduces", "lower index dtype", ...). The table runs through
// GraphRewrite on the whole kernel graph at that point, under the pass name `name` (default "<stage> [before]" /
// "<stage> [after]"), so its rule hits show in LowerOptions::stats and in DEBUG>=5 output like the built-in
// tables'. Hooks at one point run in the order given. The rules see the graph as the stage leaves it (before
// "lower index dtype" indices are `index`-typed, after it int32/int64; see the stage list above) and must keep it
// valid for the stages that follow (debug builds run the spec verifier after a hook as after any stage). Example
// (the test "middleware" case): a*1.0 -> a+a after "expand upcasts":
//   PassHooks hooks;
//   hooks.rules.push_back({"expand upcasts", ExtraRules::At::kAfter, "middleware",
//                          std::make_shared<PatternMatcher>(std::vector<Rule>{{UPat::Var("a", dtypes::kFloat32) * 1.0,
//                              [](const Bindings& b) { return b["a"] + b["a"]; }, "a*1.0 -> a+a"}}, "middleware")});
struct ExtraRules {
  enum class At : uint8_t { kBefore, kAfter };
  std::string stage;
  At at = At::kAfter;
  std::string name;                              // pass name; "" = "<stage> [before]" / "<stage> [after]"
  std::shared_ptr<const PatternMatcher> rules;   // must be non-null
  bool walk = false;                             // GraphRewrite mode: false = fixed point (default), true = one walk
};
struct PassHooks {
  std::vector<ExtraRules> rules;
};
// The names of the lowering stages, in order.
std::vector<std::string_view> LowerStageNames();

struct LowerOptions {
  // When set, exactly these opts are applied (an illegal one is an InvalidArgument error) and the heuristic is
  // not run. When unset, the heuristic chooses unless NOOPT=1.
  bool use_explicit_opts = false;
  std::vector<Opt> opts;
  // User rule tables around named stages (null = none). An unknown stage or a null table is InvalidArgument.
  const PassHooks* hooks = nullptr;
  // Caller-owned counters: every stage and hook adds its pass row and rule hits (null = not counted).
  RewriteStats* stats = nullptr;
};

// Lowers one kernel AST (a SINK per docs/kernel-ir.md §2) for `target`. Errors: InvalidArgument for malformed
// ASTs and illegal opts (LOCAL/GROUP/GROUPTOP on a target without has_local, a work-group above max_local_size, a
// second GROUP axis), Internal for invariant failures. Never aborts on bad input.
absl::StatusOr<Program> LowerKernel(const UOpPtr& kernel_ast, const Target& target,
                                    const LowerOptions& options = {});

// The opts the hand-coded heuristic picks for a kernel (for tests and DEBUG).
absl::StatusOr<std::vector<Opt>> HeuristicOpts(const UOpPtr& kernel_ast, const Target& target);

}  // namespace kiln::codegen
