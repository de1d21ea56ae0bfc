// The TC opt (tinygrad codegen/opt/tc.py) for the two layouts kiln emits: CUDA mma.sync m16n8k16 and the CPU's
// integer dot product m1n16k4 (AVX-512 VNNI vpdpbusd).
//
// A kernel  out[.., m, n] = f(sum_k a(m, k) * b(k, n))  with a, b in the tensor core's input dtypes and the sum in its
// accumulator dtype is rewritten so that one WMMA computes each m x n tile of the output per k-slice.
//
// CUDA: a warp of 32 work-items computes each 16 x 8 tile:
//   m -> mt (M/16 tiles, the same output axis), n -> nt (N/8), k -> kt (K/16, the same reduce axis), and a new LOCAL
//   axis `lane` (32, placed after every output axis so "lower gpu dims" makes it lidx0: lane = threadIdx.x % 32).
// With g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group), PTX ISA "Matrix Fragments for mma.m16n8k16":
//   A element j (0..7): row g + 8*((j>>1)&1),      col 2t + (j&1) + 8*(j>>2)
//   B element j (0..3): row 2t + (j&1) + 8*(j>>1), col g
//   C/D element i (0..3): row g + 8*(i>>1),        col 2t + (i&1)
// CPU (one work-item, no lane axis): m stays, n -> nt (N/16), k -> kt (K/4);
//   A element j (0..3): row m, col 4*kt + j;   B element 16j + i: row 4*kt + j, col 16*nt + i (row-major, so a
//   row-major B is four runs of 16 consecutive elements: vector loads);   C/D element i: col 16*nt + i. Matrix-vector
//   products have no M axis (m is then the empty tile).
// A, B are VECTORIZEs of the operand expressions with m/n/k substituted per element; D = WMMA(A, B, 0) is one product
// per k-slice; the output lanes become STOREs of f(REDUCE(GEP(D, i), kt)) with m/n substituted by the output
// element's row/column. Later opts (UPCAST/LOCAL of mt, nt; UNROLL of kt) replicate this as any body.
#include <algorithm>
#include <functional>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/codegen/graph_util.h"
#include "engine/codegen/lower_context.h"

