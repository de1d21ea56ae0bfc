// Test oracles for the scheduler, independent of codegen:
//  - RefEval: the value of a tensor-graph node at a multi-index, straight from the op definitions;
//  - RunSchedule: executes the kernel ASTs of a Schedule (docs/kernel-ir.md §2) on host vectors, checking every
//    load and store is in bounds.
// Values are doubles (enough for float32 tests).
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "engine/schedule/schedule.h"
#include "engine/uop/uop.h"
#include "gtest/gtest.h"

namespace kiln::testing {

using HostBuffers = absl::node_hash_map<const UOp*, std::vector<double>>;

inline double ApplyAlu(Op op, DType dt, const std::vector<double>& v) {
  bool is_int = dt.IsInt();
  switch (op) {
    case Op::NEG: return -v[0];
    case Op::SQRT: return std::sqrt(v[0]);
    case Op::RECIPROCAL: return 1.0 / v[0];
    case Op::EXP2: return std::exp2(v[0]);
    case Op::LOG2: return std::log2(v[0]);
    case Op::SIN: return std::sin(v[0]);
    case Op::TRUNC: return std::trunc(v[0]);
    case Op::ADD: return v[0] + v[1];
    case Op::SUB: return v[0] - v[1];
    case Op::MUL: return v[0] * v[1];
    case Op::MAX: return std::max(v[0], v[1]);
    case Op::FDIV: return v[0] / v[1];
    case Op::CDIV: return v[1] == 0 ? 0 : std::trunc(v[0] / v[1]);
    case Op::CMOD: return v[1] == 0 ? 0 : std::fmod(v[0], v[1]);
    case Op::CMPLT: return v[0] < v[1];
    case Op::CMPNE: return v[0] != v[1];
    case Op::CMPEQ: return v[0] == v[1];
    case Op::AND: return (v[0] != 0) && (v[1] != 0);
    case Op::OR: return (v[0] != 0) || (v[1] != 0);
    case Op::WHERE: return v[0] != 0 ? v[1] : v[2];
    case Op::CAST:
      if (dt.IsBool()) return v[0] != 0;
      return is_int ? std::trunc(v[0]) : v[0];
    default: ADD_FAILURE() << "ApplyAlu: unsupported op " << OpName(op); return 0;
  }
}

inline double ReduceIdentity(Op op) {
  return op == Op::ADD ? 0.0 : op == Op::MUL ? 1.0 : -std::numeric_limits<double>::infinity();
}
inline double Combine(Op op, double a, double b) {
  return op == Op::ADD ? a + b : op == Op::MUL ? a * b : std::max(a, b);
}

// Reference value of `u` at `idx`.
inline double RefEval(const UOp* u, std::vector<int64_t> idx, const HostBuffers& bufs) {
  const Shape& out = u->shape();
  switch (u->op()) {
    case Op::BUFFER: return bufs.at(u)[idx[0]];
    case Op::CONST: return u->ConstValue();
    case Op::CONTIGUOUS:
    case Op::DETACH:
    case Op::CONTIGUOUS_BACKWARD: return RefEval(u->src(0).get(), idx, bufs);
    case Op::RESHAPE: {
      int64_t flat = 0;
      for (size_t i = 0; i < out.size(); ++i) flat = flat * out[i] + idx[i];
      const Shape& in = u->src(0)->shape();
      std::vector<int64_t> s(in.size());
      for (int i = static_cast<int>(in.size()) - 1; i >= 0; --i) {
        s[i] = flat % in[i];
        flat /= in[i];
      }
      return RefEval(u->src(0).get(), s, bufs);
    }
    case Op::EXPAND: {
      const Shape& in = u->src(0)->shape();
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i] == 1) idx[i] = 0;
      return RefEval(u->src(0).get(), idx, bufs);
    }
    case Op::PERMUTE: {
      std::vector<int64_t> s(idx.size());
      for (size_t i = 0; i < idx.size(); ++i) s[u->ArgVec()[i]] = idx[i];
      return RefEval(u->src(0).get(), s, bufs);
    }
    case Op::PAD: {
      const Shape& in = u->src(0)->shape();
      for (size_t i = 0; i < in.size(); ++i) {
        idx[i] -= u->ArgVec()[2 * i];
        if (idx[i] < 0 || idx[i] >= in[i]) return 0.0;
      }
      return RefEval(u->src(0).get(), idx, bufs);
    }
    case Op::SHRINK:
      for (size_t i = 0; i < idx.size(); ++i) idx[i] += u->ArgVec()[2 * i];
      return RefEval(u->src(0).get(), idx, bufs);
    case Op::FLIP:
      for (size_t i = 0; i < idx.size(); ++i)
        if (u->ArgVec()[i]) idx[i] = out[i] - 1 - idx[i];
      return RefEval(u->src(0).get(), idx, bufs);
    case Op::REDUCE_AXIS: {
      const ReduceArg& ra = std::get<ReduceArg>(u->arg());
      const Shape& in = u->src(0)->shape();
      double acc = ReduceIdentity(ra.op);
      std::function<void(size_t)> rec = [&](size_t k) {
        if (k == ra.axes.size()) {
          acc = Combine(ra.op, acc, RefEval(u->src(0).get(), idx, bufs));
          return;
        }
        for (int64_t i = 0; i < in[ra.axes[k]]; ++i) {
          idx[ra.axes[k]] = i;
          rec(k + 1);
        }
      };
      rec(0);
      return acc;
    }
    default: {
      std::vector<double> v;
      for (const UOpPtr& s : u->src()) {
        std::vector<int64_t> si(s->shape().size());
        size_t off = out.size() - si.size();
        for (size_t i = 0; i < si.size(); ++i) si[i] = s->shape()[i] == 1 ? 0 : idx[i + off];
        v.push_back(RefEval(s.get(), si, bufs));
      }
      return ApplyAlu(u->op(), u->dtype(), v);
    }
  }
}

