#include "engine/schedule/kernel_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/base/task.h"
#include "engine/schedule/indexing.h"
#include "engine/schedule/schedule.h"

namespace kiln::schedule {
namespace {

// (node, index..., validity, nullptr, open reduce ranges...). Held, not raw: the index expressions are built while
// lowering and most die with the call that built them (a FLIP's `n-1-i`), and a later index built at a freed
// address must not find their entries (issue #17).
using MemoKey = std::vector<UOpPtr>;

// The largest reduce (elements reduced per output) fused into the loops of another reduce.
constexpr int64_t kMaxNestedReduce = 16;
// ALU ops from which an elementwise value broadcast inside a reduce is realized rather than recomputed.
constexpr int64_t kExpensiveElementwise = 24;
// An elementwise value broadcast inside a reduce that reads this many whole realized inputs, and has at least
// kWholeInputMinElements elements, is realized too (Builder::ReadsSeveralWholeInputs).
constexpr int64_t kWholeInputsToRealize = 2;
constexpr int64_t kWholeInputMinElements = int64_t{1} << 16;

void CollectRanges(const UOpPtr& u, absl::flat_hash_set<const UOp*>* out) {
  for (const UOp* n : Toposort(u))
    if (n->op() == Op::RANGE) out->insert(n);
}

// Tensor::Arange's index tensor: over a (2, 2, ..., 2) view of k dims, the sum of k planes, plane j being the
// constant 2^(k-1-j) padded on the left to [0, 2^(k-1-j)] along dim j and expanded over the others, so its value at
// (i_0, ..., i_{k-1}) is sum_j i_j 2^(k-1-j). Read flat (RESHAPE to [2^k]) that is the flat index itself.
// Lowered as it is, each plane becomes WHERE(0 < (f / 2^m) % 2, 2^m, 0) on the reader's index f, and once f is a
// composite index (a random weight, rand(32, 32, 5, 5): f = a*800 + b*25 + c*5 + d) the div/mod folding splits every
// plane differently: 15 planes of divisions and remainders per element, 2,300 lines of LLVM IR and 350 ms of compile
// per init kernel of the CNN. The RESHAPE of such a sum lowers to the flat index instead (`IsBitPlaneIota`).
bool IsConstTree(const UOp* u, int64_t* value) {
  while (u->op() == Op::RESHAPE || u->op() == Op::EXPAND) u = u->src(0).get();
  if (u->op() != Op::CONST || !u->dtype().IsInt()) return false;
  *value = static_cast<int64_t>(u->ConstValue());
  return true;
}

// The dim j of one plane (see above), -1 if `p` is not one.
int PlaneDim(const UOp* p, int k) {
  if (p->op() == Op::EXPAND) p = p->src(0).get();
  int j = k == 1 ? 0 : -1;
  if (p->op() == Op::RESHAPE) {
    const Shape& ps = p->shape();
    if (static_cast<int>(ps.size()) != k) return -1;
    j = -1;
    for (int d = 0; d < k; ++d) {
      if (ps[d] == 2 && j < 0) j = d;
      else if (ps[d] != 1) return -1;
    }
    p = p->src(0).get();
  }
  if (j < 0 || p->op() != Op::PAD || p->shape() != Shape{2}) return -1;
  const IntVec* pad = ArgIntVec(p->arg());
  if (pad == nullptr || *pad != IntVec{1, 0}) return -1;
  int64_t c = 0;
  if (!IsConstTree(p->src(0).get(), &c) || c != (int64_t{1} << (k - 1 - j))) return -1;
  return j;
}

// Whether `u` is Arange's sum of bit planes over (2, ..., 2), none of its nodes realized.
bool IsBitPlaneIota(const UOp* u, const GraphInfo& g) {
  const Shape& s = u->shape();
  const int k = static_cast<int>(s.size());
  if (k == 0 || k > 62 || !u->dtype().IsInt() || std::any_of(s.begin(), s.end(), [](int64_t d) { return d != 2; }))
    return false;
  std::vector<bool> seen(k, false);
  std::vector<const UOp*> stack{u};
  int planes = 0;
  while (!stack.empty()) {
    const UOp* n = stack.back();
    stack.pop_back();
    if (g.realized.contains(n) || n->dtype() != u->dtype()) return false;
    if (n->op() == Op::ADD && n->shape() == s) {
      stack.push_back(n->src(0).get());
      stack.push_back(n->src(1).get());
      continue;
    }
    const int j = PlaneDim(n, k);
    if (j < 0 || seen[j] || ++planes > k) return false;
    seen[j] = true;
  }
  return planes == k;
}

// See Builder::Finish.
void MoveLargestReduceInnermost(std::vector<const UOp*>& ranges) {
  auto is_reduce = [](const UOp* r) { return std::get<AxisArg>(r->arg()).type == AxisType::kReduce; };
  int best = -1, last = -1;
  for (int i = 0; i < static_cast<int>(ranges.size()); ++i) {
    if (!is_reduce(ranges[i])) continue;
    if (!ranges[i]->src(0)->IsConst()) return;  // a symbolic reduce: leave the order alone
    last = i;
    if (best < 0 || ranges[i]->src(0)->ArgInt() > ranges[best]->src(0)->ArgInt()) best = i;
  }
  if (best < 0 || best == last || ranges[last]->src(0)->ArgInt() > 3 || ranges[best]->src(0)->ArgInt() < 16) return;
  const UOp* b = ranges[best];
  ranges.erase(ranges.begin() + best);
  ranges.insert(ranges.begin() + last, b);  // `last` moved down by one: b lands after the old last reduce range
}

class Builder {
 public:
  explicit Builder(const GraphInfo& g) : g_(g) {}

