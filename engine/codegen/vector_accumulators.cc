// Lane-wise accumulator updates -> one vector update, and the lanes' final sum -> a tree (targets with
// Target::supports_vectors, no work-groups).
//
// An upcast reduce lowers to one accumulator slot per lane (LowerReduces): the loop body stores acc[k + i] =
// acc[k + i] + lane i of a vector product, for i = 0..15, as scalar loads, extracts, adds and stores of a DEFINE_REG,
// and after the loop the lanes are summed as a chain ((acc[k] + acc[k + 1]) + ...) + acc[k + 15]. LLVM's SLP
// vectorizer packed the updates into a vector phi only while a kernel had few of them (SmolLM2's 8-slot decode
// kernels stayed scalar), and the chains stayed w - 1 extracts and scalar adds in a row: in the 8-slot gate/up kernel
// 480 scalar adds per 16 outputs, against 36 iterations of 16 vector multiply-adds.
//
// 1. Runs of 16, 8 or 4 stores to consecutive slots of one register whose values are the same expression lane by
//    lane (an op on the same lanes of one vector, on consecutive elements of a buffer, on a scalar every lane
//    shares, or on the slot's own current value) become one vector load, op and store of the slots. The arithmetic
//    of each lane is exactly that of the scalar code.
// 2. A chain that sums 4..64 (a power of two) consecutive slots of one register after its loop becomes one vector
//    load of them and a tree: the two halves added until one lane is left. This changes the order of the final
//    additions (a tree instead of a left-to-right chain; no less accurate), as tinygrad's and LLVM's own horizontal
//    reductions do.
// 3. Runs of 16, 8 or 4 ungated stores to consecutive elements of a buffer whose values are one expression lane by
//    lane become one vector store of that expression built as vector ops (VectorOutputs below): a tile's epilogue,
//    and elementwise kernels' upcast lanes, which LLVM's SLP vectorizer would otherwise have to rebuild.
// Measured on a 2-core AVX-512 Xeon: SmolLM2 decode 1 / 4 / 8 slots 10-16% / 15-17% / 12-17% faster, prefill
// 12-17%; ResNet-50, MiniLM and the Fashion-MNIST CNN within noise. Step 3: the same kernel times (ResNet-50's
// pointwise convs, whose epilogues SLP had left scalar, within noise: the stores hid behind the reduce loop), and
// LLVM's share of the cold training step's compile 9% less (2.22-2.30 -> 2.02 s of CPU over its 115 kernels).
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

// The register slot `index` (INDEX(reg or AFTER(reg, ...), CONST k)) addresses: its register and k, or null.
std::pair<const UOp*, int64_t> RegSlot(const UOp* index) {
  if (index->op() != Op::INDEX || index->num_src() != 2) return {nullptr, 0};
  const UOp* base = index->src(0).get();
  if (base->op() == Op::AFTER) base = base->src(0).get();
  int64_t k = 0;
  if (base->op() != Op::DEFINE_REG || !ConstInt(index->src(1), &k)) return {nullptr, 0};
  return {base, k};
}

class Builder {
 public:
  // `reg` and `first_slot`: the register whose slots first_slot.. the built vector is stored to (its lanes may read
  // those slots, and no shared value may read it); null: a vector stored elsewhere (any register's slots may be read).
  Builder(const UOp* reg, int64_t first_slot) : reg_(reg), first_(first_slot) {}

  // The vector of `lanes` (one scalar node per lane, lane order), or null when they are not one expression lane by
  // lane.
  UOpPtr Build(const std::vector<const UOp*>& lanes) {
    auto it = memo_.find(lanes);
    if (it != memo_.end()) return it->second;
    // Deeper expressions stay scalar lanes: the recursion must not overflow the stack on a kernel of one long
    // elementwise chain (a kiln.v1 graph at its node limit fuses into one 65,536-op kernel).
    if (depth_ >= kMaxDepth) return nullptr;
    ++depth_;
    UOpPtr v = Make(lanes);
    --depth_;
    memo_.emplace(lanes, v);
    return v;
  }