namespace kiln::codegen {
namespace {

int64_t SizeOf(const UOp* r) {
  int64_t v = 0;
  return ConstInt(r->src(0), &v) ? v : -1;
}

bool IsOutputAxis(const UOp* r) {
  const auto* a = std::get_if<AxisArg>(&r->arg());
  return a != nullptr && (a->type == AxisType::kLoop || a->type == AxisType::kGlobal);
}

std::vector<const UOp*> RangesIn(const UOpPtr& x) {
  std::vector<const UOp*> out;
  for (const UOp* u : Toposort(x))
    if (u->op() == Op::RANGE) out.push_back(u);
  return out;
}

bool Contains(const std::vector<const UOp*>& v, const UOp* u) {
  return std::find(v.begin(), v.end(), u) != v.end();
}

UOpPtr Retile(const UOp* r, int64_t n) {
  return UOp::Make(Op::RANGE, r->dtype(), {UOp::Const(r->dtype(), n)}, r->arg());
}

// The CPU layout (m1n16k4, see the top of the file): no lane axis; each work-item's WMMA covers one row (or none, in
// a matrix-vector product) and 16 columns per 4-wide slice of k.
absl::StatusOr<UOpPtr> CpuDot(const UOpPtr& sink, const UOpPtr& end, const UOp* red, const UOp* rm, const UOp* rn,
                              const UOp* rk, const UOpPtr& a, const UOpPtr& b, const TensorCore& tc,
                              const std::string& what, LowerContext& ctx) {
  // A tile axis of one step is no loop (and no reduce): its offset is 0.
  const int64_t NT = SizeOf(rn) / tc.n, KT = SizeOf(rk) / tc.k;
  const UOpPtr nt = NT > 1 ? Retile(rn, NT) : nullptr, kt = KT > 1 ? Retile(rk, KT) : nullptr;
  const UOpPtr zero = UOp::Const(rn->dtype(), int64_t{0});
  ctx.tc_m_axis = rm == nullptr ? -1 : std::get<AxisArg>(rm->arg()).id;
  ctx.tc_n_axis = nt == nullptr ? -1 : std::get<AxisArg>(rn->arg()).id;
  ctx.tc_k_axis = kt == nullptr ? -1 : std::get<AxisArg>(rk->arg()).id;
  const UOpPtr n0 = nt != nullptr ? nt * tc.n : zero, k0 = kt != nullptr ? kt * tc.k : zero;
  UOpVec a_el, b_el, zeros;
  for (int j = 0; j < tc.k; ++j) a_el.push_back(Substitute(a, {{rk, k0 + int64_t{j}}}));
  for (int j = 0; j < tc.k; ++j)
    for (int i = 0; i < tc.n; ++i) b_el.push_back(Substitute(b, {{rk, k0 + int64_t{j}}, {rn, n0 + int64_t{i}}}));
  const DType acc = red->dtype();
  for (int i = 0; i < tc.c_elems(); ++i) zeros.push_back(UOp::Const(acc, int64_t{0}));
  const UOpPtr A = UOp::Make(Op::VECTORIZE, a->dtype().Vec(tc.a_elems()), a_el);
  const UOpPtr B = UOp::Make(Op::VECTORIZE, b->dtype().Vec(tc.b_elems()), b_el);
  const UOpPtr C = UOp::Make(Op::VECTORIZE, acc.Vec(tc.c_elems()), zeros);
  const UOpPtr D = UOp::Make(Op::WMMA, acc.Vec(tc.c_elems()), {A, B, C}, IntVec{tc.m, tc.n, tc.k});
  UOpVec values, ranges;
  for (const UOpPtr& s : end->src()) {
    if (s->op() != Op::RANGE) {
      values.push_back(s);
    } else if (s.get() != rn) {
      ranges.push_back(s);
    } else if (nt != nullptr) {
      ranges.push_back(nt);
    }
  }
  UOpVec src;
  for (int i = 0; i < tc.c_elems(); ++i) {
    const UOpPtr lane = UOp::Make(Op::GEP, acc, {D}, IntVec{i});
    const UOpPtr r = kt != nullptr ? UOp::Make(Op::REDUCE, acc, {lane, kt}, Op::ADD) : lane;
    for (const UOpPtr& val : values) src.push_back(Substitute(val, {{red, r}, {rn, n0 + int64_t{i}}}));
  }
  for (const UOpPtr& r : ranges) src.push_back(r);
  ctx.applied_opts.push_back(what);
  return UOp::Sink({UOp::Make(Op::END, end->dtype(), src, end->arg())});
}

}  // namespace

absl::StatusOr<UOpPtr> ApplyTensorCore(const UOpPtr& sink, const Opt& opt, LowerContext& ctx) {
  const std::string what = opt.ToString();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("opt ", what, ": ", why));
  };
  if (!ctx.applied_opts.empty()) return bad("TC must be the first opt");
  if (opt.axis != 0) return bad("axis must be 0");
  if (ctx.target.tensor_cores.empty()) return bad("target has no tensor cores");
  if (sink->num_src() != 1 || sink->src(0)->op() != Op::END)
    return bad("needs a kernel with one output END");
  const UOpPtr end = sink->src(0);
  std::vector<const UOp*> reds;  // sources first: an inner reduce before the reduces around it
  for (const UOp* u : Toposort(sink))
    if (u->op() == Op::REDUCE) reds.push_back(u);
  if (reds.empty()) return bad("no REDUCE");
  const UOp* red = reds.front();
  // Reduces around the product's sum (a block-scaled product, sum_b s_b * sum_i a_i b_i: 8-bit blocks with a scale
  // each) stay as they are: each output lane gets its own outer accumulator. The CPU layout only.
  const bool nested = reds.size() > 1;
  for (size_t i = 1; i < reds.size(); ++i) {
    const std::vector<const UOp*> inside = Toposort(UOpPtr::FromRaw(reds[i]));
    if (std::find(inside.begin(), inside.end(), red) == inside.end()) return bad("more than one REDUCE");
  }
  if (std::get<Op>(red->arg()) != Op::ADD) return bad("the REDUCE is not an ADD");
  if (red->num_src() != 2) return bad("the REDUCE is over more than one axis");
  const UOp* rk = red->src(1).get();
  const int64_t K = SizeOf(rk);
  // The operands: MUL(CAST(a), CAST(b)) in the accumulator dtype, or CAST(MUL(a, b)).
  const UOpPtr& v = red->src(0);
  UOpPtr a, b;  // (swapped below when the tensor core takes them the other way round)
  if (v->op() == Op::MUL && v->src(0)->op() == Op::CAST && v->src(1)->op() == Op::CAST) {
    a = v->src(0)->src(0);
    b = v->src(1)->src(0);
  } else if (v->op() == Op::CAST && v->src(0)->op() == Op::MUL) {
    a = v->src(0)->src(0);
    b = v->src(0)->src(1);
  } else {
    return bad("the reduced value is not a MUL of two tensor-core inputs");
  }
  if (a->dtype().count != 1 || b->dtype().count != 1) return bad("vector operands");
  // The product commutes: a tensor core whose A and B dtypes are b's and a's takes the operands swapped.
  auto fits = [&](const TensorCore& c, const UOpPtr& x, const UOpPtr& y) {
    return c.in == x->dtype().scalar && c.b_type() == y->dtype().scalar && c.acc == red->dtype().scalar;
  };
  const std::vector<TensorCore>& tcs = ctx.target.tensor_cores;
  const TensorCore* tc = nullptr;
  if (opt.arg >= 0) {
    if (opt.arg >= static_cast<int64_t>(tcs.size())) return bad("no such tensor core");
    tc = &tcs[opt.arg];
  } else {
    for (int swapped = 0; swapped < 2 && tc == nullptr; ++swapped)
      for (const TensorCore& c : tcs)
        if (swapped ? fits(c, b, a) : fits(c, a, b)) {
          tc = &c;
          break;
        }
    if (tc == nullptr) return bad("no tensor core for these dtypes");
  }
  if (!fits(*tc, a, b) && fits(*tc, b, a)) std::swap(a, b);
  if (!fits(*tc, a, b) || red->dtype().count != 1)
    return bad("operand or accumulator dtype does not match the tensor core");
  const bool cuda = tc->m == 16 && tc->n == 8 && tc->k == 16 && tc->threads == 32;
  if (!cuda && !tc->cpu_dot()) return bad("only the m16n8k16 and m1n16k4 layouts are implemented");
  if (cuda && nested) return bad("more than one REDUCE");
  if (cuda && !ctx.target.has_local) return bad("target has no work-groups");
  // M: an output axis of a that b does not use; N the reverse (the innermost such axis).
  const std::vector<const UOp*> ra = RangesIn(a), rb = RangesIn(b);
  if (!Contains(ra, rk) || !Contains(rb, rk)) return bad("both operands must use the reduce axis");
  auto pick = [&](const std::vector<const UOp*>& mine,
                  const std::vector<const UOp*>& other) -> const UOp* {
    const UOp* best = nullptr;
    for (const UOp* r : mine)
      if (IsOutputAxis(r) && !Contains(other, r) &&
          (best == nullptr || ctx.OrderOf(r) > ctx.OrderOf(best)))
        best = r;
    return best;
  };
  const UOp* rm = pick(ra, rb);
  const UOp* rn = pick(rb, ra);
  if ((rm == nullptr && !tc->cpu_dot()) || rn == nullptr)
    return bad("no M and N axes (each operand needs an output axis of its own)");
  const int64_t M = rm == nullptr ? 1 : SizeOf(rm), N = SizeOf(rn);
  if (M <= 0 || N <= 0 || K <= 0) return bad("axes of symbolic size");
  if (M % tc->m != 0 || N % tc->n != 0 || K % tc->k != 0)
    return bad(absl::StrCat("M, N, K = ", M, ", ", N, ", ", K, " are not multiples of ", tc->m,
                            ", ", tc->n, ", ", tc->k));
  bool end_has_m = rm == nullptr, end_has_n = false;
  for (const UOpPtr& s : end->src()) {
    end_has_m |= s.get() == rm;
    end_has_n |= s.get() == rn;
  }
  if (!end_has_m || !end_has_n) return bad("the output END does not close the M and N axes");
  if (!cuda) return CpuDot(sink, end, red, rm, rn, rk, a, b, *tc, what, ctx);
  KILN_RETURN_IF_ERROR(CheckLocalOpt(sink, Opt{OptOp::kLocal, 0, tc->threads}, tc->threads, ctx));

  // New axes: tiles keep the ids (and types) of m, n, k; the warp lane is a new LOCAL axis before the reduce axes.
  const DType it = rm->dtype();
  const UOpPtr mt = Retile(rm, M / tc->m), nt = Retile(rn, N / tc->n), kt = Retile(rk, K / tc->k);
  const int64_t lane_id = ctx.next_axis_id++;
  const UOpPtr lane = UOp::Make(Op::RANGE, it, {UOp::Const(it, int64_t{tc->threads})},
                                AxisArg{lane_id, AxisType::kLocal});
  ctx.order.insert(ctx.order.begin() + ctx.OrderOf(rk), lane_id);
  ctx.tc_m_axis = std::get<AxisArg>(rm->arg()).id;
  ctx.tc_n_axis = std::get<AxisArg>(rn->arg()).id;
  const UOpPtr g = lane / 4, t = lane % 4;
  const UOpPtr m0 = mt * tc->m, n0 = nt * tc->n, k0 = kt * tc->k;

  UOpVec a_el, b_el, zeros;
  for (int j = 0; j < tc->a_elems(); ++j) {
    const UOpPtr row = g + int64_t{8 * ((j >> 1) & 1)},
                 col = t * 2 + int64_t{(j & 1) + 8 * (j >> 2)};
    a_el.push_back(Substitute(a, {{rm, m0 + row}, {rk, k0 + col}}));
  }
  for (int j = 0; j < tc->b_elems(); ++j) {
    const UOpPtr row = t * 2 + int64_t{(j & 1) + 8 * (j >> 1)};
    b_el.push_back(Substitute(b, {{rk, k0 + row}, {rn, n0 + g}}));
  }
  const DType in = a->dtype(), acc = red->dtype();
  for (int i = 0; i < tc->c_elems(); ++i) zeros.push_back(UOp::Const(acc, 0.0));
  const UOpPtr A = UOp::Make(Op::VECTORIZE, in.Vec(tc->a_elems()), a_el);
  const UOpPtr B = UOp::Make(Op::VECTORIZE, in.Vec(tc->b_elems()), b_el);
  const UOpPtr C = UOp::Make(Op::VECTORIZE, acc.Vec(tc->c_elems()), zeros);
  const UOpPtr D =
      UOp::Make(Op::WMMA, acc.Vec(tc->c_elems()), {A, B, C}, IntVec{tc->m, tc->n, tc->k});

  UOpVec values, ranges;
  for (const UOpPtr& s : end->src()) {
    if (s->op() == Op::RANGE) {
      ranges.push_back(s.get() == rm ? mt : s.get() == rn ? nt : s);
    } else {
      values.push_back(s);
    }
  }
  ranges.push_back(lane);
  std::sort(ranges.begin(), ranges.end(), [&](const UOpPtr& x, const UOpPtr& y) {
    return ctx.OrderOf(x.get()) < ctx.OrderOf(y.get());
  });
  UOpVec src;
  for (int i = 0; i < tc->c_elems(); ++i) {
    const UOpPtr elem = UOp::Make(Op::GEP, acc, {D}, IntVec{i});
    const UOpPtr r = UOp::Make(Op::REDUCE, acc, {elem, kt}, Op::ADD);
    const UOpPtr row = g + int64_t{8 * (i >> 1)}, col = t * 2 + int64_t{i & 1};
    for (const UOpPtr& val : values)
      src.push_back(Substitute(val, {{red, r}, {rm, m0 + row}, {rn, n0 + col}}));
  }
  for (const UOpPtr& r : ranges) src.push_back(r);
  ctx.applied_opts.push_back(what);
  return UOp::Sink({UOp::Make(Op::END, end->dtype(), src, end->arg())});
}