  absl::StatusOr<KernelBuild> Build(absl::Span<const UOp* const> outputs) {
    if (outputs.empty()) return absl::InternalError("schedule: kernel without outputs");
    const Shape& shape = outputs[0]->shape();
    // Outputs whose rows are bounded by one Variable loop over dim 0 up to it (outputs that disagree compute every
    // row: the bounded ones' other rows are unspecified anyway).
    const UOp* rows = nullptr;
    for (size_t i = 0; i < outputs.size(); ++i) {
      auto it = g_.rows.find(outputs[i]);
      const UOp* r = it == g_.rows.end() ? nullptr : it->second;
      if (i == 0) rows = r;
      if (r != rows) rows = nullptr;
    }
    IndexVec idx(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 1) {
        idx[i] = IConst(0);
      } else if (i == 0 && rows != nullptr) {
        const UOp* var = rows->src(0).get();
        idx[i] = UOp::Make(Op::RANGE, dtypes::kIndex, {var->Ptr()}, AxisArg{next_range_++, AxisType::kLoop});
        out_.binds.emplace_back(std::get<VarArg>(var->arg()).name, static_cast<int64_t>(rows->src(1)->ConstValue()));
        loop_ranges_.push_back(idx[i]);
      } else {
        idx[i] = UOp::Range(shape[i], next_range_++, AxisType::kLoop);
        loop_ranges_.push_back(idx[i]);
      }
    }
    for (const UOp* o : outputs) {
      if (o->shape() != shape) return absl::InternalError("schedule: kernel outputs of different shapes");
      out_.outputs.push_back(o);
    }
    std::vector<UOpPtr> stores;
    for (size_t slot = 0; slot < outputs.size(); ++slot) {
      const UOp* o = outputs[slot];
      UOpPtr param = UOp::Make(Op::PARAM, o->dtype().Ptr(), {}, static_cast<int64_t>(slot));
      UOpPtr value, index;
      if (o->op() == Op::ASSIGN) {
        // Store through the target's view into its buffer.
        UOpPtr valid;
        KILN_ASSIGN_OR_RETURN(auto at, ViewToBuffer(o->src(0).get(), idx, &valid));
        if (valid != nullptr) return absl::UnimplementedError("schedule: ASSIGN into a padded view");
        assign_buffer_ = at.first;
        assign_index_ = at.second;
        index = UOp::Make(Op::INDEX, param->dtype(), {param, at.second});
        KILN_ASSIGN_OR_RETURN(value, Lower(o->src(1).get(), idx, nullptr).Run());
        if (UOpPtr gate = InPlaceWhere(&value); gate != nullptr)
          index = UOp::Make(Op::INDEX, param->dtype(), {param, at.second, gate});
      } else {
        index = UOp::Make(Op::INDEX, param->dtype(), {param, Flatten(idx, shape)});
        KILN_ASSIGN_OR_RETURN(value, Compute(o, idx, nullptr).Run());
      }
      UOpPtr store = UOp::Make(Op::STORE, dtypes::kVoid, {index, value});
      if (!loop_ranges_.empty()) {
        std::vector<UOpPtr> src{store};
        src.insert(src.end(), loop_ranges_.begin(), loop_ranges_.end());
        store = UOp::Make(Op::END, dtypes::kVoid, src);
      }
      stores.push_back(store);
    }
    out_.sink = Finish(UOp::Sink(stores));
    return std::move(out_);
  }