 private:
  static constexpr int kMaxDepth = 256;

  UOpPtr Make(const std::vector<const UOp*>& lanes) {
    const size_t w = lanes.size();
    const UOp* u0 = lanes[0];
    if (u0->dtype().count != 1 || u0->dtype().is_ptr) return nullptr;
    if (std::all_of(lanes.begin(), lanes.end(), [&](const UOp* u) { return u == u0; })) {
      // A value every lane shares; never one that reads the updated register (its slots differ by lane).
      if (reg_ != nullptr && ReadsRegister(u0)) return nullptr;
      const UOpPtr s = UOpPtr::FromRaw(u0);
      return UOp::Make(Op::VECTORIZE, u0->dtype().Vec(static_cast<int>(w)), UOpVec(w, s));
    }
    if (u0->op() == Op::GEP) {  // lanes c, c + 1, ... of one vector
      const UOp* vec = u0->src(0).get();
      if (u0->ArgVec().size() != 1) return nullptr;
      const int64_t c = u0->ArgVec()[0];
      IntVec picks;
      for (size_t i = 0; i < w; ++i) {
        const UOp* g = lanes[i];
        if (g->op() != Op::GEP || g->src(0).get() != vec || g->ArgVec().size() != 1 ||
            g->ArgVec()[0] != c + static_cast<int64_t>(i))
          return nullptr;
        picks.push_back(c + static_cast<int64_t>(i));
      }
      const UOpPtr v = UOpPtr::FromRaw(vec);
      if (c == 0 && static_cast<size_t>(vec->dtype().count) == w) return v;
      return UOp::Make(Op::GEP, u0->dtype().Vec(static_cast<int>(w)), {v}, Arg(picks));
    }
    if (u0->op() == Op::LOAD && u0->num_src() == 1 && u0->src(0)->op() == Op::INDEX && u0->src(0)->num_src() == 2 &&
        u0->src(0)->src(0)->op() == Op::PARAM) {  // consecutive elements of a buffer: one vector load
      const auto [base, off] = SplitOffset(u0->src(0)->src(1));
      for (size_t i = 1; i < w; ++i) {
        const UOp* l = lanes[i];
        if (l->op() != Op::LOAD || l->num_src() != 1 || l->src(0)->op() != Op::INDEX || l->src(0)->num_src() != 2 ||
            l->src(0)->src(0) != u0->src(0)->src(0))
          return nullptr;
        const auto [b, o] = SplitOffset(l->src(0)->src(1));
        if (b != base || o != off + static_cast<int64_t>(i)) return nullptr;
      }
      return UOp::Make(Op::LOAD, u0->dtype().Vec(static_cast<int>(w)), {u0->src(0)}, u0->arg());
    }
    if (u0->op() == Op::LOAD) {  // consecutive slots of a register (the updated one's own): one vector load of them
      if (u0->num_src() != 1) return nullptr;
      const auto [reg0, k0] = RegSlot(u0->src(0).get());
      if (reg0 == nullptr || (reg_ != nullptr && (reg0 != reg_ || k0 != first_))) return nullptr;
      UOpVec deps;
      for (size_t i = 0; i < w; ++i) {
        const UOp* l = lanes[i];
        if (l->op() != Op::LOAD || l->num_src() != 1) return nullptr;
        const auto [reg, k] = RegSlot(l->src(0).get());
        if (reg != reg0 || k != k0 + static_cast<int64_t>(i)) return nullptr;
        const UOp* base = l->src(0)->src(0).get();
        if (base->op() == Op::AFTER)
          for (size_t q = 1; q < base->num_src(); ++q)
            if (std::find(deps.begin(), deps.end(), base->src(q)) == deps.end()) deps.push_back(base->src(q));
      }
      const UOpPtr reg = UOpPtr::FromRaw(reg0);
      UOpPtr base = reg;
      if (!deps.empty()) {
        UOpVec s{reg};
        s.insert(s.end(), deps.begin(), deps.end());
        base = UOp::Make(Op::AFTER, reg->dtype(), s);
      }
      const UOpPtr index =
          UOp::Make(Op::INDEX, reg->dtype(), {base, UOp::Const(u0->src(0)->src(1)->dtype(), k0)});
      return UOp::Make(Op::LOAD, u0->dtype().Vec(static_cast<int>(w)), {index});
    }
    if (!IsALU(u0->op()) && u0->op() != Op::CAST && u0->op() != Op::BITCAST) return nullptr;
    for (const UOp* u : lanes)
      if (u->op() != u0->op() || u->dtype() != u0->dtype() || u->num_src() != u0->num_src() || !(u->arg() == u0->arg()))
        return nullptr;
    UOpVec srcs;
    for (size_t q = 0; q < u0->num_src(); ++q) {
      std::vector<const UOp*> src_lanes;
      for (const UOp* u : lanes) src_lanes.push_back(u->src(q).get());
      UOpPtr s = Build(src_lanes);
      if (s == nullptr) return nullptr;
      srcs.push_back(std::move(s));
    }
    return UOp::Make(u0->op(), u0->dtype().Vec(static_cast<int>(w)), srcs, u0->arg());
  }

