// Internal to engine/realize.
//
// WeakView: a weak reference to a realized value (a BUFFER node under a chain of movement ops) that keeps neither
// the node nor its memory alive. It stores the recipe of the nodes; Lock() rebuilds them through the interning
// factory, which returns the very same nodes while they live, and reports the value gone (nullptr) when the BUFFER
// has no memory in the BufferTable any more (the node died and was, at most, just rebuilt empty). This is how the
// realize memo can remember results for the process's lifetime without leaking device memory.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/lru_cache.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/program.h"
#include "engine/realize/realize.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/device.h"
#include "engine/schedule/schedule.h"
#include "engine/uop/uop.h"

namespace kiln::realize_internal {

// The codegen Target for a device: its renderer and that renderer's capabilities (threads, locals, vector width).
codegen::Target TargetFor(const runtime::Device& dev);

class WeakView {
 public:
  // InvalidArgument unless `view` is movement ops over a BUFFER whose sources have no sources themselves.
  static absl::StatusOr<WeakView> Of(const UOpPtr& view) {
    WeakView w;
    const UOp* u = view.get();
    while (IsMovement(u->op())) {
      w.chain_.push_back({u->op(), u->dtype(), u->arg(), u->tag()});
      u = u->src(0).get();
    }
    if (u->op() != Op::BUFFER) return absl::InvalidArgumentError("WeakView: not a view of a BUFFER");
    w.buffer_ = {u->op(), u->dtype(), u->arg(), u->tag()};
    for (const UOpPtr& s : u->src()) {
      if (s->num_src() != 0) return absl::InvalidArgumentError("WeakView: BUFFER source with sources");
      w.buffer_src_.push_back({s->op(), s->dtype(), s->arg(), s->tag()});
    }
    return w;
  }

  // The live value, or nullptr if its buffer is gone.
  UOpPtr Lock() const {
    std::vector<UOpPtr> src;
    for (const Node& n : buffer_src_) src.push_back(UOp::Make(n.op, n.dtype, {}, n.arg, n.tag));
    UOpPtr u = UOp::Make(buffer_.op, buffer_.dtype, src, buffer_.arg, buffer_.tag);
    if (runtime::BufferTable::Global().Lookup(u.get()) == nullptr) return nullptr;
    for (auto it = chain_.rbegin(); it != chain_.rend(); ++it) u = UOp::Make(it->op, it->dtype, {u}, it->arg, it->tag);
    return u;
  }
  bool Alive() const { return Lock() != nullptr; }

 private:
  struct Node {
    Op op;
    DType dtype;
    Arg arg;
    int64_t tag;
  };
  std::vector<Node> chain_;  // outermost first
  Node buffer_;
  std::vector<Node> buffer_src_;
};

// ---- shared with exec_plan.cc (defined in realize.cc) ----

// A kernel lowered, compiled and loaded for one device (cached per RealizeContext by device, AST key and opt knobs).
struct LoadedKernel {
  codegen::Program program;
  std::string source;
  std::unique_ptr<runtime::Program> runner;
  // Memory this kernel holds, estimated: its source, its binary, its linear program's nodes and a measured fixed
  // cost of the loaded code (realize.cc). What the loaded-kernel cache's byte bound counts.
  size_t bytes = 0;
  // Its KernelLog entry (kernel_log.h); 0 = none yet (compiled while VIZ was off). Set again by LogIdForLaunch when
  // a recording run launches it and the log no longer holds the entry.
  std::atomic<int64_t> log_id{0};
  // What the lowering took, to lower it again for the record (LogIdForLaunch): the AST, the explicit opts (BEAM's
  // choice) or none (the heuristic), the user rule tables, and the knobs the lowering reads.
  UOpPtr ast;
  bool explicit_opts = false;
  std::vector<codegen::Opt> opts;
  std::shared_ptr<const codegen::PassHooks> hooks;
  int64_t noopt = 0, tc = 0;
};
// The KernelLog id under which a launch of `k` on `dev` is logged now: 0 when the calling thread is not recording;
// otherwise k's entry, or, when it has none or the log dropped it (a kernel compiled while recording was off,
// reused from the kernel cache or replayed by a JIT plan), a new entry marked `reused` whose passes come from
// lowering its AST again exactly as it was compiled (the loaded code is not replaced). Thread-safe.
int64_t LogIdForLaunch(LoadedKernel& k, runtime::Device& dev);
// The kernel for `ast` on `dev` from `ctx`'s loaded-kernel cache, lowered + compiled + loaded on a miss (counted in
// `ctx` and, when non-null, in `stats`).
// `order` (PrecompileKernels) splits a compile in two: a kernel whose program carries an SLP cap
// (codegen::Program::slp_max_vf) is lowered and handed back in `program` with no kernel (null); a later call with that
// `program` compiles it without lowering again.
struct CompileOrder {
  std::optional<codegen::Program> program;
  double lower_seconds = 0;
};
absl::StatusOr<std::shared_ptr<LoadedKernel>> GetKernel(RealizeContext& ctx, runtime::Device& dev, const UOpPtr& ast,
                                                        RealizeStats* stats, CompileOrder* order = nullptr);
// The loaded-kernel cache key of `ast` on `dev` under the current opt knobs.
std::string KernelKey(const runtime::Device& dev, const UOpPtr& ast);

// ---- the realized-result memo: root Key() -> result, held weakly (WeakView) ----

struct MemoEntry {
  WeakView result;
  // UOp::id() of the buffers the value depends on (and its own), for ASSIGN invalidation. Ids, not addresses: the
  // entry outlives those nodes, and an address may name a later buffer (stable-key rule, uop_key.h).
  std::vector<uint64_t> reads;
};

class Memo {
 public:
  UOpPtr Lookup(const Digest& key);
  void Insert(const Digest& key, const UOpPtr& result, std::vector<const UOp*> reads);
  // Drops every entry that reads or is `buffer` (its contents are being overwritten).
  void Invalidate(const UOp* buffer);