 private:
  // An ASSIGN whose value is where(c, x, target) (or where(c, target, x)), the target read at the very element being
  // written: only the elements where the value changes are stored, so the old value is not read and the rest is not
  // written. Returns the store's gate and leaves x in *value; null when the value is not of that form. A KV cache
  // updated as where(row == pos, new_row, cache) then writes one row per step instead of reading and writing the
  // whole cache (SmolLM2's decode at 4 slots x 256 rows: 60 such kernels, 11 of 33 ms per step).
  UOpPtr InPlaceWhere(UOpPtr* value) {
    const UOpPtr v = *value;  // a copy: *value is replaced below
    if (v->op() != Op::WHERE || assign_buffer_ == nullptr ||
        std::find(out_.inputs.begin(), out_.inputs.end(), assign_buffer_) == out_.inputs.end())
      return nullptr;
    const UOpPtr old = Load(assign_buffer_, assign_buffer_->dtype(), assign_index_, nullptr);
    if (old->dtype() != v->dtype()) return nullptr;
    if (v->src(2) == old) {
      *value = v->src(1);
      return v->src(0);
    }
    if (v->src(1) == old) {
      *value = v->src(2);
      return Eq(v->src(0), UOp::ConstBool(false));
    }
    return nullptr;
  }

  // Maps the index of a view of a BUFFER to (BUFFER, flat index); `valid` collects PAD conditions.
  absl::StatusOr<std::pair<const UOp*, UOpPtr>> ViewToBuffer(const UOp* u, IndexVec idx, UOpPtr* valid) {
    while (IsMovement(u->op())) {
      KILN_ASSIGN_OR_RETURN(idx, MapMovement(*u, idx, valid));
      u = u->src(0).get();
    }
    if (u->op() != Op::BUFFER) return absl::UnimplementedError("schedule: ASSIGN target is not a view of a BUFFER");
    return std::make_pair(u, idx[0]);
  }

  int64_t Slot(const UOp* key) {
    for (size_t i = 0; i < out_.outputs.size(); ++i)
      if (out_.outputs[i] == key) return static_cast<int64_t>(i);
    auto it = std::find(out_.inputs.begin(), out_.inputs.end(), key);
    if (it == out_.inputs.end()) {
      out_.inputs.push_back(key);
      it = out_.inputs.end() - 1;
    }
    return static_cast<int64_t>(out_.outputs.size() + (it - out_.inputs.begin()));
  }

  UOpPtr Load(const UOp* key, DType dtype, const UOpPtr& flat, const UOpPtr& valid) {
    if (valid != nullptr && valid->op() == Op::CONST && !valid->ArgBool()) return UOp::Const(dtype, int64_t{0});
    UOpPtr param = UOp::Make(Op::PARAM, dtype.Ptr(), {}, Slot(key));
    UOpPtr index = valid == nullptr ? UOp::Make(Op::INDEX, param->dtype(), {param, flat})
                                    : UOp::Make(Op::INDEX, param->dtype(), {param, flat, valid});
    return UOp::Make(Op::LOAD, dtype, {index});
  }

  void AddDep(const UOp* n) {
    if (std::find(out_.deps.begin(), out_.deps.end(), n) == out_.deps.end()) out_.deps.push_back(n);
  }

