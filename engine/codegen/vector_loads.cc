// Consecutive scalar loads -> one vector load (targets with Target::supports_vectors).
//
// Expanded UPCAST/UNROLL lanes are scalar copies; the CPU renderer leaves it to LLVM's SLP vectorizer to rebuild
// vectors. Loads the lanes read at a stride (a 2x2 max pool: output lane j reads input x 2j and 2j+1) defeat it:
// it packs each operand's lanes with scalar loads and inserts, or a gather, and so leaves the whole body scalar. One
// vector load over the run the lanes read together, with each scalar load replaced by a GEP of its lane, gives SLP
// extracts of one vector, which it packs with shuffles (even/odd lanes), and the body becomes vector code.
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {
namespace {

// Runs of at least kMinRun consecutive elements are combined, in power-of-two vectors of 2 to kMaxRun lanes (a
// 20-lane run as 16 + 4, a 6-lane run as 4 + 2).
constexpr size_t kMinRun = 4;
constexpr size_t kMaxRun = 32;
// The operands of a CPU tensor core's WMMA (tc.cc: 4 and 64 bytes) are VECTORIZEs of scalar loads, or of elementwise
// ops on loads (4-bit values unpacked by a mask and a shift), which LLVM builds byte by byte (64 vpinsrb per B
// operand of an int8 matmul) unless they are vector loads; their runs are combined whatever reads them, up to the
// operand's size: one 64-byte register for B, and A's 4 bytes alone (two k-slices' A side by side, as one 8-byte
// load, cost a GPR move and a shift per broadcast where each 4-byte load folds into vpdpbusd as a broadcast operand).
constexpr size_t kMaxWmmaBytes = 64;

}  // namespace

absl::StatusOr<UOpPtr> VectorizeLoads(const UOpPtr& sink, LowerContext& ctx) {
  if (!ctx.target.supports_vectors) return sink;
  const std::vector<const UOp*> topo = Toposort(sink);
  // Buffers the kernel stores to: their loads may see the kernel's own stores, so they keep their order.
  std::vector<const UOp*> stored;
  for (const UOp* u : topo) {
    if (u->op() == Op::STORE && u->src(0)->op() == Op::INDEX)
      stored.push_back(u->src(0)->src(0).get());
  }
  // (buffer, base) -> offset -> LOAD. Only plain loads: no gate or alternative value, scalar, not bool (bools load
  // as bytes and compare).
  absl::flat_hash_map<std::pair<const UOp*, const UOp*>, size_t> group_of;  // in first-load order
  std::vector<std::map<int64_t, const UOp*>> groups;
  for (const UOp* u : topo) {
    if (u->op() != Op::LOAD || u->num_src() != 1 || u->dtype().count != 1 || u->dtype().IsBool())
      continue;
    const UOp* ix = u->src(0).get();
    if (ix->op() != Op::INDEX || ix->num_src() != 2 || ix->src(0)->op() != Op::PARAM) continue;
    const UOp* buf = ix->src(0).get();
    if (std::find(stored.begin(), stored.end(), buf) != stored.end()) continue;
    auto [base, off] = SplitOffset(ix->src(1));
    auto [it, fresh] = group_of.emplace(std::make_pair(buf, base.get()), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].emplace(off, u);
  }
  // Runs of consecutive offsets, each as its loads in offset order.
  std::vector<std::vector<const UOp*>> runs;
  absl::flat_hash_map<const UOp*, size_t> run_of;
  for (const std::map<int64_t, const UOp*>& loads : groups) {
    int64_t prev = 0;
    bool open = false;
    for (const auto& [off, load] : loads) {
      if (!open || off != prev + 1) runs.emplace_back();
      runs.back().push_back(load);
      run_of[load] = runs.size() - 1;
      prev = off;
      open = true;
    }
  }
  // Only runs of which one stored value (an output, or an accumulator update) reads two or more elements and no
  // element is read by two stored values: a pool's windows, side by side, each combined into one output, which SLP
  // cannot pack from consecutive loads. Runs whose elements each feed their own lane SLP vectorizes as they are;
  // combining those too changed ~20 kernels of the CNN training step both ways (elementwise kernels 3-5x faster, a
  // conv input gradient 8.3 -> 11.9 ms), left for another change. Overlapping windows (a conv tile's unrolled
  // reduce reads x[n + k] and x[n + k + 1] for lane n) SLP loads as shifted vectors, which shuffles of one vector
  // load did not beat (conv weight gradients 0-8% slower).
  std::vector<bool> horizontal(runs.size(), false), shared(runs.size(), false);
  std::vector<size_t> wmma(runs.size(), 0);  // bytes of the largest WMMA operand the run's loads feed
  const bool cpu_tc = std::any_of(ctx.target.tensor_cores.begin(), ctx.target.tensor_cores.end(),
                                  [](const TensorCore& tc) { return tc.cpu_dot(); });
  for (const UOp* u : topo) {
    if (u->op() != Op::WMMA) continue;
    for (int k = 0; k < 2; ++k) {
      const UOp* operand = u->src(k).get();
      if (operand->op() != Op::VECTORIZE) continue;
      // (GPU WMMAs: their operands' own loads, up to 64 bytes, as before the CPU layout.)
      const size_t bytes = cpu_tc ? operand->num_src() * operand->dtype().ItemSize() : kMaxWmmaBytes;
      std::vector<const UOp*> stack;
      absl::flat_hash_set<const UOp*> visited;
      for (const UOpPtr& x : operand->src()) stack.push_back(x.get());
      while (!stack.empty()) {
        const UOp* x = stack.back();
        stack.pop_back();
        if (!visited.insert(x).second) continue;
        if (x->op() == Op::LOAD) {
          if (auto it = run_of.find(x); it != run_of.end()) wmma[it->second] = std::max(wmma[it->second], bytes);
          continue;
        }
        if (!cpu_tc || !IsElementwise(x->op())) continue;
        for (const UOpPtr& s : x->src()) stack.push_back(s.get());
      }
    }
  }
  absl::flat_hash_map<const UOp*, int> readers;  // stored values reading each run element
  for (const UOp* u : topo) {
    if (u->op() != Op::STORE || u->num_src() < 2) continue;
    absl::flat_hash_map<size_t, int> seen;
    std::vector<const UOp*> stack{u->src(1).get()};
    absl::flat_hash_set<const UOp*> visited;
    while (!stack.empty()) {
      const UOp* x = stack.back();
      stack.pop_back();
      if (!visited.insert(x).second) continue;
      if (x->op() == Op::LOAD) {
        if (auto it = run_of.find(x); it != run_of.end()) {
          if (++seen[it->second] == 2) horizontal[it->second] = true;
          if (++readers[x] == 2) shared[it->second] = true;
        }
        continue;
      }
      if (x->op() == Op::RANGE || x->op() == Op::INDEX) continue;
      for (const UOpPtr& s : x->src()) stack.push_back(s.get());
    }
  }
  absl::flat_hash_map<const UOp*, UOpPtr> repl;
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::vector<const UOp*>& run = runs[r];
    if (wmma[r] == 0 && (!horizontal[r] || shared[r] || run.size() < kMinRun)) continue;
    const size_t most = wmma[r] > 0 ? std::min(wmma[r], kMaxWmmaBytes) / std::max<size_t>(1, run[0]->dtype().ItemSize())
                                    : kMaxRun;
    for (size_t start = 0; start + 2 <= run.size();) {
      size_t n = most;
      while (n > run.size() - start) n /= 2;
      const UOp* first = run[start];
      UOpPtr vec = UOp::Make(Op::LOAD, first->dtype().Vec(static_cast<uint16_t>(n)),
                             {first->src(0)}, first->arg());
      for (size_t k = 0; k < n; ++k) {
        repl.emplace(run[start + k], UOp::Make(Op::GEP, first->dtype(), {vec},
                                               Arg(IntVec{static_cast<int64_t>(k)})));
      }
      start += n;
    }
  }
  if (repl.empty()) return sink;
  return RewriteBottomUp(sink, [&](const UOp* orig, const UOpPtr&) -> UOpPtr {
    auto it = repl.find(orig);
    return it == repl.end() ? nullptr : it->second;
  });
}

}  // namespace kiln::codegen
