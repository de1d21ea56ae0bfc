// Internal to the C-style renderers (c_style.cc, c_style_alu.cc): the per-Render emitter state and helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/codegen/program.h"
#include "engine/codegen/render/c_style.h"

namespace kiln::codegen::cstyle_internal {

// Preamble helpers a kernel may need, emitted once each in this order.
enum Helper : int { kHalf = 0, kBFloat, kFMaxF, kFMaxD, kMmaF16, kMmaBF16, kNumHelpers };

class Emitter {
 public:
  Emitter(const Program& p, CDialect d) : p_(p), d_(d) {}
  absl::StatusOr<std::string> Run();

  // ---- types ----
  bool Cl() const { return d_ == CDialect::kOpenCL; }
  static bool IsHalfLike(DType d) {
    return d.scalar == ScalarType::kFloat16 || d.scalar == ScalarType::kBFloat16;
  }
  // Register type (half-likes are float, bool is bool) and memory type (bool -> uchar, half-likes -> ushort).
  std::string RegType(DType d) const;
  std::string MemType(DType d) const;
  std::string ScalarName(ScalarType s) const;
  std::string UnsignedOf(DType d) const;  // the unsigned integer type of the same width

 private:
  // ---- statements ----
  void Line(const std::string& s) { body_ += std::string(2 * depth_, ' ') + s + "\n"; }
  std::string Name(size_t i) const { return "v" + std::to_string(i); }
  void Def(size_t i, const UOp& u, const std::string& type, const std::string& expr);
  std::string Ref(const UOp* u);

  absl::Status EmitOne(size_t i, const UOp& u);
  absl::Status EmitLoad(size_t i, const UOp& u);
  absl::Status EmitStore(const UOp& u);
  absl::Status EmitSpecial(size_t i, const UOp& u);
  absl::Status EmitVector(size_t i, const UOp& u);
  absl::Status EmitWmma(size_t i, const UOp& u);

  // ---- c_style_alu.cc ----
 public:
  std::string Const(DType d, const Arg& a);
  absl::StatusOr<std::string> Alu(const UOp& u);
  absl::StatusOr<std::string> Cast(const UOp& u);
  std::string Preamble() const;

 private:
  absl::StatusOr<std::string> IntAlu(Op op, DType d, const std::vector<std::string>& a,
                                     const UOp& u);
  absl::StatusOr<std::string> FloatAlu(Op op, DType d, const std::vector<std::string>& a);
  std::string Math(const char* fn, DType d, const std::vector<std::string>& a);
  std::string RoundTo(DType d,
                      const std::string& float_expr);      // float -> register value of half-like d
  std::string BitsToFloat(const std::string& bits) const;  // uint bits -> float
  std::string FloatToBits(const std::string& f) const;     // float -> uint bits
  void Need(Helper h) { need_[h] = true; }

  const Program& p_;
  CDialect d_;
  absl::Status err_;
  std::string body_;
  int depth_ = 1;
  absl::flat_hash_map<const UOp*, std::string> val_;
  // Half-like VECTORIZEs (WMMA fragments) are not emitted: their lanes, for EmitWmma.
  absl::flat_hash_map<const UOp*, std::vector<const UOp*>> half_vec_;
  std::string HalfBits(const UOp* lane);  // a half-like lane as its 16-bit pattern (unsigned int)
  std::vector<const UOp*> open_;  // open RANGE / IF blocks, outermost first
  bool need_[kNumHelpers] = {};
  bool need_fp64_ = false;
  int64_t local_threads_ = 1;
};

}  // namespace kiln::codegen::cstyle_internal
