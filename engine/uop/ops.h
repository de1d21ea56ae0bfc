// Op enum and op groups, generated from ops.def.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

inline constexpr uint32_t kOpFlagUnary = 1u << 0;
inline constexpr uint32_t kOpFlagBinary = 1u << 1;
inline constexpr uint32_t kOpFlagTernary = 1u << 2;
inline constexpr uint32_t kOpFlagCommutative = 1u << 3;
inline constexpr uint32_t kOpFlagAssociative = 1u << 4;
inline constexpr uint32_t kOpFlagIdempotent = 1u << 5;
inline constexpr uint32_t kOpFlagComparison = 1u << 6;
inline constexpr uint32_t kOpFlagMovement = 1u << 7;
inline constexpr uint32_t kOpFlagTensor = 1u << 8;      // graph-only: never in a program
inline constexpr uint32_t kOpFlagIrreducible = 1u << 9;
inline constexpr uint32_t kOpFlagDefine = 1u << 10;
inline constexpr uint32_t kOpFlagInternal = 1u << 11;   // carries source text: never from the wire

enum class Op : uint8_t {
#define KILN_OP(name, min_src, max_src, flags) name,
#include "engine/uop/ops.def"
#undef KILN_OP
};

inline constexpr int kNumOps = 0
#define KILN_OP(name, min_src, max_src, flags) +1
#include "engine/uop/ops.def"
#undef KILN_OP
    ;

struct OpInfo {
  std::string_view name;
  int min_src;
  int max_src;  // -1 = unbounded
  uint32_t flags;
};

inline constexpr OpInfo kOpInfo[kNumOps] = {
#define KILN_OP(name, min_src, max_src, flags) {#name, min_src, max_src, flags},
#include "engine/uop/ops.def"
#undef KILN_OP
};

constexpr const OpInfo& GetOpInfo(Op op) { return kOpInfo[static_cast<int>(op)]; }
constexpr std::string_view OpName(Op op) { return GetOpInfo(op).name; }
std::optional<Op> ParseOp(std::string_view name);

constexpr bool HasFlag(Op op, uint32_t f) { return (GetOpInfo(op).flags & f) != 0; }
constexpr bool IsUnary(Op op) { return HasFlag(op, kOpFlagUnary); }
constexpr bool IsBinary(Op op) { return HasFlag(op, kOpFlagBinary); }
constexpr bool IsTernary(Op op) { return HasFlag(op, kOpFlagTernary); }
constexpr bool IsALU(Op op) { return HasFlag(op, kOpFlagUnary | kOpFlagBinary | kOpFlagTernary); }
constexpr bool IsElementwise(Op op) { return IsALU(op) || op == Op::CAST || op == Op::BITCAST; }
constexpr bool IsCommutative(Op op) { return HasFlag(op, kOpFlagCommutative); }
constexpr bool IsAssociative(Op op) { return HasFlag(op, kOpFlagAssociative); }
constexpr bool IsIdempotent(Op op) { return HasFlag(op, kOpFlagIdempotent); }
constexpr bool IsComparison(Op op) { return HasFlag(op, kOpFlagComparison); }
constexpr bool IsMovement(Op op) { return HasFlag(op, kOpFlagMovement); }
constexpr bool IsTensorOnly(Op op) { return HasFlag(op, kOpFlagTensor); }
constexpr bool IsIrreducible(Op op) { return HasFlag(op, kOpFlagIrreducible); }
constexpr bool IsInternalOnly(Op op) { return HasFlag(op, kOpFlagInternal); }
// Ops a reduction can combine with (tinygrad GroupOp.Reduce).
constexpr bool IsReduceOp(Op op) { return op == Op::ADD || op == Op::MUL || op == Op::MAX; }

// A set of ops as a bitset, for UPat op sets and early-reject sets.
class OpSet {
 public:
  constexpr OpSet() = default;
  constexpr OpSet(std::initializer_list<Op> ops) {
    for (Op o : ops) Add(o);
  }
  constexpr void Add(Op o) { bits_[static_cast<int>(o) >> 6] |= uint64_t{1} << (static_cast<int>(o) & 63); }
  constexpr bool Contains(Op o) const {
    return (bits_[static_cast<int>(o) >> 6] >> (static_cast<int>(o) & 63) & 1) != 0;
  }
  constexpr bool Empty() const { return bits_[0] == 0 && bits_[1] == 0; }
  // Whether every op of `this` is in `other`.
  constexpr bool SubsetOf(const OpSet& other) const {
    return (bits_[0] & ~other.bits_[0]) == 0 && (bits_[1] & ~other.bits_[1]) == 0;
  }
  constexpr OpSet Union(const OpSet& o) const {
    OpSet r;
    r.bits_[0] = bits_[0] | o.bits_[0];
    r.bits_[1] = bits_[1] | o.bits_[1];
    return r;
  }
  friend constexpr bool operator==(const OpSet& a, const OpSet& b) {
    return a.bits_[0] == b.bits_[0] && a.bits_[1] == b.bits_[1];
  }

 private:
  static_assert(kNumOps <= 128);
  uint64_t bits_[2] = {0, 0};
};

}  // namespace kiln
