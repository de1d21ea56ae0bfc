// Linearize: a lowered kernel graph -> the ordered uop list of docs/kernel-ir.md §3.
//
// Every node runs inside the loops of the RANGEs it depends on (RangeSets). Loops nest in the kernel's axis order
// (LowerContext::order): a RANGE's parent is the innermost earlier range it ever appears together with, so ranges
// that never meet become sibling loops. A node is placed in the block of its innermost range, so loop-invariant
// code is hoisted out of the inner loops that do not use it; PARAM/DEFINE_*/CONST land at the top. Within a block,
// nodes and child loops are ordered by a priority toposort (priority = position in the graph's own toposort, a
// child loop ranks at its END), so the result is deterministic.
#include <algorithm>
#include <queue>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {
namespace {

class Linearizer {
 public:
  Linearizer(const UOpPtr& sink, const LowerContext& ctx) : sink_(sink), ctx_(ctx), rs_(sink) {}

  absl::StatusOr<std::vector<UOpPtr>> Run() {
    std::vector<const UOp*> topo = Toposort(sink_);
    for (const UOp* u : topo) {
      if (u == sink_.get()) continue;
      pos_[u] = static_cast<int64_t>(nodes_.size());
      nodes_.push_back(u);
    }
    // Loop tree.
    for (const UOp* u : nodes_) {
      std::vector<const UOp*> r = Sorted(u);
      for (size_t i = 1; i < r.size(); ++i) {
        const UOp*& p = parent_[r[i]];
        if (p == nullptr || ctx_.OrderOf(r[i - 1]) > ctx_.OrderOf(p)) p = r[i - 1];
      }
      if (u->op() == Op::RANGE) parent_.try_emplace(u, nullptr);
    }
    for (const UOp* u : nodes_) {
      std::vector<const UOp*> r = Sorted(u);
      for (size_t i = 1; i < r.size(); ++i) {
        if (!IsAncestor(r[i - 1], r[i]))
          return absl::InternalError("linearize: the loops a node needs do not nest (ranges used in two orders)");
      }
    }
    // END per range.
    for (const UOp* u : nodes_) {
      if (u->op() != Op::END) continue;
      const UOp* r = u->src(u->num_src() - 1).get();
      if (r->op() != Op::RANGE) return absl::InternalError("linearize: END whose last source is not a RANGE");
      if (!end_.emplace(r, UOpPtr::FromRaw(u)).second)
        return absl::InternalError("linearize: two ENDs close the same RANGE");
    }
    std::vector<const UOp*> ranges;
    for (const UOp* u : nodes_)
      if (u->op() == Op::RANGE) ranges.push_back(u);
    for (const UOp* r : ranges) {
      if (!end_.contains(r)) {
        UOpPtr e = UOp::Make(Op::END, dtypes::kVoid, {UOpPtr::FromRaw(r)});
        synthesized_.push_back(e);
        pos_[e.get()] = static_cast<int64_t>(nodes_.size());
        nodes_.push_back(e.get());
        end_.emplace(r, e);
      }
    }
    for (const UOp* u : nodes_) {
      block_[u] = BlockOf(u);
      members_[block_[u]].push_back(u);
    }
    for (auto& [r, p] : parent_) children_[p].push_back(r);
    KILN_RETURN_IF_ERROR(EmitBlock(nullptr));
    // Verify: each node once, after its sources.
    absl::flat_hash_set<const UOp*> seen;
    for (const UOpPtr& u : out_) {
      for (const UOpPtr& s : u->src())
        if (!seen.contains(s.get()))
          return absl::InternalError(absl::StrCat("linearize: ", std::string(OpName(u->op())),
                                                  " placed before its source ", std::string(OpName(s->op()))));
      if (!seen.insert(u.get()).second) return absl::InternalError("linearize: a node was placed twice");
    }
    if (out_.size() != nodes_.size()) return absl::InternalError("linearize: some nodes were not placed");
    return std::move(out_);
  }

 private:
  std::vector<const UOp*> Sorted(const UOp* u) const {
    std::vector<const UOp*> r = rs_.Of(u);
    std::stable_sort(r.begin(), r.end(), [&](const UOp* a, const UOp* b) { return ctx_.OrderOf(a) < ctx_.OrderOf(b); });
    return r;
  }
  const UOp* Parent(const UOp* r) const {
    auto it = parent_.find(r);
    return it == parent_.end() ? nullptr : it->second;
  }
  bool IsAncestor(const UOp* a, const UOp* b) const {
    for (const UOp* p = Parent(b); p != nullptr; p = Parent(p))
      if (p == a) return true;
    return false;
  }
  const UOp* BlockOf(const UOp* u) const {
    if (u->op() == Op::RANGE) return u;
    if (u->op() == Op::END) return u->src(u->num_src() - 1).get();
    std::vector<const UOp*> r = Sorted(u);
    return r.empty() ? nullptr : r.back();
  }
  // The item of block `b` that contains block `inner` (a child loop of b), `inner` itself when it is b, or null
  // when `inner` is not inside b.
  const UOp* LiftTo(const UOp* inner, const UOp* b, bool* found) const {
    *found = false;
    if (inner == b) {
      *found = true;
      return nullptr;
    }
    for (const UOp* x = inner; x != nullptr; x = Parent(x)) {
      if (Parent(x) == b) {
        *found = true;
        return x;
      }
    }
    return nullptr;
  }
  void CollectSubtree(const UOp* loop, std::vector<const UOp*>& out) const {
    std::vector<const UOp*> stack{loop};
    while (!stack.empty()) {
      const UOp* b = stack.back();
      stack.pop_back();
      if (auto it = members_.find(b); it != members_.end()) out.insert(out.end(), it->second.begin(), it->second.end());
      if (auto it = children_.find(b); it != children_.end()) stack.insert(stack.end(), it->second.begin(), it->second.end());
    }
  }

