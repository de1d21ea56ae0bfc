// CpuCompiler: LLVM IR text -> O2 (less two passes, see IsSkippedPass) -> host object file bytes.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/llvm_init.h"
#include "engine/base/cpu_features.h"
#include "engine/base/sha256.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/Dominators.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Transforms/Utils/Cloning.h"

namespace kiln::backends {

void InitLlvmOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

std::string LlvmErrorString(llvm::Error err) { return llvm::toString(std::move(err)); }

namespace {

InnerLoopArith CountArith(llvm::Module& mod) {
  InnerLoopArith n;
  for (llvm::Function& f : mod) {
    if (f.isDeclaration()) continue;
    const llvm::DominatorTree dt(f);
    const llvm::LoopInfo li(dt);
    for (const llvm::BasicBlock& bb : f) {
      const llvm::Loop* loop = li.getLoopFor(&bb);
      if (loop == nullptr || !loop->isInnermost()) continue;
      for (const llvm::Instruction& in : bb) {
        const auto* call = llvm::dyn_cast<llvm::IntrinsicInst>(&in);
        const bool arith =
            in.getOpcode() == llvm::Instruction::FMul ||
            in.getOpcode() == llvm::Instruction::FAdd ||
            (call != nullptr && (call->getIntrinsicID() == llvm::Intrinsic::fmuladd ||
                                 call->getIntrinsicID() == llvm::Intrinsic::fma));
        if (arith) ++(in.getType()->isVectorTy() ? n.vector : n.scalar);
      }
    }
  }
  return n;
}

// -O2 passes that kiln's kernels skip. Dead-store elimination looks for stores that a later store overwrites, and
// loop-load elimination for loads that an earlier iteration's store forwards; a kernel stores each output once and
// keeps its accumulators in registers, so neither finds anything, while both walk MemorySSA over every store of an
// unrolled tile: 25-27% of -O2's time. Over the 321 kernels of the CNN's training step and inference, MiniLM,
// ResNet-50, SmolLM2's decode, kernel_perf's matmuls and conv_perf's convolutions the object code is identical
// without them (session 37); the CNN's cold training step compiles in 0.5 s less CPU time.
// The rest change nothing in kiln's kernels either: one function with no calls, no globals to optimize, no
// allocations, no conditional code to speculate, divisions already guarded, every value used. Skipped one by one
// and all together over 449 kernels (the CNN's training step and inference, ResNet-50, MiniLM float and int8, SmolLM2
// prefill and decode float and int8, conv_perf, matmul_compare), the object code stays byte for byte the same and
// the set compiles 5-10% faster (session 43). Passes that did change code (IndVarSimplify, LoopIdiomRecognize,
// IPSCCP, CorrelatedValuePropagation, TailCallElim, JumpThreading, any InstCombine run) still run.
bool IsSkippedPass(llvm::StringRef pass) {
  static constexpr std::string_view kSkipped[] = {
      "DSEPass", "LoopLoadEliminationPass",
      "ADCEPass", "AggressiveInstCombinePass", "BDCEPass", "CalledValuePropagationPass", "ConstraintEliminationPass",
      "DivRemPairsPass", "Float2IntPass", "GlobalOptPass", "InstSimplifyPass", "LoopDeletionPass",
      "LoopDistributePass", "LoopInstSimplifyPass", "LoopSinkPass", "MemCpyOptPass", "MergedLoadStoreMotionPass",
      "PostOrderFunctionAttrsPass", "SCCPPass", "SimpleLoopUnswitchPass", "SpeculativeExecutionPass"};
  return std::find(std::begin(kSkipped), std::end(kSkipped), std::string_view(pass)) != std::end(kSkipped);
}

// Instructions in one basic block above which code generation runs unoptimized (see Compile).
constexpr size_t kMaxOptimizedBlock = 16384;

size_t LargestBlock(const llvm::Module& mod) {
  size_t most = 0;
  for (const llvm::Function& f : mod)
    for (const llvm::BasicBlock& bb : f) most = std::max(most, bb.size());
  return most;
}

// LLVM's SLP vectorizer reads its widest-bundle cap from a process-wide option ("slp-max-vf"), while kernels
// compile on several threads at once (realize's PrecompileKernels). A kernel marked "kiln-slp-max-vf" (Program::
// slp_max_vf) compiles under that cap and the others without it, so compiles of the two kinds never overlap: a
// compile waits until every compile running under a different cap has finished.
class SlpCapScope {
 public:
  explicit SlpCapScope(unsigned cap) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](unsigned* want) { return active_ == 0 || cap_ == *want; }, &cap));
    if (active_ == 0 && cap_ != cap) {
      llvm::cl::Option* opt = llvm::cl::getRegisteredOptions().lookup("slp-max-vf");
      if (opt != nullptr) {
        opt->reset();  // the default: no cap (the option counts only when it was given)
        if (cap > 0) opt->addOccurrence(0, "slp-max-vf", std::to_string(cap));
      }
      cap_ = cap;
    }
    ++active_;
  }
  ~SlpCapScope() {
    absl::MutexLock lock(&mu_);
    --active_;
  }
  SlpCapScope(const SlpCapScope&) = delete;
  SlpCapScope& operator=(const SlpCapScope&) = delete;

 private:
  static absl::Mutex mu_;
  static unsigned cap_ ABSL_GUARDED_BY(mu_);
  static int active_ ABSL_GUARDED_BY(mu_);
};
absl::Mutex SlpCapScope::mu_;
unsigned SlpCapScope::cap_ = 0;
int SlpCapScope::active_ = 0;

