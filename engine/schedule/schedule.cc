#include "engine/schedule/schedule.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <numeric>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/rewrite/graph_rewrite.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/rewrite_stats.h"
#include "engine/schedule/kernel_builder.h"
#include "engine/schedule/memory_planner.h"
#include "engine/schedule/split_reduce.h"
#include "engine/uop/uop_key.h"

namespace kiln {

std::string DefaultDevice() {
  static const std::string dev = [] {
    const char* e = std::getenv("DEV");
    return std::string(e != nullptr && *e != '\0' ? e : "CPU");
  }();
  return dev;
}

UOpPtr NewBuffer(DType dtype, int64_t numel, const std::string& device) {
  // Ids start high so they never meet UNIQUE ids made elsewhere before this counter existed.
  static std::atomic<int64_t> next{int64_t{1} << 40};
  UOpPtr unique = UOp::Make(Op::UNIQUE, dtypes::kVoid, {}, next.fetch_add(1));
  UOpPtr dev = UOp::Make(Op::DEVICE, dtypes::kVoid, {}, device);
  return UOp::Make(Op::BUFFER, dtype, {unique, dev}, numel);
}

const UOp* BufferOf(const UOp* u, bool* contiguous) {
  bool contig = true;
  while (IsMovement(u->op())) {
    if (u->op() != Op::RESHAPE) contig = false;
    u = u->src(0).get();
  }
  if (contiguous != nullptr) *contiguous = contig;
  return u->op() == Op::BUFFER ? u : nullptr;
}

namespace {

using schedule::BuildKernel;
using schedule::GraphInfo;
using schedule::KernelBuild;

std::string DeviceOfBuffer(const UOp* b) {
  if (b->num_src() >= 2 && b->src(1)->op() == Op::DEVICE) return b->src(1)->ArgStr();
  return DefaultDevice();
}

UOpPtr ViewAs(const UOpPtr& buffer, const Shape& shape) {
  if (shape.size() == 1 && shape[0] == buffer->shape()[0]) return buffer;
  return UOp::Make(Op::RESHAPE, buffer->dtype(), {buffer}, IntVec(shape.begin(), shape.end()));
}

OpSet ElementwiseOps() {
  OpSet ops;
  for (int i = 0; i < kNumOps; ++i)
    if (IsElementwise(static_cast<Op>(i))) ops.Add(static_cast<Op>(i));
  return ops;
}

struct UnionFind {
  UOpMap<const UOp*> parent;
  const UOp* Find(const UOp* x) {
    const UOp* r = x;
    for (auto it = parent.find(r); it != parent.end() && it->second != r; it = parent.find(r)) r = it->second;
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
  absl::StatusOr<Schedule> Run(absl::Span<const UOpPtr> roots) {
    for (const UOpPtr& r : roots) {
      if (!r || !r->has_shape()) return absl::InvalidArgumentError("schedule: a root is not a shaped tensor node");
    }
    topo_ = Toposort(roots);
    for (size_t i = 0; i < topo_.size(); ++i) pos_[topo_[i]] = static_cast<int>(i);
    for (const UOp* u : topo_)
      for (const UOpPtr& src : u->src()) consumers_[src.get()].push_back(u);
    KILN_RETURN_IF_ERROR(ComputeDevices());
    KILN_RETURN_IF_ERROR(ComputeRows());
    KILN_RETURN_IF_ERROR(InitialRealize(roots));
    KILN_RETURN_IF_ERROR(Fuse());
    return Emit(roots);
  }

 private:
  absl::Status ComputeDevices() {
    for (const UOp* u : topo_) {
      std::string d;
      if (u->op() == Op::BUFFER) {
        d = DeviceOfBuffer(u);
      } else if (u->op() == Op::DEVICE) {
        d = u->ArgStr();
      } else if (u->op() == Op::COPY && u->src(1)->op() == Op::DEVICE) {
        d = u->src(1)->ArgStr();
      } else {
        for (const UOpPtr& s : u->src())
          if (auto it = device_.find(s.get()); it != device_.end() && !it->second.empty()) {
            d = it->second;
            break;
          }
      }
      device_[u] = d;
    }
    // Constant-only subgraphs (CONSTs carry no device) take the device of a consumer, so a realized constant feeding
    // a CL kernel lives on CL and not on the default device.
    for (auto it = topo_.rbegin(); it != topo_.rend(); ++it) {
      const std::string& d = device_[*it];
      if (d.empty()) continue;
      for (const UOpPtr& s : (*it)->src()) {
        std::string& sd = device_[s.get()];
        if (sd.empty() && s->op() != Op::DEVICE) sd = d;
      }
    }
    // What is still deviceless is computed from constants alone with no consumer on a device (a constant gradient
    // realized as a root): it lives where the schedule's other work does (the first device found), not on the
    // default device.
    std::string fallback;
    for (const UOp* u : topo_)
      if (const std::string& d = device_[u]; !d.empty() && u->op() != Op::DEVICE) {
        fallback = d;
        break;
      }
    if (!fallback.empty())
      for (auto& [u, d] : device_)
        if (d.empty() && u->op() != Op::DEVICE) d = fallback;
    return absl::OkStatus();
  }
  // Row bounds (Tensor::Rows): a node computed from a bounded node is bounded by the same BIND when its row r reads
  // only row r of its bounded sources, so computing its first n rows reads only their first n. Anything else (a
  // reduce over dim 0, a pad, shrink, flip or permutation of dim 0, a reshape or broadcast into another dim 0, an
  // ASSIGN) would read the unspecified rows: refused, naming the op.
  absl::Status ComputeRows() {
    for (const UOp* u : topo_) {
      const UOp* bind = u->op() == Op::ROWS ? u->src(1).get() : nullptr;
      for (const UOpPtr& s : u->src()) {
        auto it = g_.rows.find(s.get());
        if (it == g_.rows.end()) continue;
        if (bind != nullptr && bind != it->second)
          return absl::InvalidArgumentError(
              absl::StrCat("schedule: ", std::string(OpName(u->op())), " combines tensors of different row bounds (Tensor::Rows)"));
        bind = it->second;
        // (Elementwise sources broadcast from the right: a bounded source of lower rank would not be dim 0.)
        if (!u->has_shape() || u->shape().empty() || s->shape()[0] != u->shape()[0] ||
            (IsElementwise(u->op()) && s->shape().size() != u->shape().size()) || !KeepsRows(u))
          return absl::InvalidArgumentError(absl::StrCat(
              "schedule: ", std::string(OpName(u->op())), " ", ShapeToString(s->shape()), " -> ",
              u->has_shape() ? ShapeToString(u->shape()) : std::string("()"),
              " mixes the rows of a tensor with a symbolic row count (Tensor::Rows): only its first rows are computed"));
      }
      if (bind != nullptr) g_.rows[u] = bind;
    }
    return absl::OkStatus();
  }
  // Whether row r of `u` reads only row r of its sources (given equal ranks and dim 0).
  static bool KeepsRows(const UOp* u) {
    const Op op = u->op();
    if (IsElementwise(op) || op == Op::ROWS || op == Op::CONTIGUOUS || op == Op::CONTIGUOUS_BACKWARD ||
        op == Op::DETACH || op == Op::COPY || op == Op::RESHAPE || op == Op::EXPAND)
      return true;  // RESHAPE and EXPAND: dim 0 kept (checked by the caller), so row-major rows stay rows
    const IntVec* v = std::get_if<IntVec>(&u->arg());
    switch (op) {
      case Op::PERMUTE: return v != nullptr && !v->empty() && (*v)[0] == 0;
      case Op::PAD: return v != nullptr && v->size() >= 2 && (*v)[0] == 0 && (*v)[1] == 0;
      case Op::SHRINK: return v != nullptr && v->size() >= 2 && (*v)[0] == 0 && (*v)[1] == u->src(0)->shape()[0];
      case Op::FLIP: return v != nullptr && !v->empty() && (*v)[0] == 0;
      case Op::REDUCE_AXIS: {
        const IntVec& axes = std::get<ReduceArg>(u->arg()).axes;
        return std::find(axes.begin(), axes.end(), 0) == axes.end();
      }
      default: return false;
    }
  }

  std::string DeviceOf(const UOp* u) {
    auto it = device_.find(u);
    return it == device_.end() || it->second.empty() ? DefaultDevice() : it->second;
  }

  // The last node of the single-use chain of reshapes and same-shape elementwise ops that starts at reduce `r` (its
  // epilogue: the conv's bias add, a residual add, the activation), or `r` itself when there is none.
  const UOp* EpilogueTop(const UOp* r) {
    const UOp* top = r;
    for (const UOp* cur = r;;) {
      auto it = consumers_.find(cur);
      if (it == consumers_.end() || it->second.size() != 1) break;
      const UOp* c = it->second[0];
      if (g_.realized.contains(c) || DeviceOf(c) != DeviceOf(r)) break;
      if (c->op() == Op::RESHAPE) {
        cur = c;
        continue;
      }
      if (!IsElementwise(c->op()) || c->shape() != cur->shape() || c->dtype() != r->dtype()) break;
      top = cur = c;
    }
    return top;
  }

  void Realize(const UOp* u) {
    if (g_.realized.insert(u).second) order_.push_back(u);
  }
  static bool IsContiguousBufferView(const UOp* u) {
    bool c = false;
    return BufferOf(u, &c) != nullptr && c;
  }

  // Under movement ops and negations (exact, and all that Min and the MAX gradient put between x and max(x)).
  static const UOp* StripExact(const UOp* u) {
    while (IsMovement(u->op()) || u->op() == Op::NEG) u = u->src(0).get();
    return u;
  }
  // For a comparison of a float value x with a MAX reduce of x (x == max(x): the MAX reduce's gradient, Argmax), x
  // when it is computed rather than loaded, else null. Such an x must be stored once: fused into the max's kernel and
  // recomputed in the comparing kernel it need not have the same bits in both (the CPU backend contracts a multiply
  // feeding an add into one FMA where the product has one use, and rounds twice where it has more; GPU compilers do
  // the same), and a row whose max equals none of its recomputed elements loses its gradient (0/0 in is_max/count).
  const UOp* ComparedWithItsMax(const UOp* cmp) const {
    for (int i = 0; i < 2; ++i) {
      const UOp* r = StripExact(cmp->src(i).get());
      if (r->op() != Op::REDUCE_AXIS || std::get<ReduceArg>(r->arg()).op != Op::MAX) continue;
      const UOp* x = StripExact(r->src(0).get());
      if (x != StripExact(cmp->src(1 - i).get()) || !x->dtype().IsFloat()) continue;
      if (x->op() == Op::BUFFER || x->op() == Op::CONST || g_.realized.contains(x)) continue;
      return x;
    }
    return nullptr;
  }

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
  static Rule Decision(const char* pass, UPat pat, std::string name, Decider decide) {
    const bool marker = pass == kFusePass;
    return Rule{std::move(pat),
                [pass, name, decide, marker](const Bindings& b) -> UOpPtr {
                  Scheduler& s = *b.ctx<Scheduler>();
                  if (!decide(s, b.root().get())) return nullptr;
                  s.Count(pass, name);
                  return marker ? UOp::ConstBool(true) : nullptr;
                },
                name};
  }
  void Count(const char* pass, const std::string& rule) {
    ++decisions_;
    if (stats_ != nullptr) stats_->AddHits(pass, pass == kFusePass ? "schedule_fuse" : "schedule_realize", rule);
  }

  // What must be stored before fusion starts (tinygrad's realize patterns). Run over the whole graph by GraphRewrite
  // in walk mode; each node is seen once.
  static const PatternMatcher& RealizeRules() {
    static const PatternMatcher pm(
        {Decision(kRealizePass, UPat(Op::CONTIGUOUS), "contiguous -> realize",
                  [](Scheduler& s, const UOp* u) {
                    // A no-op on a contiguous view of a BUFFER or on a node stored anyway (CONTIGUOUS(CONTIGUOUS(x))).
                    if (IsContiguousBufferView(u->src(0).get()) || s.g_.realized.contains(u->src(0).get()))
                      return false;
                    // A computed node that others read besides the CONTIGUOUS is stored itself, so they all read the
                    // one copy (the CONTIGUOUS becomes a view of it). ResNet-50's block output relu(conv + bias +
                    // shortcut) is made contiguous for the next block's conv and also read by its residual add: with
                    // only the CONTIGUOUS stored, that add recomputed the whole chain from the stored raw conv, which
                    // therefore could not take its epilogue (an extra elementwise kernel per block).
                    const UOp* x = u->src(0).get();
                    auto readers = s.consumers_.find(x);
                    if ((IsElementwise(x->op()) || x->op() == Op::REDUCE_AXIS) && readers != s.consumers_.end() &&
                        readers->second.size() > 1) {
                      s.Realize(x);
                      return true;
                    }
                    s.Realize(u);
                    return true;
                  }),
         Decision(kRealizePass, UPat(Op::ASSIGN), "assign -> store into the target's buffer",
                  [](Scheduler& s, const UOp* u) {
                    if (BufferOf(u->src(0).get()) == nullptr) {
                      if (s.error_.ok())
                        s.error_ = absl::UnimplementedError("schedule: ASSIGN target must be a view of a realized BUFFER");
                      return false;
                    }
                    s.Realize(u);
                    return true;
                  }),
         Decision(kRealizePass, UPat(Op::COPY), "copy to another device -> copy item, source stored",
                  [](Scheduler& s, const UOp* u) {
                    if (s.DeviceOf(u) == s.DeviceOf(u->src(0).get())) return false;
                    s.copies_.insert(u);
                    s.Realize(u);
                    if (!IsContiguousBufferView(u->src(0).get())) s.Realize(u->src(0).get());
                    return true;
                  }),
         Decision(kRealizePass, UPat(OpSet{Op::CMPEQ, Op::CMPNE}), "x == max(x) -> store x once",
                  [](Scheduler& s, const UOp* u) {
                    const UOp* x = s.ComparedWithItsMax(u);
                    if (x == nullptr) return false;
                    s.Realize(x);
                    return true;
                  })},
        "schedule_realize");
    return pm;
  }

  absl::Status InitialRealize(absl::Span<const UOpPtr> roots) {
    RewriteOptions o;
    o.name = kRealizePass;
    o.walk = true;
    o.ctx = this;
    const int64_t before = decisions_;
    KILN_RETURN_IF_ERROR(GraphRewrite(UOp::Sink(std::vector<UOpPtr>(roots.begin(), roots.end())), RealizeRules(), o)
                             .status());
    KILN_RETURN_IF_ERROR(error_);
    if (stats_ != nullptr) stats_->AddPass(kRealizePass, "schedule_realize", decisions_ - before);
    for (const UOpPtr& r : roots) {
      const UOp* u = r.get();
      if (IsContiguousBufferView(u)) continue;
      if (u->op() == Op::CONTIGUOUS && !g_.realized.contains(u)) continue;  // contiguous view already
      Realize(u);
    }
    return absl::OkStatus();
  }

  // Kernel groups: realized nodes (not copies) by union-find representative, in realize order.
  std::vector<std::vector<const UOp*>> Groups() {
    std::vector<std::vector<const UOp*>> groups;
    UOpMap<size_t> at;
    std::vector<const UOp*> sorted = order_;
    std::stable_sort(sorted.begin(), sorted.end(), [&](const UOp* a, const UOp* b) { return pos_[a] < pos_[b]; });
    for (const UOp* u : sorted) {
      if (copies_.contains(u)) continue;
      const UOp* r = uf_.Find(u);
      auto [it, fresh] = at.emplace(r, groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(u);
    }
    return groups;
  }

  // Whether group a (transitively) depends on any node of group b.
  // Whether kernel a reads (through any chain of kernels) what kernel b writes. The groups a reaches are found once
  // per round and kept (reach_, cleared by BuildAll): the fusion decisions ask this for many pairs, and a search per
  // question made scheduling quadratic (SmolLM2's 469-kernel prefill graph: 6 s).
  bool DependsOn(size_t a, size_t b) {
    if (reach_.size() != builds_.size()) reach_.assign(builds_.size(), {});
    std::vector<bool>& r = reach_[a];
    if (r.empty()) {
      r.assign(builds_.size(), false);
      std::vector<size_t> stack{a};
      while (!stack.empty()) {
        const size_t g = stack.back();
        stack.pop_back();
        for (const UOp* d : builds_[g].deps) {
          auto it = group_of_.find(d);
          if (it == group_of_.end() || r[it->second]) continue;
          r[it->second] = true;
          stack.push_back(it->second);
        }
      }
    }
    return r[b];
  }

  // A kernel's build depends only on its group and on the realized set, which only grows: while it has not grown, a
  // group built in an earlier round is taken from `built_`. The rounds that only merge (a pair of sibling reduces or
  // the kernels sharing a reduce per round) rebuild just the merged kernel (the CNN's training step: 10 rounds of
  // ~118 builds, 7 of them merges only; scheduling 37-39 -> 14-16 ms).
  absl::Status BuildAll() {
    groups_ = Groups();
    builds_.clear();
    group_of_.clear();
    reach_.clear();
    if (g_.realized.size() != built_with_realized_) {
      built_.clear();
      built_with_realized_ = g_.realized.size();
    }
    for (size_t i = 0; i < groups_.size(); ++i) {
      for (const UOp* u : groups_[i]) group_of_[u] = i;
      if (auto it = built_.find(groups_[i]); it != built_.end()) {
        builds_.push_back(it->second);
        continue;
      }
      KILN_ASSIGN_OR_RETURN(KernelBuild kb, BuildKernel(g_, groups_[i]));
      built_.emplace(groups_[i], kb);
      builds_.push_back(std::move(kb));
    }
    return absl::OkStatus();
  }

  // Sibling reduces: two kernels of one output shape, neither depending on the other, that read a common input and
  // each reduce it over the same input shape and axes at their top level become one kernel whose sums share one loop
  // nest (KernelBuild::top_reduces), so the common input is read once. A BatchNorm backward's four per-channel sums
  // (the gradients of its scale, shift, mean and inverse deviation) each re-read the routed max-pool gradient and
  // the conv output. Merges one pair per call (the fusion loop rebuilds in between); at most kMaxSiblingOutputs
  // outputs per kernel.
  static constexpr size_t kMaxSiblingOutputs = 8;
  bool MergeSiblingReduces() {
    for (size_t a = 0; a < builds_.size(); ++a) {
      if (builds_[a].top_reduces.empty()) continue;
      for (size_t b = a + 1; b < builds_.size(); ++b) {
        const KernelBuild &ka = builds_[a], &kb = builds_[b];
        if (kb.top_reduces.empty() || groups_[a].size() + groups_[b].size() > kMaxSiblingOutputs)
          continue;
        if (groups_[a][0]->shape() != groups_[b][0]->shape()) continue;
        if (DeviceOf(groups_[a][0]) != DeviceOf(groups_[b][0])) continue;
        bool same_reduce = false, shared_input = false, assign = false;
        for (const std::string& r : ka.top_reduces)
          same_reduce |=
              std::find(kb.top_reduces.begin(), kb.top_reduces.end(), r) != kb.top_reduces.end();
        for (const UOp* in : ka.inputs)
          shared_input |= std::find(kb.inputs.begin(), kb.inputs.end(), in) != kb.inputs.end();
        for (size_t g : {a, b})
          for (const UOp* o : groups_[g]) assign |= o->op() == Op::ASSIGN;
        if (!same_reduce || !shared_input || assign || DependsOn(a, b) || DependsOn(b, a)) continue;
        uf_.Union(groups_[a][0], groups_[b][0]);
        return true;
      }
    }
    return false;
  }

  // What to fuse, decided per node from the kernel builds of one round (KernelBuild: reduce uses, nodes to store).
  // Applied node by node in graph order (PatternMatcher::Rewrite), not by GraphRewrite: a merge changes the builds the
  // later decisions depend on, so it ends the round, and which decision comes first must not depend on a walk.
  static const PatternMatcher& FuseRules() {
    static const PatternMatcher pm(
        {Decision(kFusePass, UPat(Op::ASSIGN), "assign reads its target at another index -> store its value first",
                  [](Scheduler& s, const UOp* u) {
                    if (!s.war_assigns_.contains(u) || s.g_.realized.contains(u->src(1).get())) return false;
                    s.Realize(u->src(1).get());
                    return true;
                  }),
         Decision(kFusePass, UPat(ElementwiseOps()), "expensive elementwise broadcast in a reduce -> store",
                  [](Scheduler& s, const UOp* u) {
                    if (!s.expensive_.contains(u) || s.g_.realized.contains(u)) return false;
                    s.Realize(u);
                    return true;
                  }),
         // A reduce read only inside another reduce's loops (a conv's output read by the next conv) is stored
         // together with its epilogue (bias, residual add, activation) when that chain has no other reader: the
         // reduce then fuses into the epilogue's kernel instead of storing its raw sums for each reader to redo the
         // epilogue per load.
         Decision(kFusePass, UPat(Op::REDUCE_AXIS), "large reduce nested in another reduce -> store its epilogue",
                  [](Scheduler& s, const UOp* u) {
                    if (!s.broadcast_.contains(u) || s.not_nested_.contains(u)) return false;
                    const UOp* e = s.EpilogueTop(u);
                    if (e == u) return false;
                    s.Realize(e);
                    return true;
                  }),
         Decision(kFusePass, UPat(Op::REDUCE_AXIS), "second large loop nest in one kernel -> store",
                  [](Scheduler& s, const UOp* u) {
                    if (!s.another_nest_.contains(u)) return false;
                    s.Realize(u);
                    return true;
                  }),
         Decision(kFusePass, UPat(Op::REDUCE_AXIS), "reduce broadcast back or nested and large -> store",
                  [](Scheduler& s, const UOp* u) {
                    if (!s.broadcast_.contains(u)) return false;
                    s.Realize(u);
                    return true;
                  }),
         Decision(kFusePass, UPat(Op::REDUCE_AXIS), "reduce used at two indices -> store",
                  [](Scheduler& s, const UOp* u) {
                    for (const auto& [gi, keys] : s.uses_[u])
                      if (keys.size() > 1) {
                        s.Realize(u);
                        return true;
                      }
                    return false;
                  }),
         // A pruned build left out the reduces it broadcasts (stored this round), and with them its dependencies on
         // other kernels: merging on it could join a kernel with one that depends on it through such a reduce (a
         // cycle). The next round, with complete builds, decides.
         Decision(kFusePass, UPat(Op::REDUCE_AXIS), "reduce shared with an incomplete build -> wait a round",
                  [](Scheduler& s, const UOp* u) {
                    const auto& by_group = s.uses_[u];
                    if (by_group.size() < 2) return false;
                    for (const auto& [gi, keys] : by_group)
                      if (s.builds_[gi].pruned) return s.waited_ = true;
                    return false;
                  }),
         // Kernels of the same output shape that use the reduce at the same index and do not depend on each other
         // become one kernel with several outputs.
         Decision(kFusePass, UPat(Op::REDUCE_AXIS), "reduce shared by kernels of one index -> one kernel",
                  [](Scheduler& s, const UOp* u) {
                    const auto& by_group = s.uses_[u];
                    if (by_group.size() < 2) return false;
                    const auto& first = *by_group.begin();
                    for (const auto& [gi, keys] : by_group) {
                      if (keys[0] != first.second[0]) return false;
                      if (s.groups_[gi][0]->shape() != s.groups_[first.first][0]->shape()) return false;
                      for (const UOp* o : s.groups_[gi])
                        if (o->op() == Op::ASSIGN) return false;
                      for (const auto& [gj, keys2] : by_group)
                        if (gi != gj && s.DependsOn(gi, gj)) return false;
                    }
                    for (const auto& [gi, keys] : by_group) s.uf_.Union(s.groups_[first.first][0], s.groups_[gi][0]);
                    s.merged_ = true;
                    return true;
                  }),
         Decision(kFusePass, UPat(Op::REDUCE_AXIS), "reduce shared by kernels that cannot merge -> store",
                  [](Scheduler& s, const UOp* u) {
                    if (s.uses_[u].size() < 2) return false;
                    s.Realize(u);
                    return true;
                  })},
        "schedule_fuse");
    return pm;
  }

  // Fusion to a fixed point: build every kernel, let the fuse rules decide, rebuild while anything changed.
  absl::Status Fuse() {
    const int64_t before = decisions_;
    for (int iter = 0;; ++iter) {
      if (iter > 10000) return absl::InternalError("schedule: fusion did not converge");
      KILN_RETURN_IF_ERROR(BuildAll());
      std::map<int, const UOp*> reduce_order;  // deterministic: by topo position
      uses_.clear();
      broadcast_.clear();
      not_nested_.clear();
      another_nest_.clear();
      war_assigns_.clear();
      expensive_.clear();
      std::vector<const UOp*> feedback;  // ASSIGNs and elementwise nodes the builds flagged, in build order
      for (size_t gi = 0; gi < builds_.size(); ++gi) {
        const KernelBuild& kb = builds_[gi];
        if (kb.war_hazard)
          for (const UOp* o : groups_[gi])
            if (o->op() == Op::ASSIGN && war_assigns_.insert(o).second) feedback.push_back(o);
        for (const UOp* u : kb.realize)
          if (expensive_.insert(u).second) feedback.push_back(u);
        for (const schedule::ReduceUse& ru : kb.reduce_uses) {
          reduce_order[pos_[ru.reduce]] = ru.reduce;
          if (ru.broadcast) broadcast_.insert(ru.reduce);
          if (ru.broadcast && !ru.nested) not_nested_.insert(ru.reduce);
          if (ru.another_nest) another_nest_.insert(ru.reduce);
          auto& keys = uses_[ru.reduce][gi];
          if (std::find(keys.begin(), keys.end(), ru.key) == keys.end()) keys.push_back(ru.key);
        }
      }
      int64_t acted = 0;  // decisions that store or merge: each makes another round
      for (const UOp* u : feedback) acted += FuseRules().Rewrite(u->Ptr(), this) != nullptr;
      merged_ = false;
      for (const auto& [p, r] : reduce_order) {
        if (g_.realized.contains(r)) continue;
        waited_ = false;
        if (FuseRules().Rewrite(r->Ptr(), this) != nullptr && !waited_) ++acted;
        if (merged_) break;  // rebuild before deciding more
      }
      const bool changed = acted > 0;
      if (!changed && MergeSiblingReduces()) {
        Count(kFusePass, "sibling reduces over one input -> one kernel");
        continue;
      }
      if (!changed) {
        for (const KernelBuild& kb : builds_)
          if (kb.pruned) return absl::InternalError("schedule: a pruned kernel build survived fusion");
        if (stats_ != nullptr) stats_->AddPass(kFusePass, "schedule_fuse", decisions_ - before);
        return absl::OkStatus();
      }
    }
  }

  absl::StatusOr<Schedule> Emit(absl::Span<const UOpPtr> roots) {
    Schedule s;
    // Items: one per kernel group and one per copy, ordered by Kahn over dependencies (ties: topo position).
    struct Node {
      int prio;
      bool is_copy;
      size_t group;
      const UOp* copy;
      std::vector<size_t> succ;
      int indeg = 0;
    };
    std::vector<Node> nodes;
    UOpMap<size_t> node_of;  // realized node -> item node
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      int prio = pos_[groups_[gi][0]];
      for (const UOp* u : groups_[gi]) {
        prio = std::min(prio, pos_[u]);
        node_of[u] = nodes.size();
      }
      nodes.push_back({prio, false, gi, nullptr, {}, 0});
    }
    for (const UOpKey& c : copies_) {
      node_of[c] = nodes.size();
      nodes.push_back({pos_[c], true, 0, c.get(), {}, 0});
    }
    auto edge = [&](size_t from, size_t to) {
      if (from == to) return;
      if (std::find(nodes[from].succ.begin(), nodes[from].succ.end(), to) != nodes[from].succ.end()) return;
      nodes[from].succ.push_back(to);
      nodes[to].indeg++;
    };
    UOpMap<std::vector<size_t>> readers;  // existing BUFFER -> item nodes loading it
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (nodes[n].is_copy) {
        const UOp* src = nodes[n].copy->src(0).get();
        if (auto it = node_of.find(src); it != node_of.end()) edge(it->second, n);
        else if (const UOp* b = BufferOf(src)) readers[b].push_back(n);
        continue;
      }
      const KernelBuild& kb = builds_[nodes[n].group];
      for (const UOp* d : kb.deps) {
        auto it = node_of.find(d);
        if (it == node_of.end()) return absl::InternalError("schedule: dependency on an unscheduled node");
        edge(it->second, n);
      }
      for (const UOp* in : kb.inputs)
        if (in->op() == Op::BUFFER) readers[in].push_back(n);
    }
    // Write-after-read: readers of a buffer's old contents run before the ASSIGN that overwrites it.
    for (const UOp* u : order_) {
      if (u->op() != Op::ASSIGN) continue;
      size_t an = node_of[u];
      absl::flat_hash_set<size_t> after{an};  // items that already run after the ASSIGN
      std::vector<size_t> stack{an};
      while (!stack.empty()) {
        size_t n = stack.back();
        stack.pop_back();
        for (size_t m : nodes[n].succ)
          if (after.insert(m).second) stack.push_back(m);
      }
      for (size_t rn : readers[BufferOf(u->src(0).get())])
        if (!after.contains(rn)) edge(rn, an);
    }
    std::vector<size_t> sorted;
    auto cmp = [&](size_t a, size_t b) { return nodes[a].prio > nodes[b].prio; };
    std::priority_queue<size_t, std::vector<size_t>, decltype(cmp)> ready(cmp);
    for (size_t n = 0; n < nodes.size(); ++n)
      if (nodes[n].indeg == 0) ready.push(n);
    while (!ready.empty()) {
      size_t n = ready.top();
      ready.pop();
      sorted.push_back(n);
      for (size_t m : nodes[n].succ)
        if (--nodes[m].indeg == 0) ready.push(m);
    }
    if (sorted.size() != nodes.size()) return absl::FailedPreconditionError("schedule: cycle detected in assign graph");

    // Buffers: roots keep theirs; ASSIGNs write their target's; intermediates are planned.
    UOpSet root_set;
    for (const UOpPtr& r : roots) {
      const UOp* v = r.get();  // a root that is a no-op CONTIGUOUS keeps the buffer of the node under it
      while (v->op() == Op::CONTIGUOUS && !g_.realized.contains(v)) v = v->src(0).get();
      root_set.insert(r.get());
      root_set.insert(v);
    }
    schedule::MemoryPlanner planner;
    UOpMap<UOpPtr> buffer_of;
    UOpMap<int> last_use;  // realized intermediate -> last item reading it
    for (size_t i = 0; i < sorted.size(); ++i) {
      const Node& nd = nodes[sorted[i]];
      if (nd.is_copy) {
        last_use[nd.copy->src(0).get()] = static_cast<int>(i);
      } else {
        for (const UOp* in : builds_[nd.group].inputs) last_use[in] = static_cast<int>(i);
      }
    }
    UOpSet input_set;
    for (size_t i = 0; i < sorted.size(); ++i) {
      const Node& nd = nodes[sorted[i]];
      std::vector<const UOp*> outs = nd.is_copy ? std::vector<const UOp*>{nd.copy} : groups_[nd.group];
      for (const UOp* o : outs) {
        if (o->op() == Op::ASSIGN) {
          const UOp* b = BufferOf(o->src(0).get());
          buffer_of[o] = b->Ptr();
          s.assigned.push_back(b->Ptr());
        } else if (root_set.contains(o)) {
          buffer_of[o] = NewBuffer(o->dtype(), o->Numel(), DeviceOf(o));
        } else {
          buffer_of[o] = planner.Acquire(o->dtype(), o->Numel(), DeviceOf(o));
        }
      }
      ScheduleItem item;
      item.num_outputs = static_cast<int>(outs.size());
      item.device = DeviceOf(outs[0]);
      for (const UOp* o : outs) item.buffers.push_back(buffer_of[o]);
      std::vector<const UOp*> ins;
      if (nd.is_copy) {
        item.kind = ScheduleItem::Kind::kCopy;
        const UOp* src = nd.copy->src(0).get();
        const UOp* b = BufferOf(src);
        ins.push_back(g_.realized.contains(src) || b == nullptr ? src : b);
      } else {
        const KernelBuild& kb = builds_[nd.group];
        item.ast = kb.sink;
        ins = kb.inputs;
        for (const auto& [name, val] : kb.binds) {
          auto [it, fresh] = s.var_vals.emplace(name, val);
          if (!fresh && it->second != val)
            return absl::InvalidArgumentError(absl::StrCat("bind mismatch on ", name, ", ", it->second, " != ", val));
        }
      }
      for (const UOp* in : ins) {
        if (in->op() == Op::BUFFER) {
          item.buffers.push_back(in->Ptr());
          if (input_set.insert(in).second) s.inputs.push_back(in->Ptr());
        } else {
          auto it = buffer_of.find(in);
          if (it == buffer_of.end()) return absl::InternalError("schedule: input read before it is written");
          item.buffers.push_back(it->second);
        }
      }
      bool empty = true;
      for (const UOp* o : outs) empty &= o->Numel() == 0;
      if (!empty) s.items.push_back(std::move(item));
      // Release intermediates whose last reader is this item.
      for (const UOp* in : ins)
        if (last_use[in] == static_cast<int>(i) && in->op() != Op::BUFFER && !root_set.contains(in) &&
            in->op() != Op::ASSIGN)
          planner.Release(buffer_of[in]);
    }
    // The items were built over placeholders; now that every lifetime is known, the planned buffers replace them.
    const UOpMap<UOpPtr> planned = planner.Finish();
    auto planned_of = [&](UOpPtr& b) {
      if (auto it = planned.find(b); it != planned.end()) b = it->second;
    };
    for (ScheduleItem& item : s.items)
      for (UOpPtr& b : item.buffers) planned_of(b);
    for (auto& [node, b] : buffer_of) planned_of(b);
    s.intermediate_bytes = planner.requested_bytes();
    s.planned_bytes = planner.allocated_bytes();

    for (const UOpPtr& r : roots) {
      const UOp* u = r.get();
      if (u->op() == Op::ASSIGN) {
        s.outputs.push_back(u->src(0));
      } else if (auto it = buffer_of.find(u); it != buffer_of.end()) {
        s.outputs.push_back(ViewAs(it->second, u->shape()));
      } else {
        const UOp* v = u;
        while (v->op() == Op::CONTIGUOUS && !buffer_of.contains(v)) v = v->src(0).get();
        if (auto bit = buffer_of.find(v); bit != buffer_of.end()) {
          s.outputs.push_back(ViewAs(bit->second, u->shape()));
          continue;
        }
        const UOp* b = BufferOf(v);
        if (b == nullptr) return absl::InternalError("schedule: root neither realized nor a buffer view");
        s.outputs.push_back(v == u ? r : ViewAs(b->Ptr(), u->shape()));
      }
    }
    return s;
  }