  // The value of `u` at `idx`: a load if it is realized elsewhere, else its computation.
  // Lowering is a recursion along the graph's depth; as Tasks (engine/base/task.h) its frames live on the heap.
  using Lowered = Task<absl::StatusOr<UOpPtr>>;
  Lowered Lower(const UOp* u, const IndexVec& idx, const UOpPtr& valid) {
    while (g_.realized.contains(u) &&
           std::find(out_.outputs.begin(), out_.outputs.end(), u) == out_.outputs.end()) {
      AddDep(u);
      if (u->op() != Op::ASSIGN) return Lowered::Ready(Load(u, u->dtype(), Flatten(idx, u->shape()), valid));
      u = u->src(0).get();  // an ASSIGN: read the target after the write
    }
    return Compute(u, idx, valid);
  }

  Lowered Compute(const UOp* u, const IndexVec& idx, const UOpPtr& valid) {
    if (IsElementwise(u->op()) && !reduce_stack_.empty() && !g_.realized.contains(u) &&
        (Cost(u) >= kExpensiveElementwise || ReadsSeveralWholeInputs(u)) && MissesOpenRange(idx)) {
      // An expensive elementwise value broadcast inside a reduce (the gradient of a conv output, recomputed for
      // every input channel and kernel tap of the weight gradient), or a large one that reads several whole inputs
      // (see ReadsSeveralWholeInputs): realize it once instead. This build is thrown away (see
      // KernelBuild::pruned).
      out_.realize.push_back(u);
      out_.pruned = true;
      return Lowered::Ready(UOp::Const(u->dtype(), int64_t{0}));
    }
    if (u->op() == Op::REDUCE_AXIS && NoteReduce(u, idx, valid) && !g_.realized.contains(u)) {
      // A broadcast use of an unrealized reduce: the fusion pass realizes it and rebuilds this kernel, so this
      // build is thrown away. Do not inline the reduce's source (in a training graph that source nests whole
      // chains of broadcast reduces, and inlining them all is exponential); a placeholder stands in for it.
      out_.pruned = true;
      return Lowered::Ready(UOp::Const(u->dtype(), int64_t{0}));
    }
    MemoKey key;
    key.reserve(idx.size() + reduce_stack_.size() + 3);
    key.push_back(u->Ptr());
    key.insert(key.end(), idx.begin(), idx.end());
    key.push_back(valid);
    key.push_back(nullptr);
    key.insert(key.end(), reduce_stack_.begin(), reduce_stack_.end());
    if (auto it = memo_.find(key); it != memo_.end()) return Lowered::Ready(it->second);
    return ComputeUncached(u, idx, valid, std::move(key));
  }

  // Remembers a computed value under its memo key.
  UOpPtr Memo(MemoKey key, UOpPtr v) {
    memo_[std::move(key)] = v;
    return v;
  }

  // Whether `u` is part of the unrealized elementwise subgraph a kernel computes in place (Cost and
  // ReadsSeveralWholeInputs walk through it to its inputs).
  bool InlinedElementwise(const UOp* u) const {
    return !g_.realized.contains(u) &&
           (IsElementwise(u->op()) || IsMovement(u->op()) || u->op() == Op::CONTIGUOUS ||
            u->op() == Op::CONTIGUOUS_BACKWARD || u->op() == Op::DETACH || u->op() == Op::ROWS);
  }

  // ALU ops of the unrealized elementwise subgraph under `u` (counted as a tree, capped); reduces count 0. Post-order
  // on an explicit stack: the subgraph may be a long chain.
  int64_t Cost(const UOp* root) {
    auto walks = [&](const UOp* u) { return InlinedElementwise(u); };
    std::vector<std::pair<const UOp*, bool>> stack{{root, false}};
    while (!stack.empty()) {
      auto [u, expanded] = stack.back();
      if (cost_.contains(u)) {
        stack.pop_back();
        continue;
      }
      if (!expanded && walks(u)) {
        stack.back().second = true;
        for (const UOpPtr& src : u->src())
          if (!cost_.contains(src.get())) stack.emplace_back(src.get(), false);
        continue;
      }
      stack.pop_back();
      int64_t c = 0;
      if (!g_.realized.contains(u) && IsElementwise(u->op())) c = 1;
      if (walks(u))
        for (const UOpPtr& src : u->src()) c = std::min<int64_t>(c + cost_.at(src.get()), int64_t{1} << 20);
      cost_[u] = c;
    }
    return cost_.at(root);
  }