unsigned SlpCapOf(const llvm::Module& mod) {
  for (const llvm::Function& f : mod) {
    const llvm::Attribute a = f.getFnAttribute("kiln-slp-max-vf");
    unsigned cap = 0;
    if (a.isStringAttribute() && !a.getValueAsString().getAsInteger(10, cap)) return cap;
  }
  return 0;
}

}  // namespace

absl::StatusOr<InnerLoopArith> CountInnerLoopArith(const std::string& source) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> mod = llvm::parseAssemblyString(source, diag, ctx);
  if (mod == nullptr)
    return absl::InvalidArgumentError("CountInnerLoopArith: LLVM IR does not parse");
  return CountArith(*mod);
}

CpuCompiler::CpuCompiler(std::string cpu, std::string features)
    : triple_(llvm::sys::getProcessTriple()), cpu_(std::move(cpu)), features_(std::move(features)) {
  if (cpu_.empty()) cpu_ = llvm::sys::getHostCPUName().str();
  if (features_.empty()) {
    std::vector<std::string> f;
    // AVX-512 unless KILN_CPU_AVX512=0 (engine/base/cpu_features.h). LLVM 19.1's SLP vectorizer once rewrote the
    // fused attention kernel (softmax @ (V + b), head-split) wrongly at 512-bit width on a Zen 4 (issue #17);
    // tests/engine/tensor/attention_kernel_test.cc and MiniLM against onnxruntime (onnx_real_models) check it
    // and pass at 512 bits, also with the kernels tuned for znver4 and znver5.
    const bool allow512 = CpuAvx512Allowed();
    for (const auto& kv : llvm::sys::getHostCPUFeatures()) {
      const bool on = kv.second && (allow512 || !kv.first().starts_with("avx512"));
      f.push_back(absl::StrCat(on ? "+" : "-", kv.first().str()));
    }
    // LLVM tunes Intel's AVX-512 parts (Skylake-X through Sapphire Rapids) to prefer 256-bit vectors; kiln's
    // code is scalar lanes that the SLP vectorizer packs, so under that tuning it packs them into ymm registers
    // and a tile planned for 64-byte vectors spills (2048^3 matmul: 96 spills, 48 GFLOPS). AVX-512 on means zmm.
    if (allow512) f.push_back("-prefer-256-bit");
    std::sort(f.begin(), f.end());
    features_ = absl::StrJoin(f, ",");
  }
  cache_key_ = absl::StrCat("cpu-llvm-", LLVM_VERSION_STRING, "|", triple_, "|", cpu_, "|",
                            DigestHex(Sha256Of(features_)).substr(0, 16), "|O2|pic|vec|r4");
}

