// A tiny reference interpreter of tensor-level graphs (docs/kernel-ir.md §1), for tests only: it
// evaluates CONST / movement / REDUCE_AXIS / elementwise nodes on the host, element by element, so
// the Tensor lowering (arange, slicing, pooling, conv, random bits, ...) can be checked against
// values computed independently in the test, without engine/realize. Ints are kept as int64 and
// wrapped to their dtype's width after every op; floats are computed in double and rounded to
// float32 where the dtype is float32. Not a conformance oracle for devices (that is the INTERP backend).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/base/check.h"
#include "engine/tensor/tensor.h"
#include "engine/uop/uop.h"

namespace kiln::testing {

class RefEval {
 public:
  // Values of `t` in row-major order, as doubles (ints converted).
  std::vector<double> Eval(const Tensor& t) {
    KILN_CHECK(t.ok());
    for (const UOp* u : Toposort(t.uop())) vals_[u] = Compute(u);
    const Buf& b = vals_[t.uop().get()];
    std::vector<double> out(b.size());
    for (size_t i = 0; i < b.size(); ++i) out[i] = b[i];
    return out;
  }

 private:
  using Buf = std::vector<double>;  // ints are exact up to 2^53; wide uint math is done in uint64 below

  static double Wrap(DType d, double v) {
    if (d.IsFloat()) return d == dtypes::kFloat32 ? static_cast<double>(static_cast<float>(v)) : v;
    if (d.IsBool()) return v != 0 ? 1 : 0;
    int bits = d.ItemSize() * 8;
    if (bits >= 64) return v;
    uint64_t m = (uint64_t{1} << bits) - 1;
    uint64_t u = static_cast<uint64_t>(static_cast<int64_t>(v)) & m;
    if (!d.IsUnsigned() && (u >> (bits - 1))) return static_cast<double>(static_cast<int64_t>(u | ~m));
    return static_cast<double>(u);
  }

  static std::vector<int64_t> Strides(const Shape& s) {
    std::vector<int64_t> st(s.size(), 1);
    for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
    return st;
  }

  // An integer result (as uint64 bits) wrapped to d's width, as a double (exact below 2^53).
  static double FromBits(DType d, uint64_t u) {
    int bits = d.ItemSize() * 8;
    if (bits < 64) {
      uint64_t m = (uint64_t{1} << bits) - 1;
      u &= m;
      if (!d.IsUnsigned() && (u >> (bits - 1))) u |= ~m;
    }
    return d.IsUnsigned() ? static_cast<double>(u) : static_cast<double>(static_cast<int64_t>(u));
  }
  static uint64_t Bits(double v) {
    return v >= 9223372036854775808.0 ? static_cast<uint64_t>(v) : static_cast<uint64_t>(static_cast<int64_t>(v));
  }

  static double Alu(Op op, DType d, double a, double b) {
    bool fl = d.IsFloat();
    uint64_t ua = fl ? 0 : Bits(a), ub = fl ? 0 : Bits(b);
    switch (op) {
      case Op::ADD: return fl ? a + b : FromBits(d, ua + ub);
      case Op::MUL: return fl ? a * b : FromBits(d, ua * ub);
      case Op::MAX: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
      case Op::CMPLT: return a < b;
      case Op::CMPEQ: return a == b;
      case Op::CMPNE: return a != b;
      case Op::AND: return FromBits(d, ua & ub);
      case Op::OR: return FromBits(d, ua | ub);
      case Op::XOR: return FromBits(d, ua ^ ub);
      case Op::SHL: return FromBits(d, ua << ub);
      case Op::SHR: return d.IsUnsigned() ? FromBits(d, ua >> ub) : FromBits(d, static_cast<uint64_t>(static_cast<int64_t>(a) >> ub));
      case Op::FLOORDIV: return b == 0 ? 0 : std::floor(a / b);
      case Op::FLOORMOD: return b == 0 ? 0 : a - b * std::floor(a / b);
      default: KILN_CHECK_MSG(false, "RefEval: unsupported binary op");
    }
    return 0;
  }