// Register tile for the CPU layout: up to 8 rows (M) by 2 column tiles (32 int32 lanes), so each B vector (64 bytes)
// feeds 8 WMMAs and 16 accumulators take half of AVX-512's 32 registers, enough independent vpdpbusd to cover its
// latency (a plain product's k-slices are not unrolled: 16 independent accumulators already hide it); threads over the
// outermost output axis that splits whole tiles, with at least 64K multiply-adds each (the heuristic's
// kMinOpsPerThread).
absl::StatusOr<bool> ApplyCpuTensorCore(UOpPtr& cur, LowerContext& ctx, std::vector<Opt>* chosen) {
  if (GetKnob(Knob::kTc) <= 0 || ctx.target.tensor_cores.empty() || !ctx.has_reduce) return false;
  bool cpu = false;
  for (const TensorCore& tc : ctx.target.tensor_cores) cpu |= tc.cpu_dot();
  if (!cpu) return false;
  int reduces = 0;
  for (const UOp* u : Toposort(cur)) reduces += u->op() == Op::REDUCE;
  const LowerContext saved = ctx;
  absl::StatusOr<UOpPtr> tc = ApplyOpt(cur, {OptOp::kTc, 0, -1}, ctx);
  if (!tc.ok()) {
    ctx = saved;
    return false;
  }
  cur = *tc;
  chosen->push_back({OptOp::kTc, 0, -1});
  auto apply = [&](Opt o) -> absl::Status {
    KILN_ASSIGN_OR_RETURN(cur, ApplyOpt(cur, o, ctx));
    chosen->push_back(o);
    return absl::OkStatus();
  };
  auto axes = [&] { return AxesOfType(cur, ctx, {AxisType::kLoop, AxisType::kGlobal}); };
  auto index_of = [&](int64_t id) {
    const std::vector<UOpPtr> now = axes();
    for (int i = 0; i < static_cast<int>(now.size()); ++i)
      if (std::get<AxisArg>(now[i]->arg()).id == id) return i;
    return -1;
  };
  const std::vector<UOpPtr> out = axes();
  const std::vector<UOpPtr> red = AxesOfType(cur, ctx, {AxisType::kReduce});
  const int im = index_of(ctx.tc_m_axis), in = index_of(ctx.tc_n_axis);
  int64_t tm = 1, tn = 1;
  if (im >= 0)
    for (int64_t t : {8, 4, 2})
      if (RangeSize(out[im].get()) % t == 0) {
        tm = t;
        break;
      }
  // A block-scaled product (a reduce around the tensor core's) keeps a float accumulator per int one: one column
  // tile, 8 + 8 registers.
  if (in >= 0 && reduces == 1 && RangeSize(out[in].get()) % 2 == 0) tn = 2;
  int64_t macs = 64;  // per WMMA
  for (const UOpPtr& r : out) macs *= std::max<int64_t>(1, RangeSize(r.get()));
  for (const UOpPtr& r : red) macs *= std::max<int64_t>(1, RangeSize(r.get()));
  if (ctx.target.has_threads && ctx.target.max_threads > 1) {
    const int64_t t = ctx.target.max_threads;
    for (int a = 0; a < static_cast<int>(out.size()); ++a) {
      const int64_t unit = a == im ? tm : a == in ? tn : 1;
      if (macs / t >= 64 * 1024 && RangeSize(out[a].get()) % (t * unit) == 0) {
        KILN_RETURN_IF_ERROR(apply({OptOp::kThread, a, static_cast<int>(t)}));
        break;
      }
    }
  }
  const int64_t id_m = ctx.tc_m_axis, id_n = ctx.tc_n_axis;
  if (tn > 1) KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, index_of(id_n), static_cast<int>(tn)}));
  if (tm > 1) KILN_RETURN_IF_ERROR(apply({OptOp::kUpcast, index_of(id_m), static_cast<int>(tm)}));
  // Under a block-scaled sum, k-slices in pairs: a B operand packed two 4-bit values per byte (llm/block_linear.h:
  // slice 2j in the low nibbles, 2j + 1 in the high) then takes one 64-byte load and a shift per pair instead of a
  // select per slice; the two WMMAs chain on the accumulators (FoldWmmaAccumulators).
  if (reduces > 1 && ctx.tc_k_axis >= 0) {
    const std::vector<UOpPtr> now = AxesOfType(cur, ctx, {AxisType::kReduce});
    for (int i = 0; i < static_cast<int>(now.size()); ++i)
      if (std::get<AxisArg>(now[i]->arg()).id == ctx.tc_k_axis && RangeSize(now[i].get()) % 2 == 0) {
        KILN_RETURN_IF_ERROR(apply({OptOp::kUnroll, i, 2}));
        break;
      }
  }
  return true;
}

}  // namespace kiln::codegen

