// The scheduler's state and decisions (schedule.h's CreateSchedule): which nodes are stored (realized), which
// kernels fuse, and the items, buffers and memory plan it emits. Internal to engine/schedule: the walk, the realize
// rules and Emit are in schedule.cc, the fusion rounds and their rule table in schedule_fuse.cc.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/rewrite_stats.h"
#include "engine/schedule/kernel_builder.h"
#include "engine/schedule/schedule.h"
#include "engine/uop/uop_key.h"

namespace kiln::schedule {

inline std::string DeviceOfBuffer(const UOp* b) {
  if (b->num_src() >= 2 && b->src(1)->op() == Op::DEVICE) return b->src(1)->ArgStr();
  return DefaultDevice();
}

inline UOpPtr ViewAs(const UOpPtr& buffer, const Shape& shape) {
  if (shape.size() == 1 && shape[0] == buffer->shape()[0]) return buffer;
  return UOp::Make(Op::RESHAPE, buffer->dtype(), {buffer}, IntVec(shape.begin(), shape.end()));
}

inline OpSet ElementwiseOps() {
  OpSet ops;
  for (int i = 0; i < kNumOps; ++i)
    if (IsElementwise(static_cast<Op>(i))) ops.Add(static_cast<Op>(i));
  return ops;
}

struct UnionFind {
  UOpMap<const UOp*> parent;
  const UOp* Find(const UOp* x) {
    const UOp* r = x;
    for (auto it = parent.find(r); it != parent.end() && it->second != r; it = parent.find(r))
      r = it->second;
    while (x != r) {  // path compression
      const UOp* next = parent[x];
      parent[x] = r;
      x = next;
    }
    return r;
  }
  void Union(const UOp* a, const UOp* b) {
    a = Find(a);
    b = Find(b);
    if (a != b) parent[b] = a;
  }
};

class Scheduler {
 public:
  explicit Scheduler(RewriteStats* stats) : stats_(stats) {}
  absl::StatusOr<Schedule> Run(absl::Span<const UOpPtr> roots);

 private:
  absl::Status ComputeDevices();
  // Row bounds (Tensor::Rows): a node computed from a bounded node is bounded by the same BIND when its row r reads
  // only row r of its bounded sources, so computing its first n rows reads only their first n. Anything else (a
  // reduce over dim 0, a pad, shrink, flip or permutation of dim 0, a reshape or broadcast into another dim 0, an
  // ASSIGN) would read the unspecified rows: refused, naming the op.
  absl::Status ComputeRows();
  // Whether row r of `u` reads only row r of its sources (given equal ranks and dim 0).
  static bool KeepsRows(const UOp* u);

  std::string DeviceOf(const UOp* u) {
    auto it = device_.find(u);
    return it == device_.end() || it->second.empty() ? DefaultDevice() : it->second;
  }

  // The last node of the single-use chain of reshapes and same-shape elementwise ops that starts at reduce `r` (its
  // epilogue: the conv's bias add, a residual add, the activation), or `r` itself when there is none.
  const UOp* EpilogueTop(const UOp* r);

  void Realize(const UOp* u) {
    if (g_.realized.insert(u).second) order_.push_back(u);
  }
  static bool IsContiguousBufferView(const UOp* u) {
    bool c = false;
    return BufferOf(u, &c) != nullptr && c;
  }

  // Under movement ops and negations (exact, and all that Min and the MAX gradient put between x and max(x)).
  static const UOp* StripExact(const UOp* u);
  // For a comparison of a float value x with a MAX reduce of x (x == max(x): the MAX reduce's gradient, Argmax), x
  // when it is computed rather than loaded, else null. Such an x must be stored once: fused into the max's kernel and
  // recomputed in the comparing kernel it need not have the same bits in both (the CPU backend contracts a multiply
  // feeding an add into one FMA where the product has one use, and rounds twice where it has more; GPU compilers do
  // the same), and a row whose max equals none of its recomputed elements loses its gradient (0/0 in is_max/count).
  const UOp* ComparedWithItsMax(const UOp* cmp) const;

  // ---- Fusion decisions as rule tables ----
  // The decisions of what to store (realize) and what to fuse are named rules in two PatternMatcher tables, so each
  // has a name and a counter (RewriteStats rows under the passes "schedule realize" and "schedule fuse"), which
  // DEBUG >= 5 and the VIZ page show beside the codegen passes. A rule's callback decides on the scheduler's state
  // (the ctx) and acts on it; it never rewrites the graph.
  static constexpr const char* kRealizePass = "schedule realize";
  static constexpr const char* kFusePass = "schedule fuse";
  using Decider = bool (*)(Scheduler&, const UOp*);
  // A rule that counts a hit under `pass` when `decide` acts. Under GraphRewrite (the realize table) it returns
  // null, so nothing is rewritten; applied to one node (the fuse table) it returns a marker so the first rule that
  // acts ends the node's turn.
  static Rule Decision(const char* pass, UPat pat, std::string name, Decider decide);
  void Count(const char* pass, const std::string& rule) {
    ++decisions_;
    if (stats_ != nullptr)
      stats_->AddHits(pass, pass == kFusePass ? "schedule_fuse" : "schedule_realize", rule);
  }