  // Whether `root` has >= kWholeInputMinElements elements and its unrealized elementwise subgraph reads at least
  // kWholeInputsToRealize realized values or buffers as large as itself. Broadcast inside a reduce, such a value is
  // recomputed once per output tile, each time reading all those inputs: ResNet-50's block output
  // relu(bn(conv) + identity) inside the next block's 1x1 conv read the conv output and the identity 8 times, in
  // scalar code (the 256 -> 64 conv at 56 x 56: 1.1-1.8 ms, 0.66 ms with its input realized; the model 50.2 / 50.5
  // -> 48.1 / 48.6 ms median, 82 -> 86 kernels, 2-core Emerald Rapids; the CNN's training step keeps its 115
  // kernels). Small values stay fused (a kernel costs more than recomputing them, and tinygrad's kernel counts keep
  // them in one kernel).
  bool ReadsSeveralWholeInputs(const UOp* root) {
    const int64_t n = root->Numel();
    if (n < kWholeInputMinElements) return false;
    if (auto it = whole_inputs_.find(root); it != whole_inputs_.end()) return it->second;
    absl::flat_hash_set<const UOp*> seen;
    std::vector<const UOp*> stack{root};
    int64_t loads = 0;
    while (!stack.empty()) {
      const UOp* u = stack.back();
      stack.pop_back();
      if (!seen.insert(u).second) continue;
      if (g_.realized.contains(u) || u->op() == Op::BUFFER) {  // a kernel's output, or a buffer from outside
        loads += u->Numel() >= n;
        continue;
      }
      if (!InlinedElementwise(u)) continue;
      for (const UOpPtr& src : u->src()) stack.push_back(src.get());
    }
    return whole_inputs_[root] = loads >= kWholeInputsToRealize;
  }

  // Whether the index misses a range open at this point (the value is broadcast over it).
  bool MissesOpenRange(const IndexVec& idx) {
    absl::flat_hash_set<const UOp*> used;
    for (const UOpPtr& i : idx) CollectRanges(i, &used);
    for (const UOpPtr& r : loop_ranges_)
      if (!used.contains(r.get())) return true;
    for (const UOpPtr& r : reduce_stack_)
      if (!used.contains(r.get())) return true;
    return false;
  }

  // Records the use of a REDUCE_AXIS at `idx`; returns whether the use is a broadcast (see ReduceUse).
  bool NoteReduce(const UOp* u, const IndexVec& idx, const UOpPtr& valid) {
    ReduceUse use;
    use.reduce = u;
    absl::flat_hash_set<const UOp*> used;
    for (const UOpPtr& i : idx) {
      use.key.push_back(i);
      CollectRanges(i, &used);
    }
    use.key.push_back(valid);
    for (const UOpPtr& r : loop_ranges_)
      if (!used.contains(r.get())) use.broadcast = true;
    for (const UOpPtr& r : reduce_stack_)
      if (!used.contains(r.get())) use.broadcast = true;
    // A reduce nested inside another reduce's loops (conv -> pool, conv -> sum) is inlined only when it is small
    // (a pool window): a large one would be a deep loop nest recomputed per outer iteration that the codegen
    // heuristic cannot tile; realizing it gives it a kernel of its own.
    // An 8-bit integer dot product over one block (llama.cpp's quantized blocks of 32 under a float sum of scaled
    // blocks: llm/block_linear.h) stays inside: the tensor core takes it there (codegen/tc.cc), and stored it would
    // be an int32 per block and output.
    if (!reduce_stack_.empty() && ReduceSize(u) > kMaxNestedReduce && !IsBlockDot(u))
      use.broadcast = use.nested = true;
    // Two large top-level contractions (sums of products) of different loops in one kernel (a residual block's conv
    // and its downsampling shortcut conv, both fused into the add that joins them) run one loop nest after the other
    // with both register tiles live: ResNet-50's stage-2 and stage-3 first blocks took 5.4 ms each against 1.2 ms
    // with the second conv stored. The second is stored; the first keeps the epilogue. Plain sums over different
    // axes (img.sum(0) + img.sum(1)) stay one kernel, as in tinygrad.
    if (reduce_stack_.empty() && IsContraction(u) && ReduceSize(u) > kMaxNestedReduce &&
        !top_contractions_.empty() &&
        std::find(top_contractions_.begin(), top_contractions_.end(), Signature(u)) == top_contractions_.end())
      use.broadcast = use.another_nest = true;
    // A reduce read through a pad (a validity gate on its index: a strided slice's gradient, a concatenation) and
    // inlined would run its whole loop for every element of the padded view, the padding included, with its loads
    // gated off there: stored, it runs once per element of its own shape. The input gradient of ResNet-50's
    // stride-2 1x1 downsampling conv (zeros between the rows and columns of a 1x1 conv's gradient): 4x the
    // multiply-adds, 72 ms against 0.97 ms in PyTorch.
    if (valid != nullptr && !(valid->op() == Op::CONST && valid->ArgBool())) use.broadcast = true;
    const bool broadcast = use.broadcast;
    out_.reduce_uses.push_back(std::move(use));
    return broadcast;
  }