namespace kiln::codegen {

// After "lower reduces" a TC reduce is acc[k_i] = acc[k_i] + GEP(WMMA(A, B, 0), i) for the lanes i (4 on CUDA, 16 on
// the CPU). When all lanes of one WMMA are used exactly that way, the accumulators become its C operand (tinygrad's WMMA
// accumulates in place): WMMA(A, B, (acc[k_0], .., acc[k_3])) and acc[k_i] = GEP(that, i). An unrolled k-slice axis
// sums several WMMAs' lanes before the accumulator, acc[k_i] + (GEP(W1, i) + GEP(W2, i)); for integer accumulators
// (exact and associative: wrapping int32 adds) those chain, W2(A2, B2, W1(A1, B1, acc)). No other node changes.
absl::StatusOr<UOpPtr> FoldWmmaAccumulators(const UOpPtr& sink, LowerContext&) {
  struct Use {
    const UOp* add = nullptr;
    UOpPtr acc;  // the accumulator LOAD
  };
  std::map<std::vector<const UOp*>, std::vector<Use>> uses;  // the WMMAs summed (in graph order) -> per lane
  absl::flat_hash_map<const UOp*, int> users;
  const std::vector<const UOp*> topo = Toposort(sink);
  absl::flat_hash_map<const UOp*, size_t> order;
  for (size_t i = 0; i < topo.size(); ++i) order[topo[i]] = i;
  auto zero_c = [](const UOp* w) {
    const UOp* c = w->src(2).get();
    if (c->op() != Op::VECTORIZE) return false;
    for (const UOpPtr& s : c->src()) {
      if (s->op() != Op::CONST) return false;
      int64_t i = 1;
      const auto* f = std::get_if<ConstFloat>(&s->arg());
      if (f != nullptr ? f->value != 0.0 : !ConstInt(s, &i) || i != 0) return false;
    }
    return true;
  };
  for (const UOp* u : topo)
    for (const UOpPtr& s : u->src()) ++users[s.get()];
  // The WMMAs whose lane `lane` the single-use ADD tree `x` sums (false if anything else is in it).
  std::function<bool(const UOp*, int64_t*, std::vector<const UOp*>*)> leaves =
      [&](const UOp* x, int64_t* lane, std::vector<const UOp*>* ws) {
        if (x->op() == Op::ADD && x->num_src() == 2 && users[x] == 1)
          return leaves(x->src(0).get(), lane, ws) && leaves(x->src(1).get(), lane, ws);
        const IntVec* lanes = x->op() == Op::GEP ? ArgIntVec(x->arg()) : nullptr;
        if (lanes == nullptr || lanes->size() != 1 || x->src(0)->op() != Op::WMMA || users[x] != 1 ||
            !zero_c(x->src(0).get()) || (*lane >= 0 && (*lanes)[0] != *lane))
          return false;
        *lane = (*lanes)[0];
        ws->push_back(x->src(0).get());
        return true;
      };
  for (const UOp* u : topo) {
    if (u->op() != Op::ADD || u->num_src() != 2) continue;
    const UOpPtr& acc = u->src(0);
    if (acc->op() != Op::LOAD) continue;
    const UOp* ix = acc->src(0).get();
    if (ix->op() != Op::INDEX || ix->src(0)->dtype().addrspace != AddrSpace::kReg) continue;
    int64_t lane = -1;
    std::vector<const UOp*> ws;
    if (!leaves(u->src(1).get(), &lane, &ws)) continue;
    if (ws.size() > 1 && !u->dtype().IsInt()) continue;  // float sums would be reassociated
    std::sort(ws.begin(), ws.end(), [&](const UOp* a, const UOp* b) { return order[a] < order[b]; });
    if (std::adjacent_find(ws.begin(), ws.end()) != ws.end()) continue;
    std::vector<Use>& v = uses[ws];
    v.resize(ws[0]->dtype().count);
    v[lane] = Use{u, acc};
  }
  absl::flat_hash_map<const UOp*, UOpPtr> repl;  // ADD -> GEP(last WMMA of the chain, i)
  absl::flat_hash_set<const UOp*> taken;         // a WMMA folds into one chain at most
  for (const auto& [ws, v] : uses) {
    if (std::any_of(v.begin(), v.end(), [](const Use& x) { return x.add == nullptr; })) continue;
    if (std::any_of(ws.begin(), ws.end(), [&](const UOp* w) { return taken.contains(w); })) continue;
    UOpVec c;
    for (const Use& x : v) c.push_back(x.acc);
    UOpPtr chain = UOp::Make(Op::VECTORIZE, ws[0]->dtype(), c);
    for (const UOp* w : ws) {
      chain = UOp::Make(Op::WMMA, w->dtype(), {w->src(0), w->src(1), chain}, w->arg());
      taken.insert(w);
    }
    for (size_t i = 0; i < v.size(); ++i)
      repl.emplace(v[i].add, UOp::Make(Op::GEP, ws[0]->dtype().Scalar(), {chain}, IntVec{static_cast<int64_t>(i)}));
  }
  if (repl.empty()) return sink;
  return Substitute(sink, repl);
}

}  // namespace kiln::codegen
