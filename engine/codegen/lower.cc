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
#include "engine/rewrite/graph_rewrite.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/spec.h"
#include "engine/rewrite/trace.h"
#include "engine/symbolic/range.h"
#include "engine/symbolic/symbolic.h"
#include "engine/uop/printer.h"

namespace kiln::codegen {
namespace {

using PassFn = absl::StatusOr<UOpPtr> (*)(const UOpPtr&, LowerContext&);
struct Pass {
  const char* name;
  PassFn fn;
  bool table = false;  // fn runs rule tables through GraphRewrite under `name` (which counts and traces them)
};

// Whether `c` is a comparison of index values, or AND / OR of such (a padded view's bounds on one axis).
bool IndexPredicate(const UOp& c) {
  if (IsComparison(c.op())) return c.src(0)->dtype() == dtypes::kIndex;
  if (c.op() != Op::AND && c.op() != Op::OR) return false;
  return c.dtype().IsBool() && IndexPredicate(*c.src(0)) && IndexPredicate(*c.src(1));
}

// WHERE(index predicate, a, b) whose predicate folds to a constant -> the branch it picks.
UOpPtr PickConstantBranch(const Bindings& b) {
  const UOpPtr& u = b.root();
  const UOpPtr& c = u->src(0);
  if (!IndexPredicate(*c)) return nullptr;
  // Constant operands fold without the solver.
  UOpPtr s = FoldIndexMath(c);
  if (s->op() != Op::CONST) s = Simplify(c);
  const bool* v = s->op() == Op::CONST ? std::get_if<bool>(&s->arg()) : nullptr;
  if (v == nullptr) return nullptr;
  return *v ? u->src(1) : u->src(2);
}

// The same fold alone, applied top-down before the tables below: a select chain over an upcast axis (Winograd's
// stacked transforms, 36 lanes x 36 slots) drops its dead branches before their indices are simplified one by one.
const PatternMatcher& ConstantBranchRules() {
  static const PatternMatcher pm({{UPat(Op::WHERE), PickConstantBranch, "where(constant index predicate) -> branch"}},
                                 "constant_branches");
  return pm;
}

// "symbolic_indices": every INDEX's index and gate, every RANGE's end, and every index read as a value
// (CAST(index -> int): Arange, a random-init hash's counter) through engine/symbolic's Simplify. Without the last, a
// 4-D weight's init kernel whose axes the opts merged into one kept the unravel/ravel chain
// ((i/5/5/32)*800 + ((i/5/5)%32)*25 + ...) as 16 lanes of 64-bit divisions: slow to run, and the bulk of what LLVM
// spent on the CNN's init kernels. Comparisons of indices (gates) stay as built: the gate passes read their shape
// (narrow gated reduces; simplified, a transposed conv's gates on OpenCL no longer linearized). One exception: a
// WHERE whose condition is an index comparison that simplifies to a constant becomes the branch it picks (a padded
// constant selector after its axis is unrolled: GGUF's Q4 nibble choice, tests LowerTest.NibbleSelect...).
const PatternMatcher& SymbolicIndexRules() {
  static const PatternMatcher pm(
      {{UPat(OpSet{Op::INDEX, Op::RANGE}),
        [](const Bindings& b) -> UOpPtr {
          const UOpPtr& u = b.root();
          UOpVec src(u->src().begin(), u->src().end());
          bool changed = false;
          for (size_t i = u->op() == Op::INDEX ? 1 : 0; i < src.size(); ++i) {
            UOpPtr s = Simplify(src[i]);
            changed |= s != src[i];
            src[i] = s;
          }
          return changed ? u->WithSrc(src) : nullptr;
        },
        "index/range sources -> Simplify(sources)"},
       {UPat(Op::CAST).Src({UPat::Var("x", dtypes::kIndex)}),
        [](const Bindings& b) -> UOpPtr {
          if (b.root()->dtype() == dtypes::kIndex || b["x"]->num_src() == 0) return nullptr;
          // Sym()'s distribution too: (3*i + i/5)*5 + i%5 is 16*i only once the product is spread.
          UOpPtr s = GraphRewriteOrDie(b["x"], Sym(), {.name = "simplify", .traced = false});
          return s != b["x"] ? b.root()->WithSrc({s}) : nullptr;
        },
        "cast(index) -> cast(Sym(index))"},
       {UPat(Op::WHERE), PickConstantBranch, "where(index comparison that folds to a constant) -> the branch it picks"},
       // A gate that folded: true drops it, false makes the load its alternative value (0).
       {UPat(Op::INDEX).Src({UPat::Var("p"), UPat::Var("i"), UPat::CVar("g", dtypes::kBool)}).Named("ix"),
        [](const Bindings& b) -> UOpPtr {
          if (!b["g"]->ArgBool()) return nullptr;
          return UOp::Make(Op::INDEX, b["ix"]->dtype(), {b["p"], b["i"]}, b["ix"]->arg());
        },
        "index(p,i,true) -> index(p,i)"},
       {UPat(Op::LOAD).Src({UPat(Op::INDEX).Src({UPat::Var("p"), UPat::Var("i"), UPat::CVar("g", dtypes::kBool)})}),
        [](const Bindings& b) -> UOpPtr {
          const DType d = b.root()->dtype();
          if (b["g"]->ArgBool() || d.count != 1) return nullptr;
          return d.IsBool() ? UOp::ConstBool(false) : UOp::Const(d, int64_t{0});
        },
        "load(index(p,i,false)) -> 0"}},
      "symbolic_indices");
  return pm;
}

// "fold_index_math": graph_util.h's FoldIndexMath as a table (index-dtype and bool constants only, so data math
// keeps its exact per-dtype semantics for the device).
const PatternMatcher& FoldIndexMathRules() {
  static const PatternMatcher pm(
      {{UPat([] {
          OpSet alu;
          for (int i = 0; i < kNumOps; ++i) {
            if (IsALU(static_cast<Op>(i))) alu.Add(static_cast<Op>(i));
          }
          return alu;
        }()),
        [](const Bindings& b) { return FoldIndexMathAt(b.root()); },
        "index consts and identities (x+0, x*1, x*0, x/1, x%1, (x+c1)+c2, ...) folded"}},
      "fold_index_math");
  return pm;
}

// Index math only: the constant selects top-down, then the two tables above, one walk each, under the stage's name.
absl::StatusOr<UOpPtr> RunSymbolic(const UOpPtr& sink, LowerContext& ctx, const char* name) {
  RewriteOptions top_down = ctx.PassOptions(name, /*walk=*/false);
  top_down.bottom_up = true;
  KILN_ASSIGN_OR_RETURN(UOpPtr out, GraphRewrite(sink, ConstantBranchRules(), top_down));
  KILN_ASSIGN_OR_RETURN(out, GraphRewrite(out, SymbolicIndexRules(), ctx.PassOptions(name, /*walk=*/true)));
  return GraphRewrite(out, FoldIndexMathRules(), ctx.PassOptions(name, /*walk=*/true));
}
absl::StatusOr<UOpPtr> InitialSymbolic(const UOpPtr& sink, LowerContext& ctx) {
  return RunSymbolic(sink, ctx, "initial symbolic");
}
absl::StatusOr<UOpPtr> PostoptSymbolic(const UOpPtr& sink, LowerContext& ctx) {
  return RunSymbolic(sink, ctx, "postopt symbolic");
}
absl::StatusOr<UOpPtr> FinalSymbolic(const UOpPtr& sink, LowerContext& ctx) {
  return RunSymbolic(sink, ctx, "final symbolic");
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
    {"initial symbolic", InitialSymbolic, true},
    {"collapse one-hot reduces", CollapseOneHotReduces},
    {"apply opts", ApplyOpts},
    {"expand upcasts", ExpandUpcasts, true},
    {"postopt symbolic", PostoptSymbolic, true},
    {"narrow gated reduces", NarrowGatedReduces},
    {"lower group reduces", LowerGroupReduces},
    {"lower reduces", LowerReduces, true},
    {"fold wmma accumulators", FoldWmmaAccumulators},
    {"lower threads", LowerThreads},
    {"lower gpu dims", LowerGpuDims, true},
    {"normalize ends", NormalizeEnds},
    {"final symbolic", FinalSymbolic, true},
    {"lower index dtype", LowerIndexDType, true},
    {"move gates", MoveGates, true},
    {"guard division", GuardDivision, true},
    {"vectorize loads", VectorizeLoads},
    {"vectorize shared lanes", VectorizeSharedLanes},
    {"vectorize accumulators", VectorizeAccumulators},
};

absl::Status FillProgramInfo(const LowerContext& ctx, Program& p) {
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
      auto [lo, hi] = VMinMax(u->src(1));
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

// One step of the pipeline: a stage of kLowerPasses, or a user table hooked before/after one.
struct Step {
  std::string name;
  PassFn fn = nullptr;                 // a stage
  const ExtraRules* extra = nullptr;   // a hook
  bool table = false;                  // Pass::table
};

absl::StatusOr<std::vector<Step>> PlanSteps(const PassHooks* hooks) {
  std::vector<Step> steps;
  if (hooks != nullptr) {
    for (const ExtraRules& e : hooks->rules) {
      bool known = std::any_of(std::begin(kLowerPasses), std::end(kLowerPasses),
                               [&](const Pass& p) { return e.stage == p.name; });
      if (!known) return absl::InvalidArgumentError(absl::StrCat("PassHooks: no lowering stage named '", e.stage, "'"));
      if (e.rules == nullptr) return absl::InvalidArgumentError(absl::StrCat("PassHooks: null rule table at '", e.stage, "'"));
    }
  }
  auto add_hooks = [&](const char* stage, ExtraRules::At at) {
    if (hooks == nullptr) return;
    for (const ExtraRules& e : hooks->rules) {
      if (e.stage != stage || e.at != at) continue;
      std::string name = !e.name.empty() ? e.name
                                         : absl::StrCat(stage, at == ExtraRules::At::kBefore ? " [before]" : " [after]");
      steps.push_back(Step{std::move(name), nullptr, &e, true});
    }
  };
  for (const Pass& pass : kLowerPasses) {
    add_hooks(pass.name, ExtraRules::At::kBefore);
    steps.push_back(Step{pass.name, pass.fn, nullptr, pass.table});
    add_hooks(pass.name, ExtraRules::At::kAfter);
  }
  return steps;
}

absl::StatusOr<UOpPtr> RunPasses(const UOpPtr& ast, LowerContext& ctx) {
  KILN_RETURN_IF_ERROR(InitAxes(ast, ctx));
  KILN_ASSIGN_OR_RETURN(std::vector<Step> steps, PlanSteps(ctx.options.hooks));
  const bool dump = DebugLevel() >= 6;
  const bool trace = GetKnob(Knob::kTrackMatchStats) >= 2;
#ifndef NDEBUG
  SpecMemo verified;  // each pass's output is checked where it differs from its input
  KILN_RETURN_IF_ERROR(VerifyKernel(ast, verified));
#endif
  UOpPtr cur = ast;
  for (const Step& step : steps) {
    const bool is_table = step.table;
    const int64_t id = trace && !is_table ? RewriteTrace::Get().BeginPass(step.name, "codegen", "walk", cur) : 0;
    absl::StatusOr<UOpPtr> next;
    if (step.extra != nullptr) {
      RewriteOptions o = ctx.PassOptions("", step.extra->walk);
      o.name = step.name;
      o.ctx = nullptr;
      next = GraphRewrite(cur, *step.extra->rules, o);
    } else {
      next = step.fn(cur, ctx);
      // Rule-table stages add their own row (GraphRewrite); list the imperative ones so the table shows them all.
      if (!is_table && ctx.stats != nullptr && next.ok()) ctx.stats->AddPass(step.name, "imperative", -1);
    }
#ifndef NDEBUG
    // The spec verifier between passes (debug and test builds); a failure here is a codegen bug.
    if (next.ok()) {
      if (absl::Status st = VerifyKernel(*next, verified); !st.ok())
        next = absl::InternalError(absl::StrCat("after codegen pass '", step.name, "': ", st.message()));
    }
#endif
    if (id != 0) RewriteTrace::Get().EndPass(id, next.ok() ? *next : UOpPtr(), next.ok(),
                                             next.ok() ? "" : std::string(next.status().message()));
    if (!next.ok()) return next.status();
    cur = *std::move(next);
    if (dump) std::fprintf(stderr, "=== codegen pass '%s' ===\n%s", step.name.c_str(), PrintGraph(cur).c_str());
  }
  return cur;
}

}  // namespace

std::vector<std::string_view> LowerStageNames() {
  std::vector<std::string_view> out;
  for (const Pass& p : kLowerPasses) out.push_back(p.name);
  return out;
}

absl::StatusOr<Program> LowerKernel(const UOpPtr& kernel_ast, const Target& target, const LowerOptions& options) {
  LowerContext ctx;
  ctx.target = target;
  ctx.options = options;
  // DEBUG >= 5 prints this kernel's counters, so it counts into its own sink and adds that to the caller's.
  const bool print_stats = DebugLevel() >= 5;
  RewriteStats own;
  ctx.stats = print_stats ? &own : options.stats;
  absl::StatusOr<UOpPtr> lowered = RunPasses(kernel_ast, ctx);
  if (print_stats) {
    std::fprintf(stderr, "=== rewrite passes of %s ===\n%s", ctx.name.empty() ? "<kernel>" : ctx.name.c_str(),
                 own.Format().c_str());
    if (options.stats != nullptr) options.stats->Merge(own);
  }
  KILN_ASSIGN_OR_RETURN(UOpPtr sink, std::move(lowered));
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
  p.slp_max_vf = ctx.slp_max_vf;
  p.strided_loads = ctx.strided_loads;
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