  // A coroutine. `idx` and `valid` are references into the awaiting caller's frame (or its co_await expression's
  // temporaries), which outlive this task because every call is awaited where it is made; the key moves in.
  Lowered ComputeUncached(const UOp* u, const IndexVec& idx, const UOpPtr& valid, MemoKey key) {
    const Op op = u->op();
    if (op == Op::BUFFER) {
      if (u == assign_buffer_ && idx[0] != assign_index_) out_.war_hazard = true;
      co_return Memo(std::move(key), Load(u, u->dtype(), idx[0], valid));
    }
    if (op == Op::RESHAPE && u->shape().size() == 1 && IsBitPlaneIota(u->src(0).get(), g_))
      co_return Memo(std::move(key), UOp::Make(Op::CAST, u->dtype(), {idx[0]}));
    if (IsMovement(op)) {
      UOpPtr local;
      KILN_CO_ASSIGN_OR_RETURN(IndexVec sidx, MapMovement(*u, idx, &local));
      if (local == nullptr) {
        KILN_CO_ASSIGN_OR_RETURN(UOpPtr v, co_await Lower(u->src(0).get(), sidx, valid));
        co_return Memo(std::move(key), v);
      }
      UOpPtr both = BAnd(valid, local);
      KILN_CO_ASSIGN_OR_RETURN(UOpPtr v, co_await Lower(u->src(0).get(), sidx, both));
      if (local->op() == Op::CONST)
        co_return Memo(std::move(key), local->ArgBool() ? v : UOp::Const(u->dtype(), int64_t{0}));
      co_return Memo(std::move(key),
                     UOp::Make(Op::WHERE, u->dtype(), {local, v, UOp::Const(u->dtype(), int64_t{0})}));
    }
    if (IsElementwise(op)) {
      if (op == Op::BITCAST && u->dtype().ItemSize() != u->src(0)->dtype().ItemSize())
        co_return absl::UnimplementedError("schedule: BITCAST that changes the item size");
      std::vector<UOpPtr> src;
      for (const UOpPtr& s : u->src()) {
        if (s->has_shape() && s->shape() != u->shape()) {
          KILN_CO_ASSIGN_OR_RETURN(UOpPtr v,
                                   co_await Lower(s.get(), BroadcastIndex(idx, u->shape(), s->shape()), valid));
          src.push_back(v);
        } else {
          KILN_CO_ASSIGN_OR_RETURN(UOpPtr v, co_await Lower(s.get(), idx, valid));
          src.push_back(v);
        }
      }
      co_return Memo(std::move(key), UOp::Make(op, u->dtype(), src, u->arg()));
    }
    switch (op) {
      case Op::CONST:
        co_return Memo(std::move(key),
                       u->num_src() == 0 ? u->Ptr() : UOp::Make(Op::CONST, u->dtype(), {}, u->arg()));
      case Op::DEFINE_VAR:
        co_return Memo(std::move(key), u->Ptr());
      case Op::BIND: {
        const UOp* var = u->src(0).get();
        if (var->op() != Op::DEFINE_VAR || !u->src(1)->IsConst())
          co_return absl::InvalidArgumentError("schedule: BIND must bind a DEFINE_VAR to a CONST");
        out_.binds.emplace_back(std::get<VarArg>(var->arg()).name, static_cast<int64_t>(u->src(1)->ConstValue()));
        co_return Memo(std::move(key), u->src(0));
      }
      case Op::REDUCE_AXIS: {
        const ReduceArg& ra = std::get<ReduceArg>(u->arg());
        const Shape& in = u->src(0)->shape();
        IndexVec sidx = idx;
        std::vector<UOpPtr> ranges;
        // Top-level reduces of one input shape and axes at one output index share their loops (sibling outputs of
        // a multi-output kernel: a BatchNorm backward's sums read the same input once).
        SharedKey shared;  // (signature "input shape / axes", output index and validity)
        const bool top = reduce_stack_.empty();
        if (top) {
          shared.first = Signature(u);
          shared.second = idx;
          shared.second.push_back(valid);
          if (std::find(out_.top_reduces.begin(), out_.top_reduces.end(), shared.first) == out_.top_reduces.end())
            out_.top_reduces.push_back(shared.first);
          if (IsContraction(u) && std::find(top_contractions_.begin(), top_contractions_.end(), shared.first) ==
                                      top_contractions_.end())
            top_contractions_.push_back(shared.first);
        }
        if (auto it = top ? shared_ranges_.find(shared) : shared_ranges_.end();
            it != shared_ranges_.end()) {
          sidx = it->second.first;
          ranges = it->second.second;
        } else {
          for (int64_t a : ra.axes) {
            if (in[a] == 1) {
              sidx[a] = IConst(0);
            } else {
              sidx[a] = UOp::Range(in[a], next_range_++, AxisType::kReduce);
              ranges.push_back(sidx[a]);
            }
          }
          if (top) shared_ranges_.emplace(shared, std::make_pair(sidx, ranges));
        }
        reduce_stack_.insert(reduce_stack_.end(), ranges.begin(), ranges.end());
        absl::StatusOr<UOpPtr> v = co_await Lower(u->src(0).get(), sidx, valid);
        reduce_stack_.resize(reduce_stack_.size() - ranges.size());
        if (!v.ok()) co_return v.status();
        if (ranges.empty()) co_return Memo(std::move(key), *v);
        std::vector<UOpPtr> src{*v};
        src.insert(src.end(), ranges.begin(), ranges.end());
        co_return Memo(std::move(key), UOp::Make(Op::REDUCE, u->dtype(), src, ra.op));
      }
      case Op::CONTIGUOUS:
      case Op::CONTIGUOUS_BACKWARD:
      case Op::DETACH:
      case Op::ROWS:
      case Op::COPY: {  // same-device copy (cross-device copies are realized)
        KILN_CO_ASSIGN_OR_RETURN(UOpPtr v, co_await Lower(u->src(0).get(), idx, valid));
        co_return Memo(std::move(key), v);
      }
      default:
        co_return absl::UnimplementedError(absl::StrCat("schedule: cannot fuse op ", std::string(OpName(op))));
    }
  }