 private:
  static constexpr size_t kPruneAt = 4096;
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  absl::flat_hash_map<Digest, MemoEntry> map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::realize_internal

namespace kiln {

// The state behind a RealizeContext (context.cc).
struct RealizeContext::Impl {
  Impl(size_t max_entries, size_t max_bytes) : kernels(max_entries, max_bytes) {}

  std::shared_ptr<realize_internal::LoadedKernel> GetKernel(const std::string& key) ABSL_LOCKS_EXCLUDED(mu);
  bool HasKernel(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu);
  void PutKernel(const std::string& key, std::shared_ptr<realize_internal::LoadedKernel> k) ABSL_LOCKS_EXCLUDED(mu);
  // One kernel compiled on this context (GetKernel; JIT plan builds included).
  void NoteCompile(double seconds) ABSL_LOCKS_EXCLUDED(mu);
  // A finished Realize: counters, last stats, recording (its compiles were counted by NoteCompile).
  void Finish(const RealizeStats& stats) ABSL_LOCKS_EXCLUDED(mu);

  realize_internal::Memo memo;  // its own lock
  RewriteStats rewrite_stats;   // its own lock
  std::shared_ptr<const codegen::PassHooks> hooks ABSL_GUARDED_BY(mu);
  mutable absl::Mutex mu;
  LruCache<std::string, std::shared_ptr<realize_internal::LoadedKernel>> kernels ABSL_GUARDED_BY(mu);
  RealizeCounters counters ABSL_GUARDED_BY(mu);
  RealizeStats last ABSL_GUARDED_BY(mu);
  bool recording ABSL_GUARDED_BY(mu) = false;
  RealizeStats recorded ABSL_GUARDED_BY(mu);
};

}  // namespace kiln

namespace kiln::realize_internal {

// The Buffer attached to a BUFFER node, allocated (and attached) on first use.
absl::StatusOr<std::shared_ptr<runtime::Buffer>> Materialize(const UOpPtr& buffer);
// Whether a BUFFER node has memory marked constant (runtime::Buffer::MarkConstant).
bool IsConstantBuffer(const UOp* buffer);
// FailedPrecondition (naming `what`) if the item writes a constant buffer: eager realizes and ExecPlan::Build.
absl::Status CheckNoConstantWrites(const ScheduleItem& item, const std::string& what);

// Capture state of this thread (exec_plan.cc): non-null while a CaptureScope is alive. Thread-scoped on purpose
// (docs/architecture.md, "Engine context"): it is an input scope, as in tinygrad, never a result channel.
struct CaptureState;
CaptureState* ActiveCapture();
// Appends a schedule's items (with its variable values) to the active capture.
void AppendCaptured(CaptureState* capture, const Schedule& schedule);

// Buffers whose contents a live ExecPlan overwrites on every Run: the memo never remembers a value that reads one.
bool AnyVolatile(const std::vector<const UOp*>& buffers);
// Drops every memo entry that reads or is `buffer`, in every live RealizeContext (context.cc): buffers are
// process-wide, so a JIT plan that starts overwriting one makes every context's entries over it stale.
void InvalidateMemo(const UOp* buffer);

}  // namespace kiln::realize_internal
