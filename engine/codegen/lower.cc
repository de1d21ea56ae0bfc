// LowerKernel: the straight list of named passes, then linearize and fill in the Program's launch/buffer info.
#include <algorithm>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"
#include "engine/rewrite/spec.h"
#include "engine/rewrite/trace.h"
#include "engine/symbolic/symbolic.h"
#include "engine/uop/printer.h"

namespace kiln::codegen {
namespace {

using PassFn = absl::StatusOr<UOpPtr> (*)(const UOpPtr&, LowerContext&);
struct Pass {
  const char* name;
  PassFn fn;
};

// Index math only: every INDEX's index and gate, and every RANGE's end, through engine/symbolic's Simplify; then the
// local folder over the whole kernel (index-dtype and bool constants only, so data math keeps its exact per-dtype
// semantics for the device).
absl::StatusOr<UOpPtr> SymbolicPass(const UOpPtr& sink, LowerContext&) {
  UOpPtr out = RewriteBottomUp(sink, [](const UOp*, const UOpPtr& u) -> UOpPtr {
    if (u->op() != Op::INDEX && u->op() != Op::RANGE) return nullptr;
    UOpVec src(u->src().begin(), u->src().end());
    bool changed = false;
    for (size_t i = u->op() == Op::INDEX ? 1 : 0; i < src.size(); ++i) {
      UOpPtr s = Simplify(src[i]);
      changed |= s != src[i];
      src[i] = s;
    }
    return changed ? u->WithSrc(src) : nullptr;
  });
  return FoldIndexMath(out);
}

absl::StatusOr<UOpPtr> ApplyOpts(const UOpPtr& sink, LowerContext& ctx) {
  UOpPtr cur = sink;
  if (ctx.options.use_explicit_opts) {
    for (const Opt& o : ctx.options.opts) {
      KILN_ASSIGN_OR_RETURN(cur, ApplyOpt(cur, o, ctx));
    }
  } else if (GetKnob(Knob::kNoOpt) == 0) {
    std::vector<Opt> chosen;
    // GPU targets (work-groups) have their own heuristic (gpu_opt.cc); CPU targets keep opt.cc's.
    if (ctx.target.has_local) {
      KILN_ASSIGN_OR_RETURN(cur, ApplyGpuHeuristic(cur, ctx, &chosen));
    } else {
      KILN_ASSIGN_OR_RETURN(cur, ApplyHeuristic(cur, ctx, &chosen));
    }
  }
  ctx.name = KernelName(cur, ctx);
  return cur;
}

// The lowering passes, in order (tinygrad codegen/__init__.py, adapted).
constexpr Pass kLowerPasses[] = {
    {"initial symbolic", SymbolicPass},
    {"apply opts", ApplyOpts},
    {"expand upcasts", ExpandUpcasts},
    {"postopt symbolic", SymbolicPass},
    {"narrow gated reduces", NarrowGatedReduces},
    {"lower group reduces", LowerGroupReduces},
    {"lower reduces", LowerReduces},
    {"fold wmma accumulators", FoldWmmaAccumulators},
    {"lower threads", LowerThreads},
    {"lower gpu dims", LowerGpuDims},
    {"normalize ends", NormalizeEnds},
    {"final symbolic", SymbolicPass},
    {"lower index dtype", LowerIndexDType},
    {"move gates", MoveGates},
    {"guard division", GuardDivision},
    {"vectorize loads", VectorizeLoads},
};

absl::Status FillProgramInfo(const LowerContext& ctx, Program& p) {
  Bounds bounds;
  absl::flat_hash_map<int64_t, BufferParam> bufs;
  absl::flat_hash_map<const UOp*, int64_t> slot_of;
  for (const UOpPtr& u : p.uops) {
    if (u->op() == Op::PARAM) {
      const int64_t* slot = std::get_if<int64_t>(&u->arg());
      if (slot == nullptr || !u->dtype().is_ptr) return absl::InvalidArgumentError("kernel AST: PARAM needs a pointer dtype and a slot");
      if (bufs.contains(*slot)) return absl::InvalidArgumentError(absl::StrCat("kernel AST: two PARAMs with slot ", *slot));
      BufferParam b;
      b.slot = *slot;
      b.dtype = u->dtype().Base();
      bufs.emplace(*slot, b);
      slot_of.emplace(u.get(), *slot);
    } else if (u->op() == Op::INDEX) {
      auto it = slot_of.find(u->src(0).get());
      if (it == slot_of.end()) continue;
      auto [lo, hi] = bounds.Of(u->src(1));
      BufferParam& b = bufs.at(it->second);
      int64_t need = hi >= std::numeric_limits<int64_t>::max() - 16 ? 0 : hi + 1;
      b.size = std::max(b.size, need);
    } else if (u->op() == Op::STORE) {
      const UOp* ix = u->src(0).get();
      if (ix->op() == Op::INDEX) {
        auto it = slot_of.find(ix->src(0).get());
        if (it != slot_of.end()) bufs.at(it->second).is_output = true;
      }
    } else if (u->op() == Op::DEFINE_VAR) {
      p.vars.push_back(u);
    }
  }
  for (auto& [slot, b] : bufs) p.buffers.push_back(b);
  std::sort(p.buffers.begin(), p.buffers.end(), [](const BufferParam& a, const BufferParam& b) { return a.slot < b.slot; });
  std::stable_sort(p.vars.begin(), p.vars.end(), [](const UOpPtr& a, const UOpPtr& b) {
    return std::get<VarArg>(a->arg()).name < std::get<VarArg>(b->arg()).name;
  });
  // Estimates: ALU ops on data (not index math) times the trip counts of their loops.
  std::vector<int64_t> mult{std::max(1, ctx.threads)};
  for (const UOpPtr& u : p.uops) {
    if (u->op() == Op::RANGE) {
      int64_t n = 1;
      ConstInt(u->src(0), &n);
      mult.push_back(mult.back() * std::max<int64_t>(n, 1));
    } else if (u->op() == Op::END) {
      if (mult.size() > 1) mult.pop_back();
    } else if (IsALU(u->op()) && u->dtype().scalar != ctx.index_dtype.scalar && !u->dtype().IsBool()) {
      p.flops += mult.back();
    }
  }
  for (const BufferParam& b : p.buffers) p.mem_bytes += b.size * b.dtype.ItemSize();
  return absl::OkStatus();
}

absl::StatusOr<UOpPtr> RunPasses(const UOpPtr& ast, LowerContext& ctx) {
  KILN_RETURN_IF_ERROR(InitAxes(ast, ctx));
  const bool dump = DebugLevel() >= 6;
  const bool trace = GetKnob(Knob::kTrackMatchStats) >= 2;
#ifndef NDEBUG
  KILN_RETURN_IF_ERROR(VerifyKernel(ast));
#endif
  UOpPtr cur = ast;
  for (const Pass& pass : kLowerPasses) {
    const int64_t id = trace ? RewriteTrace::Get().BeginPass(pass.name, "codegen", "walk", cur) : 0;
    absl::StatusOr<UOpPtr> next = pass.fn(cur, ctx);
#ifndef NDEBUG
    // The spec verifier between passes (debug and test builds); a failure here is a codegen bug.
    if (next.ok()) {
      if (absl::Status st = VerifyKernel(*next); !st.ok())
        next = absl::InternalError(absl::StrCat("after codegen pass '", pass.name, "': ", st.message()));
    }
#endif
    if (trace) RewriteTrace::Get().EndPass(id, next.ok() ? *next : UOpPtr(), next.ok(),
                                           next.ok() ? "" : std::string(next.status().message()));
    if (!next.ok()) return next.status();
    cur = *std::move(next);
    if (dump) std::fprintf(stderr, "=== codegen pass '%s' ===\n%s", pass.name, PrintGraph(cur).c_str());
  }
  return cur;
}

}  // namespace

absl::StatusOr<Program> LowerKernel(const UOpPtr& kernel_ast, const Target& target, const LowerOptions& options) {
  LowerContext ctx;
  ctx.target = target;
  ctx.options = options;
  KILN_ASSIGN_OR_RETURN(UOpPtr sink, RunPasses(kernel_ast, ctx));
  Program p;
  p.name = ctx.name;
  KILN_ASSIGN_OR_RETURN(p.uops, Linearize(sink, ctx));
  p.threads = ctx.threads;
  for (int i = 0; i < 3; ++i) {
    p.global_size[i] = ctx.global_size[i];
    p.local_size[i] = ctx.local_size[i];
  }
  p.applied_opts = ctx.applied_opts;
  p.no_gather = ctx.no_gather;
  KILN_RETURN_IF_ERROR(FillProgramInfo(ctx, p));
  // Every buffer of the kernel stays a parameter, read or not: the launch passes the schedule's buffers,
  // and a body simplified past one of them (where(c, x, x) -> x drops c's buffer) would otherwise be
  // rendered with fewer parameters than it is given (found by the differential test).
  bool added = false;
  for (const UOp* u : Toposort(kernel_ast)) {
    if (u->op() != Op::PARAM || !u->dtype().is_ptr) continue;
    const int64_t* slot = std::get_if<int64_t>(&u->arg());
    if (slot == nullptr) continue;
    if (std::any_of(p.buffers.begin(), p.buffers.end(), [&](const BufferParam& b) { return b.slot == *slot; }))
      continue;
    BufferParam b;
    b.slot = *slot;
    b.dtype = u->dtype().Base();
    p.buffers.push_back(b);
    added = true;
  }
  if (added) {
    std::sort(p.buffers.begin(), p.buffers.end(),
              [](const BufferParam& a, const BufferParam& b) { return a.slot < b.slot; });
  }
  if (DebugLevel() >= 3) {
    std::fprintf(stderr, "%s opts: [%s]\n", p.name.c_str(), absl::StrJoin(p.applied_opts, ", ").c_str());
  }
  return p;
}

absl::StatusOr<std::vector<Opt>> HeuristicOpts(const UOpPtr& kernel_ast, const Target& target) {
  LowerContext ctx;
  ctx.target = target;
  KILN_RETURN_IF_ERROR(InitAxes(kernel_ast, ctx));
  UOpPtr cur = FoldIndexMath(kernel_ast);
  std::vector<Opt> chosen;
  if (target.has_local) {
    KILN_ASSIGN_OR_RETURN(cur, ApplyGpuHeuristic(cur, ctx, &chosen));
  } else {
    KILN_ASSIGN_OR_RETURN(cur, ApplyHeuristic(cur, ctx, &chosen));
  }
  return chosen;
}

}  // namespace kiln::codegen
