// Shared lanes -> vector ops (targets with Target::supports_vectors).
//
// Expanded lanes are scalar copies that LLVM's SLP vectorizer packs back into vectors, one tree at a time, from its
// seeds (stores, reductions, phis). It does not pack a value that several trees share: vectorizing the first tree
// would leave the value's other (still scalar) users to extract every lane, and its cost model then finds no tree
// profitable. A batched decode step's quantized matrix-vector product is such a kernel: each dequantized weight
// lane (a byte load, a shift or a sign extension, a convert, a scale) feeds one multiply-add per slot, and with 8
// slots upcast SmolLM2's LM head and attention projections compiled to scalar code (78.8 ms for the LM head's 8
// slots, 626 us per 576 x 576 projection, where 1 slot takes 12 us).
//
// This pass builds those shared values as vector ops: starting from runs of consecutive loads, it follows the users
// of lane 0 and makes a vector op of every set of lane copies that are the same op on the same lanes of vector
// values or on one shared scalar (broadcast), and replaces each copy with a GEP of its lane. The trees that read
// them (one per slot) then start from lanes of one vector, which SLP packs for free. It runs on kernels that read a
// narrow (< 32-bit) buffer in runs of 16 and where some vector value feeds two or more vector values, and on kernels
// that store two or more outputs (several reduces over the same values) with such a value in runs of 8 float loads:
// the BatchNorm backward's sums (sum(g) and sum(g * xhat), g and xhat shared) over 8 accumulator lanes, which SLP
// left scalar ("possible but not beneficial"): the CNN's conv2 one 12 -> 2.3 ms on a 2-core Zen 3. Other kernels'
// code stays as SLP makes it (a float matrix-vector product built this way measured 5-30% slower in some shapes).
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {
namespace {

struct Group {
  UOpPtr vec;
  std::vector<const UOp*> lanes;  // one scalar copy per lane, lane order
  bool narrow = false;            // computed from a narrow buffer's loads
  int feeds = 0;                  // vector groups that read this one
};

// The kernel with its shared lane copies built as vectors of `width` lanes, or null where no vector is shared (or,
// unless `wide` says that values computed from float buffers count, none computed from a narrow buffer).
UOpPtr BuildSharedLanes(const UOpPtr& sink, const std::vector<const UOp*>& topo,
                        const absl::flat_hash_set<const UOp*>& stored,
                        const absl::flat_hash_map<const UOp*, std::vector<const UOp*>>& users, size_t width,
                        bool wide) {
  // Seeds: runs of `width` plain scalar loads of consecutive elements of a buffer the kernel does not store to, per
  // (buffer, base) in first-load order (so the groups, and the code, do not depend on node addresses).
  absl::flat_hash_map<std::pair<const UOp*, const UOp*>, size_t> base_index;
  std::vector<std::map<int64_t, const UOp*>> by_base;
  for (const UOp* u : topo) {
    if (u->op() != Op::LOAD || u->num_src() != 1 || u->dtype().count != 1 || u->dtype().IsBool()) continue;
    const UOp* ix = u->src(0).get();
    if (ix->op() != Op::INDEX || ix->num_src() != 2 || ix->src(0)->op() != Op::PARAM) continue;
    if (stored.contains(ix->src(0).get())) continue;
    auto [base, off] = SplitOffset(ix->src(1));
    auto [it, fresh] = base_index.emplace(std::make_pair(ix->src(0).get(), base.get()), by_base.size());
    if (fresh) by_base.emplace_back();
    by_base[it->second].emplace(off, u);
  }
  std::vector<Group> groups;
  absl::flat_hash_map<const UOp*, std::pair<size_t, size_t>> member;  // scalar copy -> (group, lane)
  auto add_group = [&](Group g) {
    for (size_t l = 0; l < g.lanes.size(); ++l) member[g.lanes[l]] = {groups.size(), l};
    groups.push_back(std::move(g));
  };
  for (const std::map<int64_t, const UOp*>& loads : by_base) {
    std::vector<const UOp*> run;
    int64_t prev = 0;
    for (const auto& [off, load] : loads) {
      if (!run.empty() && off != prev + 1) run.clear();
      if (run.empty() && off % static_cast<int64_t>(width) != 0) {
        prev = off;
        continue;  // runs start on a whole vector of lanes
      }
      run.push_back(load);
      prev = off;
      if (run.size() == width) {
        const UOp* first = run.front();
        Group g;
        g.vec = UOp::Make(Op::LOAD, first->dtype().Vec(width), {first->src(0)}, first->arg());
        g.lanes = run;
        g.narrow = first->dtype().ItemSize() < 4;
        add_group(std::move(g));
        run.clear();
      }
    }
  }
  if (groups.empty()) return nullptr;
  // Grow: a set of lane copies of one op whose sources are, position by position, the same lanes of one group or
  // one scalar shared by every lane.
  static const std::vector<const UOp*> kNoUsers;
  const auto lane_users = [&](const UOp* lane) -> const std::vector<const UOp*>& {
    auto it = users.find(lane);
    return it == users.end() ? kNoUsers : it->second;
  };
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const std::vector<const UOp*> lanes = groups[gi].lanes;
    for (const UOp* u0 : lane_users(lanes[0])) {
      if (member.contains(u0) || u0->dtype().count != 1 || u0->dtype().is_ptr) continue;
      if (!IsALU(u0->op()) && u0->op() != Op::CAST && u0->op() != Op::BITCAST) continue;
      // Per source position: the group it reads lane-wise (or none: a broadcast).
      std::vector<int64_t> src_group(u0->num_src(), -1);
      bool ok = true;
      for (size_t q = 0; q < u0->num_src() && ok; ++q) {
        auto it = member.find(u0->src(q).get());
        if (it != member.end() && it->second.second == 0) src_group[q] = static_cast<int64_t>(it->second.first);
        ok = u0->src(q)->dtype().count == 1;
      }
      if (!ok) continue;
      std::vector<const UOp*> copies{u0};
      for (size_t l = 1; l < width && ok; ++l) {
        const UOp* found = nullptr;
        for (const UOp* ul : lane_users(lanes[l])) {
          if (ul->op() != u0->op() || ul->dtype() != u0->dtype() || ul->num_src() != u0->num_src() ||
              !(ul->arg() == u0->arg()) || member.contains(ul))
            continue;
          bool match = true;
          for (size_t q = 0; q < u0->num_src() && match; ++q) {
            match = src_group[q] >= 0 ? ul->src(q).get() == groups[src_group[q]].lanes[l]
                                      : ul->src(q).get() == u0->src(q).get();
          }
          if (match) {
            found = ul;
            break;
          }
        }
        ok = found != nullptr;
        if (ok) copies.push_back(found);
      }
      if (!ok) continue;
      UOpVec srcs;
      bool narrow = false;
      for (size_t q = 0; q < u0->num_src(); ++q) {
        if (src_group[q] >= 0) {
          srcs.push_back(groups[src_group[q]].vec);
          narrow |= groups[src_group[q]].narrow;
        } else {
          const UOpPtr& s = u0->src(q);
          srcs.push_back(UOp::Make(Op::VECTORIZE, s->dtype().Vec(width), UOpVec(width, s)));
        }
      }
      for (size_t q = 0; q < u0->num_src(); ++q)
        if (src_group[q] >= 0) ++groups[src_group[q]].feeds;
      Group g;
      g.vec = UOp::Make(u0->op(), u0->dtype().Vec(width), srcs, u0->arg());
      g.lanes = copies;
      g.narrow = narrow;
      add_group(std::move(g));
    }
  }
  bool shared = false;
  for (const Group& g : groups) shared |= (g.narrow || wide) && g.feeds >= 2;
  if (!shared) return nullptr;
  absl::flat_hash_map<const UOp*, UOpPtr> repl;
  for (const Group& g : groups) {
    for (size_t l = 0; l < g.lanes.size(); ++l)
      repl.emplace(g.lanes[l], UOp::Make(Op::GEP, g.lanes[l]->dtype(), {g.vec}, Arg(IntVec{static_cast<int64_t>(l)})));
  }
  return RewriteBottomUp(sink, [&](const UOp* orig, const UOpPtr&) -> UOpPtr {
    auto it = repl.find(orig);
    return it == repl.end() ? nullptr : it->second;
  });
}

}  // namespace

absl::StatusOr<UOpPtr> VectorizeSharedLanes(const UOpPtr& sink, LowerContext& ctx) {
  if (!ctx.target.supports_vectors || ctx.target.has_local) return sink;
  const std::vector<const UOp*> topo = Toposort(sink);
  absl::flat_hash_set<const UOp*> stored;
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> users;
  for (const UOp* u : topo) {
    if (u->op() == Op::STORE && u->src(0)->op() == Op::INDEX) stored.insert(u->src(0)->src(0).get());
    for (const UOpPtr& s : u->src()) users[s.get()].push_back(u);
  }
  if (UOpPtr built = BuildSharedLanes(sink, topo, stored, users, 16, /*wide=*/false)) return built;
  const auto outputs = std::count_if(stored.begin(), stored.end(), [](const UOp* b) { return b->op() == Op::PARAM; });
  if (outputs < 2) return sink;
  UOpPtr built = BuildSharedLanes(sink, topo, stored, users, 8, /*wide=*/true);
  return built ? built : sink;
}

}  // namespace kiln::codegen