  // Every map and set below is keyed by nodes of the scheduled graph (topo_), which the caller holds while Run
  // lasts; UOpKey checks that on every match.
  std::vector<const UOp*> topo_;
  UOpMap<int> pos_;
  UOpMap<std::vector<const UOp*>> consumers_;  // every node's consumers in the scheduled graph (a source used twice: twice)
  UOpMap<std::string> device_;
  GraphInfo g_;
  std::vector<const UOp*> order_;  // realized nodes in the order they were marked
  UOpSet copies_;
  UnionFind uf_;
  std::vector<std::vector<const UOp*>> groups_;
  std::vector<KernelBuild> builds_;
  absl::flat_hash_map<std::vector<const UOp*>, KernelBuild> built_;  // BuildAll's builds by group, while
  size_t built_with_realized_ = 0;                                     // the realized set has this size
  std::vector<std::vector<bool>> reach_;  // DependsOn's memo: per kernel, the kernels it reads from (empty: not yet)
  UOpMap<size_t> group_of_;
  // Fusion-rule state: the decision count and sink, the first error a realize rule met, and one round's facts from
  // the kernel builds (each reduce's uses by group and index, broadcast reduces, ASSIGNs with a write-after-read
  // hazard, expensive elementwise nodes to store), whether a merge ended the round and whether a rule only waited.
  RewriteStats* stats_;
  int64_t decisions_ = 0;
  absl::Status error_;
  UOpMap<std::map<size_t, std::vector<std::vector<UOpPtr>>>> uses_;
  UOpSet broadcast_;
  UOpSet not_nested_;    // reduces among broadcast_ with a broadcast use that is not (only) a nested one
  UOpSet another_nest_;  // reduces with a use as a second, different top-level loop nest of a kernel
  UOpSet war_assigns_;
  UOpSet expensive_;
  bool merged_ = false;
  bool waited_ = false;
};

}  // namespace

absl::StatusOr<Schedule> CreateSchedule(absl::Span<const UOpPtr> graph_roots, const ScheduleOptions& options) {
  for (const UOpPtr& r : graph_roots) {
    if (!r || !r->has_shape()) return absl::InvalidArgumentError("schedule: a root is not a shaped tensor node");
  }
  // Long float sums become partial sums first (split_reduce.h). `split` holds the rewritten graph while it is
  // scheduled.
  const std::vector<UOpPtr> split = schedule::SplitLongReduces(graph_roots);
  absl::Span<const UOpPtr> roots = split;
  // Lowering recurses along the graph's depth on the heap (engine/base/task.h), so a deep graph needs no large
  // stack.
  return Scheduler(options.stats).Run(roots);
}

}  // namespace kiln