  // Renumbers RANGE ids from 0 in order of first appearance and names the kernel.
  UOpPtr Finish(const UOpPtr& sink) {
    absl::flat_hash_map<const UOp*, UOpPtr> subst;
    std::vector<std::string> loop_dims, reduce_dims;
    int64_t id = 0;
    std::vector<const UOp*> ranges;
    for (const UOp* n : Toposort(sink))
      if (n->op() == Op::RANGE) ranges.push_back(n);
    // Reduce ranges are numbered, and so nested, in order of first appearance, which is incidental: a conv's input
    // gradient (a transposed conv over the flipped weights) came out (ci, ky, kx), its forward (ky, kx, ci). With a
    // 3-tap loop innermost, the register tile runs 3 iterations per ci and ky (ResNet-50's 14x14 and 7x7 input
    // gradients: 10.6 ms, against 1.1 ms for the same tile with ci innermost). So when the innermost reduce range is
    // such a tap (<= 3) and a reduce range of >= 16 exists, the largest goes innermost. Not for longer taps or
    // spatial sums: the Fashion-MNIST CNN's weight gradients (batch or 6-24-wide x innermost) measured slower with
    // their largest reduce (the batch) innermost (conv1's 24 -> 75 ms).
    MoveLargestReduceInnermost(ranges);
    bool has_reduce = false;
    for (const UOp* n : ranges) {
      AxisArg a = std::get<AxisArg>(n->arg());
      (a.type == AxisType::kReduce ? reduce_dims : loop_dims).push_back(n->src(0)->IsConst() ? absl::StrCat(n->src(0)->ArgInt()) : "n");
      has_reduce |= a.type == AxisType::kReduce;
      a.id = id++;
      subst[n] = n->WithArg(a);
    }
    loop_dims.insert(loop_dims.end(), reduce_dims.begin(), reduce_dims.end());
    if (loop_dims.empty()) loop_dims.push_back("1");
    std::string name = absl::StrCat(has_reduce ? "r_" : "E_", absl::StrJoin(loop_dims, "_"));
    UOpPtr renamed = Substitute(sink, subst);
    return renamed->WithArg(name);
  }