  bool ReadsRegister(const UOp* u) {
    auto it = reads_.find(u);
    if (it != reads_.end()) return it->second;
    bool r = u == reg_;
    for (size_t q = 0; q < u->num_src() && !r; ++q) r = ReadsRegister(u->src(q).get());
    reads_.emplace(u, r);
    return r;
  }

  const UOp* reg_;
  int64_t first_;
  int depth_ = 0;
  std::map<std::vector<const UOp*>, UOpPtr> memo_;
  absl::flat_hash_map<const UOp*, bool> reads_;
};

// The stores of `by_offset` (offset -> store; null where two stores share an offset) in runs of 16, 8 or 4
// consecutive offsets, widest first: `make(run, values, first_offset)` returns the one vector store for a run, or null
// to try a narrower one; every store of a run made maps to it in `repl`.
template <typename Make>
void VectorRuns(const std::map<int64_t, const UOp*>& by_offset, Make make,
                absl::flat_hash_map<const UOp*, UOpPtr>& repl) {
  for (auto it = by_offset.begin(); it != by_offset.end();) {
    bool done = false;
    for (const size_t w : {16, 8, 4}) {
      std::vector<const UOp*> run, values;
      auto jt = it;
      for (size_t i = 0; i < w && jt != by_offset.end() && jt->second != nullptr &&
                         jt->first == it->first + static_cast<int64_t>(i);
           ++i, ++jt) {
        run.push_back(jt->second);
        values.push_back(jt->second->src(1).get());
      }
      if (run.size() != w) continue;
      const UOpPtr store = make(run, values, it->first);
      if (store == nullptr) continue;
      for (const UOp* st : run) repl.emplace(st, store);
      it = jt;
      done = true;
      break;
    }
    if (!done) ++it;
  }
}

// Step 1: each run of lane updates -> one vector STORE (`repl` maps every store of the run to it).
void VectorUpdates(const std::vector<const UOp*>& topo, absl::flat_hash_map<const UOp*, UOpPtr>& repl) {
  // The register's float update stores, by register and slot, in toposort order (code does not depend on addresses).
  std::vector<const UOp*> regs;
  absl::flat_hash_map<const UOp*, std::map<int64_t, const UOp*>> stores;
  for (const UOp* u : topo) {
    if (u->op() != Op::STORE || u->num_src() != 2) continue;
    const auto [reg, k] = RegSlot(u->src(0).get());
    if (reg == nullptr || !u->src(1)->dtype().IsFloat() || u->src(1)->dtype().count != 1) continue;
    if (u->src(1)->op() == Op::CONST) continue;  // the reset to the identity, once per output
    if (!stores.contains(reg)) regs.push_back(reg);
    auto [it, fresh] = stores[reg].emplace(k, u);
    if (!fresh) it->second = nullptr;  // two updates of one slot: leave that slot alone
  }
  for (const UOp* reg : regs) {
    VectorRuns(
        stores.at(reg),
        [&](const std::vector<const UOp*>& run, const std::vector<const UOp*>& values, int64_t first) -> UOpPtr {
          Builder b(reg, first);
          UOpPtr v = b.Build(values);
          if (v == nullptr) return nullptr;
          const UOpPtr r = UOpPtr::FromRaw(reg);
          const DType index_dtype = run[0]->src(0)->src(1)->dtype();
          return UOp::Make(Op::STORE, dtypes::kVoid,
                           {UOp::Make(Op::INDEX, r->dtype(), {r, UOp::Const(index_dtype, first)}), v});
        },
        repl);
  }
}