// Executes one kernel AST with `bufs` bound by slot.
class AstRunner {
 public:
  explicit AstRunner(std::vector<std::vector<double>*> bufs) : bufs_(std::move(bufs)) {}

  void Run(const UOpPtr& sink) {
    for (const UOpPtr& s : sink->src()) Stmt(s.get());
  }

 private:
  void Stmt(const UOp* u) {
    if (u->op() == Op::END) {
      Loop(u, 1);
      return;
    }
    ASSERT_EQ(u->op(), Op::STORE);
    const UOp* index = u->src(0).get();
    if (index->num_src() == 3 && Eval(index->src(2).get()) == 0) return;
    std::vector<double>& b = *bufs_[index->src(0)->ArgInt()];
    int64_t i = static_cast<int64_t>(Eval(index->src(1).get()));
    ASSERT_TRUE(i >= 0 && i < static_cast<int64_t>(b.size())) << "store out of bounds: " << i;
    b[i] = Eval(u->src(1).get());
  }
  void Loop(const UOp* end, size_t k) {
    if (k == end->num_src()) {
      Stmt(end->src(0).get());
      return;
    }
    const UOp* r = end->src(k).get();
    for (int64_t i = 0; i < r->src(0)->ArgInt(); ++i) {
      env_[r] = i;
      Loop(end, k + 1);
    }
  }
  double Eval(const UOp* u) {
    switch (u->op()) {
      case Op::CONST: return u->ConstValue();
      case Op::RANGE: return static_cast<double>(env_.at(u));
      case Op::LOAD: {
        const UOp* index = u->src(0).get();
        if (index->num_src() == 3 && Eval(index->src(2).get()) == 0) return 0.0;
        const std::vector<double>& b = *bufs_[index->src(0)->ArgInt()];
        int64_t i = static_cast<int64_t>(Eval(index->src(1).get()));
        EXPECT_TRUE(i >= 0 && i < static_cast<int64_t>(b.size())) << "load out of bounds: " << i;
        if (i < 0 || i >= static_cast<int64_t>(b.size())) return 0.0;
        return b[i];
      }
      case Op::REDUCE: {
        Op op = std::get<Op>(u->arg());
        double acc = ReduceIdentity(op);
        std::function<void(size_t)> rec = [&](size_t k) {
          if (k == u->num_src()) {
            acc = Combine(op, acc, Eval(u->src(0).get()));
            return;
          }
          const UOp* r = u->src(k).get();
          for (int64_t i = 0; i < r->src(0)->ArgInt(); ++i) {
            env_[r] = i;
            rec(k + 1);
          }
        };
        rec(1);
        return acc;
      }
      default: {
        std::vector<double> v;
        for (const UOpPtr& s : u->src()) v.push_back(Eval(s.get()));
        return ApplyAlu(u->op(), u->dtype(), v);
      }
    }
  }

  std::vector<std::vector<double>*> bufs_;
  absl::flat_hash_map<const UOp*, int64_t> env_;
};

// Runs every item of `s` (kernels only) over `bufs`, creating vectors for buffers not present.
inline void RunSchedule(const Schedule& s, HostBuffers& bufs) {
  for (const ScheduleItem& it : s.items) {
    ASSERT_EQ(it.kind, ScheduleItem::Kind::kKernel);
    std::vector<std::vector<double>*> ptrs;
    for (const UOpPtr& b : it.buffers) {
      auto& v = bufs[b.get()];
      if (v.empty()) v.assign(b->ArgInt(), std::nan(""));
      ptrs.push_back(&v);
    }
    AstRunner(ptrs).Run(it.ast);
  }
}

}  // namespace kiln::testing