  Buf Compute(const UOp* u) {
    const Shape& out = u->shape();
    int64_t n = u->Numel();
    Buf r(n);
    auto src = [&](size_t i) -> const Buf& { return vals_.at(u->src(i).get()); };
    DType d = u->dtype();
    switch (u->op()) {
      case Op::DEVICE:
      case Op::UNIQUE: return {};
      case Op::CONST: return {Wrap(d, u->ConstValue())};
      case Op::CONTIGUOUS:
      case Op::DETACH: return src(0);
      case Op::CAST: {
        for (int64_t i = 0; i < n; ++i) {
          double v = src(0)[i];
          r[i] = d.IsFloat() || d.IsBool() ? Wrap(d, v) : Wrap(d, std::trunc(v));
        }
        return r;
      }
      case Op::WHERE:
        for (int64_t i = 0; i < n; ++i) r[i] = src(0)[i] != 0 ? src(1)[i] : src(2)[i];
        return r;
      default: break;
    }
    if (IsUnary(u->op())) {
      for (int64_t i = 0; i < n; ++i) {
        double x = src(0)[i];
        switch (u->op()) {
          case Op::EXP2: r[i] = std::exp2(x); break;
          case Op::LOG2: r[i] = std::log2(x); break;
          case Op::SIN: r[i] = std::sin(x); break;
          case Op::SQRT: r[i] = std::sqrt(x); break;
          case Op::RECIPROCAL: r[i] = 1.0 / x; break;
          case Op::TRUNC: r[i] = std::trunc(x); break;
          case Op::NEG: r[i] = -x; break;
          default: KILN_CHECK_MSG(false, "RefEval: unsupported unary op");
        }
        r[i] = Wrap(d, r[i]);
      }
      return r;
    }
    if (IsBinary(u->op())) {
      DType sd = u->src(0)->dtype();
      for (int64_t i = 0; i < n; ++i) {
        double v = Alu(u->op(), sd, src(0)[i], src(1)[i]);
        r[i] = d.IsFloat() || d.IsBool() ? Wrap(d, v) : v;
      }
      return r;
    }
    // movement and reduce: map each output index to an input index
    const Shape& in = u->src(0)->shape();
    std::vector<int64_t> ist = Strides(in), idx(out.size());
    const Buf& x = src(0);
    if (u->op() == Op::REDUCE_AXIS) {
      const ReduceArg& ra = std::get<ReduceArg>(u->arg());
      double init = ra.op == Op::ADD ? 0 : ra.op == Op::MUL ? 1 : -INFINITY;
      std::fill(r.begin(), r.end(), init);
      std::vector<int64_t> ost = Strides(out);
      std::vector<int64_t> ii(in.size());
      for (int64_t f = 0; f < u->src(0)->Numel(); ++f) {
        int64_t rem = f, o = 0;
        for (size_t k = 0; k < in.size(); ++k) {
          ii[k] = rem / ist[k];
          rem %= ist[k];
          if (out[k] != 1 || in[k] == 1) o += ii[k] * ost[k];
        }
        r[o] = ra.op == Op::ADD ? r[o] + x[f] : ra.op == Op::MUL ? r[o] * x[f] : std::max(r[o], x[f]);
        r[o] = Wrap(d, r[o]);
      }
      return r;
    }
    std::vector<int64_t> ost = Strides(out);
    for (int64_t f = 0; f < n; ++f) {
      int64_t rem = f;
      for (size_t k = 0; k < out.size(); ++k) {
        idx[k] = ost.empty() ? 0 : rem / ost[k];
        rem = ost.empty() ? 0 : rem % ost[k];
      }
      if (u->op() == Op::RESHAPE || u->op() == Op::BUFFER) {
        r[f] = x[f];
        continue;
      }
      const IntVec& a = u->ArgVec();
      int64_t off = 0;
      bool valid = true;
      for (size_t k = 0; k < in.size(); ++k) {
        int64_t j = idx[k];
        switch (u->op()) {
          case Op::EXPAND: j = in[k] == 1 ? 0 : j; break;
          case Op::PERMUTE: break;
          case Op::PAD: j -= a[2 * k]; valid = valid && j >= 0 && j < in[k]; break;
          case Op::SHRINK: j += a[2 * k]; break;
          case Op::FLIP: j = a[k] ? in[k] - 1 - j : j; break;
          default: KILN_CHECK_MSG(false, "RefEval: unsupported op");
        }
        if (u->op() == Op::PERMUTE) continue;
        off += j * ist[k];
      }
      if (u->op() == Op::PERMUTE) {
        for (size_t k = 0; k < out.size(); ++k) off += idx[k] * ist[a[k]];
      }
      r[f] = valid ? x[off] : 0.0;
    }
    return r;
  }

  absl::flat_hash_map<const UOp*, Buf> vals_;
};

}  // namespace kiln::testing
