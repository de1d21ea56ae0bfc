// The scheduler's fusion (scheduler.h): kernel groups and their builds, the fuse rules as one named, counted table,
// the rounds that apply them to a fixed point, and the epilogue a nested reduce stores with it.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/schedule/kernel_builder.h"
#include "engine/schedule/scheduler.h"

namespace kiln::schedule {

const UOp* Scheduler::EpilogueTop(const UOp* r) {
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

const UOp* Scheduler::StripExact(const UOp* u) {
  while (IsMovement(u->op()) || u->op() == Op::NEG) u = u->src(0).get();
  return u;
}

const UOp* Scheduler::ComparedWithItsMax(const UOp* cmp) const {
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

Rule Scheduler::Decision(const char* pass, UPat pat, std::string name, Decider decide) {
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

std::vector<std::vector<const UOp*>> Scheduler::Groups() {
  std::vector<std::vector<const UOp*>> groups;
  UOpMap<size_t> at;
  std::vector<const UOp*> sorted = order_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](const UOp* a, const UOp* b) { return pos_[a] < pos_[b]; });
  for (const UOp* u : sorted) {
    if (copies_.contains(u)) continue;
    const UOp* r = uf_.Find(u);
    auto [it, fresh] = at.emplace(r, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(u);
  }
  return groups;
}

bool Scheduler::DependsOn(size_t a, size_t b) {
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

absl::Status Scheduler::BuildAll() {
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

bool Scheduler::MergeSiblingReduces() {
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

const PatternMatcher& Scheduler::FuseRules() {
  static const PatternMatcher pm(
      {Decision(kFusePass, UPat(Op::ASSIGN),
                "assign reads its target at another index -> store its value first",
                [](Scheduler& s, const UOp* u) {
                  if (!s.war_assigns_.contains(u) || s.g_.realized.contains(u->src(1).get()))
                    return false;
                  s.Realize(u->src(1).get());
                  return true;
                }),
       Decision(kFusePass, UPat(ElementwiseOps()),
                "expensive elementwise broadcast in a reduce -> store",
                [](Scheduler& s, const UOp* u) {
                  if (!s.expensive_.contains(u) || s.g_.realized.contains(u)) return false;
                  s.Realize(u);
                  return true;
                }),
       // A reduce read only inside another reduce's loops (a conv's output read by the next conv) is stored
       // together with its epilogue (bias, residual add, activation) when that chain has no other reader: the
       // reduce then fuses into the epilogue's kernel instead of storing its raw sums for each reader to redo the
       // epilogue per load.
       Decision(kFusePass, UPat(Op::REDUCE_AXIS),
                "large reduce nested in another reduce -> store its epilogue",
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
       Decision(kFusePass, UPat(Op::REDUCE_AXIS),
                "reduce broadcast back or nested and large -> store",
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
       Decision(kFusePass, UPat(Op::REDUCE_AXIS),
                "reduce shared with an incomplete build -> wait a round",
                [](Scheduler& s, const UOp* u) {
                  const auto& by_group = s.uses_[u];
                  if (by_group.size() < 2) return false;
                  for (const auto& [gi, keys] : by_group)
                    if (s.builds_[gi].pruned) return s.waited_ = true;
                  return false;
                }),
       // Kernels of the same output shape that use the reduce at the same index and do not depend on each other
       // become one kernel with several outputs.
       Decision(kFusePass, UPat(Op::REDUCE_AXIS),
                "reduce shared by kernels of one index -> one kernel",
                [](Scheduler& s, const UOp* u) {
                  const auto& by_group = s.uses_[u];
                  if (by_group.size() < 2) return false;
                  const auto& first = *by_group.begin();
                  for (const auto& [gi, keys] : by_group) {
                    if (keys[0] != first.second[0]) return false;
                    if (s.groups_[gi][0]->shape() != s.groups_[first.first][0]->shape())
                      return false;
                    for (const UOp* o : s.groups_[gi])
                      if (o->op() == Op::ASSIGN) return false;
                    for (const auto& [gj, keys2] : by_group)
                      if (gi != gj && s.DependsOn(gi, gj)) return false;
                  }
                  for (const auto& [gi, keys] : by_group)
                    s.uf_.Union(s.groups_[first.first][0], s.groups_[gi][0]);
                  s.merged_ = true;
                  return true;
                }),
       Decision(kFusePass, UPat(Op::REDUCE_AXIS),
                "reduce shared by kernels that cannot merge -> store",
                [](Scheduler& s, const UOp* u) {
                  if (s.uses_[u].size() < 2) return false;
                  s.Realize(u);
                  return true;
                })},
      "schedule_fuse");
  return pm;
}

absl::Status Scheduler::Fuse() {
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
    std::vector<const UOp*>
        feedback;  // ASSIGNs and elementwise nodes the builds flagged, in build order
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
        if (kb.pruned)
          return absl::InternalError("schedule: a pruned kernel build survived fusion");
      if (stats_ != nullptr) stats_->AddPass(kFusePass, "schedule_fuse", decisions_ - before);
      return absl::OkStatus();
    }
  }
}

}  // namespace kiln::schedule