// Step 2: the sums of a register's lanes after its loop, ((acc[k] + acc[k + 1]) + ...) + acc[k + w - 1] (the unrolled
// reduce's lanes, w a power of two from 4 to 64), as a tree over one vector load of the slots: halves added until one
// lane is left, log2(w) shuffles and adds where the chain took w - 1 extracts and scalar adds in a row.
void TreeLaneSums(const std::vector<const UOp*>& topo, absl::flat_hash_map<const UOp*, UOpPtr>& repl) {
  absl::flat_hash_set<const UOp*> in_chain;
  for (auto ut = topo.rbegin(); ut != topo.rend(); ++ut) {
    const UOp* root = *ut;
    if (root->op() != Op::ADD || root->dtype().count != 1 || !root->dtype().IsFloat() || in_chain.contains(root))
      continue;
    std::vector<const UOp*> leaves, inner;
    const UOp* cur = root;
    while (cur->op() == Op::ADD && cur->dtype() == root->dtype() && leaves.size() < 64) {
      inner.push_back(cur);
      leaves.push_back(cur->src(1).get());
      cur = cur->src(0).get();
    }
    leaves.push_back(cur);
    std::reverse(leaves.begin(), leaves.end());
    const size_t w = leaves.size();
    if (w < 4 || w > 64 || (w & (w - 1)) != 0) continue;
    const UOp* base = nullptr;
    const UOp* reg = nullptr;
    int64_t k0 = 0;
    bool ok = true;
    for (size_t i = 0; i < w && ok; ++i) {
      const UOp* l = leaves[i];
      ok = l->op() == Op::LOAD && l->num_src() == 1;
      if (!ok) break;
      const auto [r, k] = RegSlot(l->src(0).get());
      if (i == 0) base = l->src(0)->src(0).get(), reg = r, k0 = k;
      ok = r != nullptr && r == reg && l->src(0)->src(0).get() == base && k == k0 + static_cast<int64_t>(i);
    }
    if (!ok) continue;
    in_chain.insert(inner.begin(), inner.end());
    const UOp* l0 = leaves[0];
    UOpPtr v = UOp::Make(Op::LOAD, l0->dtype().Vec(static_cast<int>(w)),
                         {UOp::Make(Op::INDEX, l0->src(0)->dtype(), {UOpPtr::FromRaw(base), l0->src(0)->src(1)})});
    for (size_t width = w; width > 1; width /= 2) {
      IntVec lo, hi;
      for (size_t i = 0; i < width / 2; ++i) {
        lo.push_back(static_cast<int64_t>(i));
        hi.push_back(static_cast<int64_t>(i + width / 2));
      }
      const DType half = width / 2 == 1 ? l0->dtype() : l0->dtype().Vec(static_cast<int>(width / 2));
      v = UOp::Make(Op::ADD, half,
                    {UOp::Make(Op::GEP, half, {v}, Arg(lo)), UOp::Make(Op::GEP, half, {v}, Arg(hi))});
    }
    repl.emplace(root, v);
  }
}

