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
#include "engine/schedule/scheduler.h"
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

namespace schedule {

absl::StatusOr<Schedule> Scheduler::Run(absl::Span<const UOpPtr> roots) {
  for (const UOpPtr& r : roots) {
    if (!r || !r->has_shape())
      return absl::InvalidArgumentError("schedule: a root is not a shaped tensor node");
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

absl::Status Scheduler::ComputeDevices() {
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

absl::Status Scheduler::ComputeRows() {
  for (const UOp* u : topo_) {
    const UOp* bind = u->op() == Op::ROWS ? u->src(1).get() : nullptr;
    for (const UOpPtr& s : u->src()) {
      auto it = g_.rows.find(s.get());
      if (it == g_.rows.end()) continue;
      if (bind != nullptr && bind != it->second)
        return absl::InvalidArgumentError(
            absl::StrCat("schedule: ", std::string(OpName(u->op())),
                         " combines tensors of different row bounds (Tensor::Rows)"));
      bind = it->second;
      // (Elementwise sources broadcast from the right: a bounded source of lower rank would not be dim 0.)
      if (!u->has_shape() || u->shape().empty() || s->shape()[0] != u->shape()[0] ||
          (IsElementwise(u->op()) && s->shape().size() != u->shape().size()) || !KeepsRows(u))
        return absl::InvalidArgumentError(
            absl::StrCat("schedule: ", std::string(OpName(u->op())), " ", ShapeToString(s->shape()),
                         " -> ", u->has_shape() ? ShapeToString(u->shape()) : std::string("()"),
                         " mixes the rows of a tensor with a symbolic row count (Tensor::Rows): "
                         "only its first rows are computed"));
    }
    if (bind != nullptr) g_.rows[u] = bind;
  }
  return absl::OkStatus();
}

bool Scheduler::KeepsRows(const UOp* u) {
  const Op op = u->op();
  if (IsElementwise(op) || op == Op::ROWS || op == Op::CONTIGUOUS ||
      op == Op::CONTIGUOUS_BACKWARD || op == Op::DETACH || op == Op::COPY || op == Op::RESHAPE ||
      op == Op::EXPAND)
    return true;  // RESHAPE and EXPAND: dim 0 kept (checked by the caller), so row-major rows stay rows
  const IntVec* v = std::get_if<IntVec>(&u->arg());
  switch (op) {
    case Op::PERMUTE:
      return v != nullptr && !v->empty() && (*v)[0] == 0;
    case Op::PAD:
      return v != nullptr && v->size() >= 2 && (*v)[0] == 0 && (*v)[1] == 0;
    case Op::SHRINK:
      return v != nullptr && v->size() >= 2 && (*v)[0] == 0 && (*v)[1] == u->src(0)->shape()[0];
    case Op::FLIP:
      return v != nullptr && !v->empty() && (*v)[0] == 0;
    case Op::REDUCE_AXIS: {
      const IntVec& axes = std::get<ReduceArg>(u->arg()).axes;
      return std::find(axes.begin(), axes.end(), 0) == axes.end();
    }
    default:
      return false;
  }
}

const PatternMatcher& Scheduler::RealizeRules() {
  static const PatternMatcher pm(
      {Decision(
           kRealizePass, UPat(Op::CONTIGUOUS), "contiguous -> realize",
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
             if ((IsElementwise(x->op()) || x->op() == Op::REDUCE_AXIS) &&
                 readers != s.consumers_.end() && readers->second.size() > 1) {
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
                      s.error_ = absl::UnimplementedError(
                          "schedule: ASSIGN target must be a view of a realized BUFFER");
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

absl::Status Scheduler::InitialRealize(absl::Span<const UOpPtr> roots) {
  RewriteOptions o;
  o.name = kRealizePass;
  o.walk = true;
  o.ctx = this;
  const int64_t before = decisions_;
  KILN_RETURN_IF_ERROR(
      GraphRewrite(UOp::Sink(std::vector<UOpPtr>(roots.begin(), roots.end())), RealizeRules(), o)
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

absl::StatusOr<Schedule> Scheduler::Emit(absl::Span<const UOpPtr> roots) {
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
    if (std::find(nodes[from].succ.begin(), nodes[from].succ.end(), to) != nodes[from].succ.end())
      return;
    nodes[from].succ.push_back(to);
    nodes[to].indeg++;
  };
  UOpMap<std::vector<size_t>> readers;  // existing BUFFER -> item nodes loading it
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].is_copy) {
      const UOp* src = nodes[n].copy->src(0).get();
      if (auto it = node_of.find(src); it != node_of.end())
        edge(it->second, n);
      else if (const UOp* b = BufferOf(src))
        readers[b].push_back(n);
      continue;
    }
    const KernelBuild& kb = builds_[nodes[n].group];
    for (const UOp* d : kb.deps) {
      auto it = node_of.find(d);
      if (it == node_of.end())
        return absl::InternalError("schedule: dependency on an unscheduled node");
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
  if (sorted.size() != nodes.size())
    return absl::FailedPreconditionError("schedule: cycle detected in assign graph");

  // Buffers: roots keep theirs; ASSIGNs write their target's; intermediates are planned.
  UOpSet root_set;
  for (const UOpPtr& r : roots) {
    const UOp* v =
        r.get();  // a root that is a no-op CONTIGUOUS keeps the buffer of the node under it
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
    std::vector<const UOp*> outs =
        nd.is_copy ? std::vector<const UOp*>{nd.copy} : groups_[nd.group];
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
          return absl::InvalidArgumentError(
              absl::StrCat("bind mismatch on ", name, ", ", it->second, " != ", val));
      }
    }
    for (const UOp* in : ins) {
      if (in->op() == Op::BUFFER) {
        item.buffers.push_back(in->Ptr());
        if (input_set.insert(in).second) s.inputs.push_back(in->Ptr());
      } else {
        auto it = buffer_of.find(in);
        if (it == buffer_of.end())
          return absl::InternalError("schedule: input read before it is written");
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
      if (b == nullptr)
        return absl::InternalError("schedule: root neither realized nor a buffer view");
      s.outputs.push_back(v == u ? r : ViewAs(b->Ptr(), u->shape()));
    }
  }
  return s;
}

}  // namespace schedule

absl::StatusOr<Schedule> CreateSchedule(absl::Span<const UOpPtr> graph_roots,
                                        const ScheduleOptions& options) {
  for (const UOpPtr& r : graph_roots) {
    if (!r || !r->has_shape())
      return absl::InvalidArgumentError("schedule: a root is not a shaped tensor node");
  }
  // Long float sums become partial sums first (split_reduce.h). `split` holds the rewritten graph while it is
  // scheduled.
  const std::vector<UOpPtr> split = schedule::SplitLongReduces(graph_roots);
  absl::Span<const UOpPtr> roots = split;
  // Lowering recurses along the graph's depth on the heap (engine/base/task.h), so a deep graph needs no large
  // stack.
  return schedule::Scheduler(options.stats).Run(roots);
}

}  // namespace kiln