  absl::Status EmitBlock(const UOp* b) {
    // Items: member nodes (RANGE b and END b excluded) and child loops.
    struct Item {
      const UOp* node = nullptr;  // a node item
      const UOp* loop = nullptr;  // or a child loop
      int64_t prio = 0;
      std::vector<int> users;
      int pending = 0;
    };
    std::vector<Item> items;
    absl::flat_hash_map<const UOp*, int> node_item, loop_item;
    if (auto it = members_.find(b); it != members_.end()) {
      for (const UOp* u : it->second) {
        if (u == b || (b != nullptr && u == end_.at(b).get())) continue;
        node_item[u] = static_cast<int>(items.size());
        items.push_back({u, nullptr, pos_.at(u), {}, 0});
      }
    }
    if (auto it = children_.find(b); it != children_.end()) {
      std::vector<const UOp*> kids = it->second;
      std::sort(kids.begin(), kids.end(), [&](const UOp* x, const UOp* y) { return pos_.at(x) < pos_.at(y); });
      for (const UOp* c : kids) {
        loop_item[c] = static_cast<int>(items.size());
        items.push_back({nullptr, c, pos_.at(end_.at(c).get()), {}, 0});
      }
    }
    auto item_of = [&](const UOp* s) -> int {
      bool found = false;
      const UOp* l = LiftTo(block_.at(s), b, &found);
      if (!found) return -1;
      if (l == nullptr) {
        auto it = node_item.find(s);
        return it == node_item.end() ? -1 : it->second;  // RANGE b / END b: emitted around the block
      }
      return loop_item.at(l);
    };
    for (int i = 0; i < static_cast<int>(items.size()); ++i) {
      std::vector<const UOp*> inside;
      if (items[i].node != nullptr) inside.push_back(items[i].node);
      else CollectSubtree(items[i].loop, inside);
      absl::flat_hash_set<int> deps;
      for (const UOp* m : inside) {
        for (const UOpPtr& s : m->src()) {
          int d = item_of(s.get());
          if (d >= 0 && d != i) deps.insert(d);
        }
      }
      for (int d : deps) {
        items[d].users.push_back(i);
        ++items[i].pending;
      }
    }
    if (b != nullptr) out_.push_back(UOpPtr::FromRaw(b));
    using QE = std::pair<int64_t, int>;
    std::priority_queue<QE, std::vector<QE>, std::greater<QE>> ready;
    for (int i = 0; i < static_cast<int>(items.size()); ++i)
      if (items[i].pending == 0) ready.push({items[i].prio, i});
    size_t emitted = 0;
    while (!ready.empty()) {
      int i = ready.top().second;
      ready.pop();
      ++emitted;
      if (items[i].node != nullptr) {
        out_.push_back(UOpPtr::FromRaw(items[i].node));
      } else {
        KILN_RETURN_IF_ERROR(EmitBlock(items[i].loop));
      }
      for (int u : items[i].users)
        if (--items[u].pending == 0) ready.push({items[u].prio, u});
    }
    if (emitted != items.size()) return absl::InternalError("linearize: dependency cycle between a loop and its block");
    if (b != nullptr) out_.push_back(end_.at(b));
    return absl::OkStatus();
  }

  const UOpPtr& sink_;
  const LowerContext& ctx_;
  RangeSets rs_;
  std::vector<const UOp*> nodes_;
  std::vector<UOpPtr> synthesized_;
  absl::flat_hash_map<const UOp*, int64_t> pos_;
  absl::flat_hash_map<const UOp*, const UOp*> parent_;  // RANGE -> parent RANGE (null = top level)
  absl::flat_hash_map<const UOp*, UOpPtr> end_;
  absl::flat_hash_map<const UOp*, const UOp*> block_;
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> members_;
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> children_;
  std::vector<UOpPtr> out_;
};

}  // namespace

absl::StatusOr<std::vector<UOpPtr>> Linearize(const UOpPtr& sink, const LowerContext& ctx) {
  Linearizer lin(sink, ctx);
  return lin.Run();
}

}  // namespace kiln::codegen
