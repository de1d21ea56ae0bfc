// Internal to the llvm renderer (llvm_ir.cc, llvm_ir_alu.cc): the per-Render emitter state and helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/codegen/program.h"

namespace kiln::codegen::llvm_internal {

bool IsHalfLike(DType d);
// LLVM type of a register value (bool -> i1) and of its memory form (bool -> i8); vectors as <N x T>.
std::string RegType(DType d);
std::string MemType(DType d);
// A constant of dtype d (vector: every lane) from a CONST arg, rendered bit-exactly.
std::string ConstLiteral(DType d, const Arg& a);
// `lit` repeated over `count` lanes of scalar type `ty` (count 1 -> lit).
std::string Splat(const std::string& ty, const std::string& lit, int count);

class Emitter {
 public:
  Emitter(const Program& p, bool fp_contract) : p_(p), fp_contract_(fp_contract) {}
  absl::StatusOr<std::string> Run();

  // ---- used by the op emitters ----
  std::string Tmp() { return "%t" + std::to_string(ntmp_++); }
  void Line(const std::string& s) { body_ += "  " + s + "\n"; }
  void Label(const std::string& l) {
    body_ += l + ":\n";
    cur_block_ = "%" + l;
  }
  std::string Ref(const UOp* u);
  // float (same width) from half/bfloat and back.
  std::string ToFloat(const std::string& v, DType d);
  std::string FromFloat(const std::string& v, DType to);
  std::string Intrinsic(const std::string& base, DType d, const std::vector<std::string>& args);
  std::string Exp2F32(DType d, const std::string& x);      // 2^x as arithmetic, see llvm_ir_alu.cc
  std::string Exp2CallF32(DType d, const std::string& x);  // 2^x through @kiln_exp2 and its vector variants
  bool InReduceLoop() const;  // an open loop is a reduce range

  absl::Status EmitAlu(const UOp& u);
  absl::Status EmitCast(const UOp& u);
  absl::Status EmitWmma(const UOp& u);

 private:
  absl::Status EmitOne(size_t i, const UOp& u);
  absl::Status EmitLoad(const UOp& u);
  absl::Status EmitStore(const UOp& u);
  absl::Status EmitRange(size_t i, const UOp& u);
  absl::Status EmitEnd(const UOp& u);
  absl::StatusOr<std::string> IntOp(Op op, DType d, const std::vector<std::string>& a, const UOp& u);
  absl::StatusOr<std::string> FloatOp(Op op, DType d, const std::vector<std::string>& a);
  std::string IntDiv(Op op, DType d, const std::string& a, const std::string& b, const UOp* divisor);
  std::string Gate(const UOp& mem_op, size_t gate_src);

  struct Loop {
    const UOp* range;
    int id;
    std::string phi, end, type;
    bool gated = false;  // entered only where store_gate_ holds
  };

  const Program& p_;
  absl::Status err_;
  std::string body_, allocas_;
  std::string cur_block_ = "%entry";
  absl::flat_hash_map<const UOp*, std::string> val_;
  absl::flat_hash_map<const UOp*, int> ifs_;
  std::vector<Loop> loops_;   // open loops, outermost first
  std::vector<int> open_ifs_;
  absl::btree_set<std::string> decls_;
  int64_t ntmp_ = 0;
  int nblock_ = 0;
  bool streaming_stores_ = false;  // see kStreamingStoreBytes in llvm_ir.cc
  const UOp* store_gate_ = nullptr;  // the one scalar gate of every STORE, if they share one (see EmitRange)
  bool fp_contract_ = true;        // LlvmIrRenderer's fp_contract

 public:
  bool fp_contract() const { return fp_contract_; }
};

}  // namespace kiln::codegen::llvm_internal