// Step 3: runs of 16, 8 or 4 ungated stores to consecutive elements of one buffer whose values are one expression
// lane by lane -> one vector store. A conv tile's epilogue reads its accumulator slots, adds the bias, applies the
// activation and stores each lane; LLVM's SLP vectorizer left all of it scalar in the pixel-lane 1x1 convs
// ("impossible with available vectorization factors": 256 extracts, adds, maxes and stores per 8 x 32 tile, as many
// instructions as a 64-channel reduce loop). A run is left alone where its buffer is also loaded at another index
// (an in-place update reads exactly the elements it writes; anything else keeps the scalar order).
void VectorOutputs(const std::vector<const UOp*>& topo, absl::flat_hash_map<const UOp*, UOpPtr>& repl) {
  absl::flat_hash_map<const UOp*, absl::flat_hash_set<const UOp*>> loaded;  // buffer -> the INDEX nodes it is loaded at
  using Key = std::pair<const UOp*, const UOp*>;                             // (buffer, index without its constant)
  std::vector<Key> keys;
  absl::flat_hash_map<Key, std::map<int64_t, const UOp*>> stores;
  for (const UOp* u : topo) {
    if (u->num_src() < 1 || u->src(0)->op() != Op::INDEX || u->src(0)->num_src() < 2 ||
        u->src(0)->src(0)->op() != Op::PARAM)
      continue;
    const UOp* index = u->src(0).get();
    const UOp* buf = index->src(0).get();
    if (u->op() == Op::LOAD) loaded[buf].insert(index);
    if (u->op() != Op::STORE || u->num_src() != 2 || index->num_src() != 2) continue;
    const DType d = u->src(1)->dtype();
    if (d.count != 1 || d.is_ptr || d.scalar == ScalarType::kBool) continue;
    const auto [base, off] = SplitOffset(index->src(1));
    const Key key{buf, base.get()};
    if (!stores.contains(key)) keys.push_back(key);
    auto [it, fresh] = stores[key].emplace(off, u);
    if (!fresh) it->second = nullptr;  // two stores of one element: leave it alone
  }
  for (const Key& key : keys) {
    const auto lit = loaded.find(key.first);
    VectorRuns(
        stores.at(key),
        [&](const std::vector<const UOp*>& run, const std::vector<const UOp*>& values, int64_t) -> UOpPtr {
          if (lit != loaded.end()) {
            absl::flat_hash_set<const UOp*> own;
            for (const UOp* st : run) own.insert(st->src(0).get());
            if (!std::all_of(lit->second.begin(), lit->second.end(), [&](const UOp* ix) { return own.contains(ix); }))
              return nullptr;
          }
          Builder b(nullptr, 0);
          UOpPtr v = b.Build(values);
          return v == nullptr ? nullptr : UOp::Make(Op::STORE, dtypes::kVoid, {run[0]->src(0), v});
        },
        repl);
  }
}

}  // namespace

absl::StatusOr<UOpPtr> VectorizeAccumulators(const UOpPtr& sink, LowerContext& ctx) {
  if (!ctx.target.supports_vectors || ctx.target.has_local) return sink;
  const std::vector<const UOp*> topo = Toposort(sink);
  absl::flat_hash_map<const UOp*, UOpPtr> repl;
  VectorUpdates(topo, repl);
  TreeLaneSums(topo, repl);
  VectorOutputs(topo, repl);
  if (repl.empty()) return sink;
  // A replacement may be built over nodes that are themselves replaced (a later reduce's update reads an earlier
  // one's result through its stores; a tree's load comes after the loop's stores): rewrite until nothing changes.
  UOpPtr cur = sink;
  for (int pass = 0; pass < 16; ++pass) {
    UOpPtr next = RewriteBottomUp(cur, [&](const UOp* orig, const UOpPtr& u) -> UOpPtr {
      auto it = repl.find(orig);
      if (it != repl.end()) return it->second;
      if (u->op() != Op::END && u->op() != Op::GROUP && u->op() != Op::SINK) return nullptr;
      // The run's stores are one node now: each once.
      UOpVec srcs;
      for (const UOpPtr& s : u->src())
        if (std::find(srcs.begin(), srcs.end(), s) == srcs.end()) srcs.push_back(s);
      if (srcs.size() == u->num_src()) return nullptr;
      return u->op() == Op::SINK ? UOp::Sink(srcs) : u->WithSrc(srcs);
    });
    if (next == cur) return cur;
    cur = std::move(next);
  }
  return absl::InternalError("vectorize accumulators: the rewrite did not settle");
}

}  // namespace kiln::codegen