  // What must be stored before fusion starts (tinygrad's realize patterns). Run over the whole graph by GraphRewrite
  // in walk mode; each node is seen once.
  static const PatternMatcher& RealizeRules();

  absl::Status InitialRealize(absl::Span<const UOpPtr> roots);

  // Kernel groups: realized nodes (not copies) by union-find representative, in realize order.
  std::vector<std::vector<const UOp*>> Groups();

  // Whether group a (transitively) depends on any node of group b.
  // Whether kernel a reads (through any chain of kernels) what kernel b writes. The groups a reaches are found once
  // per round and kept (reach_, cleared by BuildAll): the fusion decisions ask this for many pairs, and a search per
  // question made scheduling quadratic (SmolLM2's 469-kernel prefill graph: 6 s).
  bool DependsOn(size_t a, size_t b);

  // A kernel's build depends only on its group and on the realized set, which only grows: while it has not grown, a
  // group built in an earlier round is taken from `built_`. The rounds that only merge (a pair of sibling reduces or
  // the kernels sharing a reduce per round) rebuild just the merged kernel (the CNN's training step: 10 rounds of
  // ~118 builds, 7 of them merges only; scheduling 37-39 -> 14-16 ms).
  absl::Status BuildAll();

  // Sibling reduces: two kernels of one output shape, neither depending on the other, that read a common input and
  // each reduce it over the same input shape and axes at their top level become one kernel whose sums share one loop
  // nest (KernelBuild::top_reduces), so the common input is read once. A BatchNorm backward's four per-channel sums
  // (the gradients of its scale, shift, mean and inverse deviation) each re-read the routed max-pool gradient and
  // the conv output. Merges one pair per call (the fusion loop rebuilds in between); at most kMaxSiblingOutputs
  // outputs per kernel.
  static constexpr size_t kMaxSiblingOutputs = 8;
  bool MergeSiblingReduces();

  // What to fuse, decided per node from the kernel builds of one round (KernelBuild: reduce uses, nodes to store).
  // Applied node by node in graph order (PatternMatcher::Rewrite), not by GraphRewrite: a merge changes the builds the
  // later decisions depend on, so it ends the round, and which decision comes first must not depend on a walk.
  static const PatternMatcher& FuseRules();

  // Fusion to a fixed point: build every kernel, let the fuse rules decide, rebuild while anything changed.
  absl::Status Fuse();

  absl::StatusOr<Schedule> Emit(absl::Span<const UOpPtr> roots);

  // Every map and set below is keyed by nodes of the scheduled graph (topo_), which the caller holds while Run
  // lasts; UOpKey checks that on every match.
  std::vector<const UOp*> topo_;
  UOpMap<int> pos_;
  UOpMap<std::vector<const UOp*>>
      consumers_;  // every node's consumers in the scheduled graph (a source used twice: twice)
  UOpMap<std::string> device_;
  GraphInfo g_;
  std::vector<const UOp*> order_;  // realized nodes in the order they were marked
  UOpSet copies_;
  UnionFind uf_;
  std::vector<std::vector<const UOp*>> groups_;
  std::vector<KernelBuild> builds_;
  absl::flat_hash_map<std::vector<const UOp*>, KernelBuild>
      built_;                       // BuildAll's builds by group, while
  size_t built_with_realized_ = 0;  // the realized set has this size
  std::vector<std::vector<bool>>
      reach_;  // DependsOn's memo: per kernel, the kernels it reads from (empty: not yet)
  UOpMap<size_t> group_of_;
  // Fusion-rule state: the decision count and sink, the first error a realize rule met, and one round's facts from
  // the kernel builds (each reduce's uses by group and index, broadcast reduces, ASSIGNs with a write-after-read
  // hazard, expensive elementwise nodes to store), whether a merge ended the round and whether a rule only waited.
  RewriteStats* stats_;
  int64_t decisions_ = 0;
  absl::Status error_;
  UOpMap<std::map<size_t, std::vector<std::vector<UOpPtr>>>> uses_;
  UOpSet broadcast_;
  UOpSet
      not_nested_;  // reduces among broadcast_ with a broadcast use that is not (only) a nested one
  UOpSet
      another_nest_;  // reduces with a use as a second, different top-level loop nest of a kernel
  UOpSet war_assigns_;
  UOpSet expensive_;
  bool merged_ = false;
  bool waited_ = false;
};

}  // namespace kiln::schedule