absl::StatusOr<std::string> CpuCompiler::Compile(const std::string& source, const std::string& name) {
  InitLlvmOnce();
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> mod = llvm::parseAssemblyString(source, diag, ctx);
  if (mod == nullptr) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    diag.print("kernel", os, /*ShowColors=*/false);
    return absl::InvalidArgumentError(absl::StrCat("CPU compile of ", name, ": LLVM IR does not parse: ", os.str()));
  }
  std::string verr;
  llvm::raw_string_ostream vos(verr);
  if (llvm::verifyModule(*mod, &vos))
    return absl::InvalidArgumentError(absl::StrCat("CPU compile of ", name, ": invalid LLVM IR: ", vos.str()));

  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple_, err);
  if (target == nullptr) return absl::InternalError(absl::StrCat("CPU compile: no LLVM target: ", err));
  // A kernel marked "kiln-no-gather" (codegen::Program::no_gather): on x86 no gathers or scatters from the
  // vectorizers (LLVM's prefer-no-gather/-scatter tuning flags). A conv kernel whose lanes are output channels
  // broadcasts one input value per tile row, rows an image row apart; the SLP vectorizer packed 4 of those scalars
  // into a vgatherdps and shuffled each out again, where one vbroadcastss per row is the whole job (Zen 4, same load:
  // conv2 forward 150-166 ms with the gathers, 100 ms without; its input gradient 341-348 vs 135-155 ms). Only those
  // kernels: elsewhere the flags change which multiply-adds LLVM contracts into FMAs (the CNN's linear layer), so
  // the training run's values, and its 70-step accuracy, would move.
  std::string features = features_;
  if (llvm::StringRef(triple_).starts_with("x86_64")) {
    for (const llvm::Function& f : *mod) {
      if (f.hasFnAttribute("kiln-no-gather")) {
        absl::StrAppend(&features, features.empty() ? "" : ",",
                        "+prefer-no-gather,+prefer-no-scatter");
        break;
      }
    }
  }
  const bool huge = LargestBlock(*mod) > kMaxOptimizedBlock;  // see below
  // One target machine per compiling thread, CPU and feature string, reused by its later compiles (LLVM's
  // SimpleCompiler does the same): creating one, with the X86 subtarget it builds on first use, took ~3% of the cold
  // training step's compile CPU. The object code is the same (the step's 95 kernels compared byte for byte). A huge
  // kernel gets a machine of its own, since it lowers the machine's opt level.
  thread_local absl::flat_hash_map<std::string, std::unique_ptr<llvm::TargetMachine>> machines;
  std::unique_ptr<llvm::TargetMachine> fresh;
  std::unique_ptr<llvm::TargetMachine>& slot = huge ? fresh : machines[absl::StrCat(triple_, "|", cpu_, "|", features)];
  if (slot == nullptr) {
    llvm::TargetOptions opts;  // no fast-math: only `contract` flags in the IR allow fusion
    slot.reset(target->createTargetMachine(triple_, cpu_, features, opts, llvm::Reloc::PIC_, llvm::CodeModel::Small,
                                           llvm::CodeGenOptLevel::Default));
  }
  if (slot == nullptr) return absl::InternalError("CPU compile: cannot create an LLVM target machine");
  llvm::TargetMachine* tm = slot.get();
  mod->setTargetTriple(triple_);
  mod->setDataLayout(tm->createDataLayout());

  // LLVM costs time quadratic in the length of one basic block in two places: the loop vectorizer
  // (its cost model over the loop body) and code generation's schedulers
  // (ScheduleDAGMILive::collectVRegUses walks every use of each register per scheduled
  // instruction). A kiln.v1 graph of one 65,536-node elementwise chain fuses into one kernel whose
  // loop body is one block of ~10^5 instructions: its compile took 575 s (2-core EPYC, kilnd busy),
  // and LoopVectorizePass alone 4 s at 8k nodes. Such a kernel is compiled without the vectorizers
  // and with the non-optimizing instruction selector and register allocator, which are linear; the
  // rest of -O2 still runs. Kernels of real models stay below the bound: the largest blocks before
  // -O2 are 1,122 instructions in the CNN's training step and 4,095 in the ONNX real models and
  // BEAM's candidates (onnx_real_models, BeamTest), so their code does not change. (`huge`, above.)

  // -O2, new pass manager, with the SLP vectorizer's bundles capped at `cap` lanes (0: no cap).
  auto optimize = [&](llvm::Module& m, unsigned cap) {
    const SlpCapScope slp_cap(cap);
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    // PipelineTuningOptions leaves both vectorizers off by default (clang turns them on at -O2): the expanded
    // UPCAST/UNROLL lanes rely on the SLP vectorizer to become vector code. The loop vectorizer stays off: it runs
    // first and vectorized loops whose bodies already hold a row's 16 lanes across their iterations instead, with
    // gathers and scatters (MiniLM's stored softmax, 12 x 128 x 128: 120 -> 21 us per layer without it; its
    // residual adds 46 -> 8 us); the CNN, ResNet-50, the LLM step and the training step measured the same.
    llvm::PipelineTuningOptions pto;
    pto.SLPVectorization = !huge;
    pto.LoopVectorization = false;
    pto.LoopUnrolling = true;
    llvm::PassInstrumentationCallbacks pic;
    pic.registerShouldRunOptionalPassCallback([](llvm::StringRef pass, llvm::Any) { return !IsSkippedPass(pass); });
    llvm::PassBuilder pb(tm, pto, std::nullopt, &pic);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
    mpm.run(m, mam);
  };
  // A capped kernel whose reduce loop the cap left scalar (the SLP vectorizer found no bundle within it: ResNet-50's
  // 7x7 stem tile, 3 input channels, 512 scalar multiply-adds) is optimized again from its source without the cap.
  const unsigned cap = huge ? 0 : SlpCapOf(*mod);
  if (cap > 0) {
    std::unique_ptr<llvm::Module> spare = llvm::CloneModule(*mod);
    optimize(*mod, cap);
    const InnerLoopArith arith = CountArith(*mod);
    if (arith.scalar > arith.vector) {
      mod = std::move(spare);
      optimize(*mod, 0);
    }
  } else {
    optimize(*mod, 0);
  }
  if (huge) tm->setOptLevel(llvm::CodeGenOptLevel::None);

  llvm::SmallVector<char, 0> obj;
  llvm::raw_svector_ostream os(obj);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    return absl::InternalError("CPU compile: the target cannot emit object files");
  pm.run(*mod);
  return std::string(obj.begin(), obj.end());
}

}  // namespace kiln::backends