  // (signature, output index and validity); held for the reason MemoKey is.
  using SharedKey = std::pair<std::string, std::vector<UOpPtr>>;

  const GraphInfo& g_;
  KernelBuild out_;
  absl::flat_hash_map<SharedKey, std::pair<IndexVec, std::vector<UOpPtr>>> shared_ranges_;
  int64_t next_range_ = 0;
  std::vector<UOpPtr> loop_ranges_;
  std::vector<UOpPtr> reduce_stack_;
  std::vector<std::string> top_contractions_;  // signatures of the top-level reduces that are contractions

  // A sum of products (a conv, a matmul), under a cast of the products.
  static bool IsContraction(const UOp* r) {
    const UOp* x = r->src(0).get();
    if (x->op() == Op::CAST) x = x->src(0).get();
    return std::get<ReduceArg>(r->arg()).op == Op::ADD && x->op() == Op::MUL;
  }
  // A sum over at most 256 of products of two 8-bit integers, in an integer dtype.
  static bool IsBlockDot(const UOp* r) {
    if (!IsContraction(r) || ReduceSize(r) > 256 || !r->dtype().IsInt()) return false;
    const UOp* mul = r->src(0).get();
    if (mul->op() == Op::CAST) mul = mul->src(0).get();
    for (const UOpPtr& src : mul->src()) {
      const UOp* s = src.get();
      while (IsMovement(s->op())) s = s->src(0).get();  // the broadcast of an operand
      if (s->op() != Op::CAST || s->src(0)->dtype().ItemSize() != 1 || !s->src(0)->dtype().IsInt()) return false;
    }
    return true;
  }
  // "input shape / axes", as top_reduces holds it.
  static std::string Signature(const UOp* r) {
    return absl::StrCat(absl::StrJoin(r->src(0)->shape(), "x"), "/",
                        absl::StrJoin(std::get<ReduceArg>(r->arg()).axes, ","));
  }
  static int64_t ReduceSize(const UOp* r) {
    int64_t n = 1;
    for (int64_t a : std::get<ReduceArg>(r->arg()).axes) n *= r->src(0)->shape()[a];
    return n;
  }
  absl::flat_hash_map<MemoKey, UOpPtr> memo_;
  UOpMap<int64_t> cost_;  // keys: graph nodes
  UOpMap<bool> whole_inputs_;  // ReadsSeveralWholeInputs by graph node
  const UOp* assign_buffer_ = nullptr;
  UOpPtr assign_index_;
};

}  // namespace

absl::StatusOr<KernelBuild> BuildKernel(const GraphInfo& g, absl::Span<const UOp* const> outputs) {
  Builder b(g);
  return b.Build(outputs);
}

UOpPtr Substitute(const UOpPtr& root, const absl::flat_hash_map<const UOp*, UOpPtr>& subst) {
  absl::flat_hash_map<const UOp*, UOpPtr> done;
  for (const UOp* n : Toposort(root)) {
    if (auto it = subst.find(n); it != subst.end()) {
      done[n] = it->second;
      continue;
    }
    bool changed = false;
    std::vector<UOpPtr> src;
    src.reserve(n->num_src());
    for (const UOpPtr& s : n->src()) {
      auto it = done.find(s.get());
      const UOpPtr& ns = it == done.end() ? s : it->second;
      changed |= ns != s;
      src.push_back(ns);
    }
    if (changed) done[n] = n->WithSrc(src);
  }
  auto it = done.find(root.get());
  return it == done.end() ? root : it->second;
}

}  // namespace kiln::schedule
