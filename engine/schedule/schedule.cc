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
  absl::StatusOr<Schedule> Run(absl::Span<const UOpPtr> roots) {
    for (const UOpPtr& r : roots) {
      if (!r || !r->has_shape()) return absl::InvalidArgumentError("schedule: a root is not a shaped tensor node");
    }
    topo_ = Toposort(roots);
    for (size_t i = 0; i < topo_.size(); ++i) pos_[topo_[i]] = static_cast<int>(i);
    KILN_RETURN_IF_ERROR(ComputeDevices());
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
  std::string DeviceOf(const UOp* u) {
    auto it = device_.find(u);
    return it == device_.end() || it->second.empty() ? DefaultDevice() : it->second;
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

  absl::Status InitialRealize(absl::Span<const UOpPtr> roots) {
    for (const UOp* u : topo_) {
      switch (u->op()) {
        case Op::CONTIGUOUS:
          // A no-op on a contiguous view of a BUFFER or on a node that is stored anyway (CONTIGUOUS(CONTIGUOUS(x))).
          if (!IsContiguousBufferView(u->src(0).get()) && !g_.realized.contains(u->src(0).get())) Realize(u);
          break;
        case Op::ASSIGN:
          if (BufferOf(u->src(0).get()) == nullptr)
            return absl::UnimplementedError("schedule: ASSIGN target must be a view of a realized BUFFER");
          Realize(u);
          break;
        case Op::COPY:
          if (DeviceOf(u) != DeviceOf(u->src(0).get())) {
            copies_.insert(u);
            Realize(u);
            if (!IsContiguousBufferView(u->src(0).get())) Realize(u->src(0).get());
          }
          break;
        case Op::CMPEQ:
        case Op::CMPNE:
          if (const UOp* x = ComparedWithItsMax(u)) Realize(x);
          break;
        default: break;
      }
    }
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
  bool DependsOn(size_t a, size_t b) {
    absl::flat_hash_set<size_t> seen;
    std::vector<size_t> stack{a};
    while (!stack.empty()) {
      size_t g = stack.back();
      stack.pop_back();
      if (!seen.insert(g).second) continue;
      for (const UOp* d : builds_[g].deps) {
        auto it = group_of_.find(d);
        if (it == group_of_.end()) continue;
        if (it->second == b) return true;
        stack.push_back(it->second);
      }
    }
    return false;
  }

  absl::Status BuildAll() {
    groups_ = Groups();
    builds_.clear();
    group_of_.clear();
    for (size_t i = 0; i < groups_.size(); ++i) {
      for (const UOp* u : groups_[i]) group_of_[u] = i;
      KILN_ASSIGN_OR_RETURN(KernelBuild kb, BuildKernel(g_, groups_[i]));
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

  // Fusion to a fixed point: realize reductions that must not be fused, merge kernels sharing one.
  absl::Status Fuse() {
    for (int iter = 0;; ++iter) {
      if (iter > 10000) return absl::InternalError("schedule: fusion did not converge");
      KILN_RETURN_IF_ERROR(BuildAll());
      bool changed = false;
      // reduce -> group -> distinct keys
      std::map<int, const UOp*> reduce_order;  // deterministic: by topo position
      UOpMap<std::map<size_t, std::vector<std::vector<UOpPtr>>>> uses;
      UOpSet broadcast;
      for (size_t gi = 0; gi < builds_.size(); ++gi) {
        const KernelBuild& kb = builds_[gi];
        if (kb.war_hazard) {
          for (const UOp* o : groups_[gi])
            if (o->op() == Op::ASSIGN && !g_.realized.contains(o->src(1).get())) {
              Realize(o->src(1).get());
              changed = true;
            }
        }
        for (const UOp* u : kb.realize) {
          if (!g_.realized.contains(u)) {
            Realize(u);
            changed = true;
          }
        }
        for (const schedule::ReduceUse& ru : kb.reduce_uses) {
          reduce_order[pos_[ru.reduce]] = ru.reduce;
          if (ru.broadcast) broadcast.insert(ru.reduce);
          auto& keys = uses[ru.reduce][gi];
          if (std::find(keys.begin(), keys.end(), ru.key) == keys.end()) keys.push_back(ru.key);
        }
      }
      for (const auto& [p, r] : reduce_order) {
        if (g_.realized.contains(r)) continue;
        const auto& by_group = uses[r];
        bool realize = broadcast.contains(r);
        for (const auto& [gi, keys] : by_group) realize |= keys.size() > 1;
        if (!realize && by_group.size() > 1) {
          // A pruned build left out the reduces it broadcasts (realized this round), and with them its dependencies
          // on other kernels: merging on it could join a kernel with one that depends on it through such a reduce
          // (a cycle). The next round, with complete builds, decides.
          bool pruned = false;
          for (const auto& [gi, keys] : by_group) pruned |= builds_[gi].pruned;
          if (pruned) continue;
          // Merge the kernels into one with several outputs if they agree on shape and index and are independent.
          const auto& first = *by_group.begin();
          bool can_merge = true;
          for (const auto& [gi, keys] : by_group) {
            can_merge &= keys[0] == first.second[0];
            can_merge &= groups_[gi][0]->shape() == groups_[first.first][0]->shape();
            for (const UOp* o : groups_[gi]) can_merge &= o->op() != Op::ASSIGN;
            for (const auto& [gj, keys2] : by_group)
              if (gi != gj) can_merge &= !DependsOn(gi, gj);
          }
          if (can_merge) {
            for (const auto& [gi, keys] : by_group) uf_.Union(groups_[first.first][0], groups_[gi][0]);
            changed = true;
            break;  // rebuild before deciding more
          }
          realize = true;
        }
        if (realize) {
          Realize(r);
          changed = true;
        }
      }
      if (!changed && MergeSiblingReduces()) continue;
      if (!changed) {
        for (const KernelBuild& kb : builds_)
          if (kb.pruned) return absl::InternalError("schedule: a pruned kernel build survived fusion");
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
  UOpMap<std::string> device_;
  GraphInfo g_;
  std::vector<const UOp*> order_;  // realized nodes in the order they were marked
  UOpSet copies_;
  UnionFind uf_;
  std::vector<std::vector<const UOp*>> groups_;
  std::vector<KernelBuild> builds_;
  UOpMap<size_t> group_of_;
};

}  // namespace

absl::StatusOr<Schedule> CreateSchedule(absl::Span<const UOpPtr> graph_roots) {
  for (const UOpPtr& r : graph_roots) {
    if (!r || !r->has_shape()) return absl::InvalidArgumentError("schedule: a root is not a shaped tensor node");
  }
  // Long float sums become partial sums first (split_reduce.h). `split` holds the rewritten graph while it is
  // scheduled.
  const std::vector<UOpPtr> split = schedule::SplitLongReduces(graph_roots);
  absl::Span<const UOpPtr> roots = split;
  // Lowering recurses along the graph's depth on the heap (engine/base/task.h), so a deep graph needs no large
  // stack.
  return Scheduler().Run(roots);
}

}  // namespace kiln
