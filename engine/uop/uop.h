// UOp: kiln's one graph IR node, for tensor graphs, kernels and schedules alike.
//
// A UOp is (op, dtype, src, arg, tag) and is immutable. It is created only through factories that
// *intern* it: building a node equal to a live one (same op, dtype, arg, tag and the same source
// pointers) returns the existing node, so pointer equality is structural equality and graphs are
// DAGs that share every common subexpression. The intern table is weak and sharded: it holds raw
// pointers only, a node leaves it when its last UOpPtr dies, and many threads may build graphs at
// once (each shard has its own mutex). Destruction is iterative, so dropping a 1M-node chain does
// not recurse.
//
// `tag` is a scratch marker for rewrites; it is part of identity (tagged and untagged nodes are
// different nodes) but excluded from the structural Key().
//
// Key() is a SHA-256 over (op, dtype, arg, child keys), computed lazily and iteratively; it is the
// content hash every cache uses, in memory and on disk, and is stable across processes.
//
// id() is a process-wide serial number given at construction and never reused, unlike the node's address, which
// the allocator hands to a later node once this one dies. A map keyed by node addresses must either hold its nodes
// (UOpPtr keys) or key them with UOpKey (uop_key.h), which checks the id on every match (docs/architecture.md §4,
// the stable-key rule).
//
// Shapes: tensor-level nodes have a shape, inferred at creation: ALU ops broadcast numpy-style,
// movement ops apply their arg, REDUCE_AXIS keeps reduced dims as 1, CONST / DEFINE_VAR / RANGE /
// SPECIAL are scalars (shape ()), BUFFER is 1-D (its element count). Nodes whose sources have no
// shape (kernel-level LOAD/STORE/SINK...) have none.
//
// dtype rules: ALU sources share one dtype (comparisons return bool, WHERE takes a bool condition);
// CAST/BITCAST change dtype; pointers (dtype.is_ptr) appear only in kernel-level IR.
//
// Two factories: Make() trusts its caller (passes and rules inside kiln; the spec verifier checks
// their output between passes) and is fast; Create() validates arity, arg kind, dtypes and shape
// and returns an error Status naming the problem. Everything that takes input from outside kiln
// (parser, wire decoding, Tensor API) goes through Create().
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/base/sha256.h"
#include "engine/dtype/dtype.h"
#include "engine/uop/arg.h"
#include "engine/uop/ops.h"

namespace kiln {

class UOp;
struct InternTable;
using Shape = absl::InlinedVector<int64_t, 4>;

// Owning handle to an interned UOp (intrusive reference count). Cheap to copy; compares and
// hashes by pointer, which for interned nodes is structural identity.
class UOpPtr {
 public:
  UOpPtr() = default;
  UOpPtr(std::nullptr_t) {}  // NOLINT(google-explicit-constructor)
  UOpPtr(const UOpPtr& o);
  UOpPtr(UOpPtr&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  UOpPtr& operator=(const UOpPtr& o);
  UOpPtr& operator=(UOpPtr&& o) noexcept;
  ~UOpPtr();

  const UOp* get() const { return p_; }
  const UOp* operator->() const { return p_; }
  const UOp& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  friend bool operator==(const UOpPtr& a, const UOpPtr& b) { return a.p_ == b.p_; }
  friend bool operator!=(const UOpPtr& a, const UOpPtr& b) { return a.p_ != b.p_; }
  friend bool operator==(const UOpPtr& a, const UOp* b) { return a.p_ == b; }
  friend bool operator!=(const UOpPtr& a, const UOp* b) { return a.p_ != b; }
  template <typename H>
  friend H AbslHashValue(H h, const UOpPtr& p) { return H::combine(std::move(h), p.p_); }

  // Takes a new reference to a live node (e.g. one reached through a raw pointer from Toposort).
  static UOpPtr FromRaw(const UOp* p);

 private:
  friend class UOp;
  friend struct InternTable;
  struct AdoptTag {};
  UOpPtr(const UOp* p, AdoptTag) : p_(p) {}
  const UOp* p_ = nullptr;
};

using UOpVec = absl::InlinedVector<UOpPtr, 3>;

class UOp {
 public:
  // ---- factories (see the header comment) ----
  static UOpPtr Make(Op op, DType dtype, absl::Span<const UOpPtr> src = {}, Arg arg = {},
                     int64_t tag = 0);
  static UOpPtr Make(Op op, DType dtype, std::initializer_list<UOpPtr> src, Arg arg = {},
                     int64_t tag = 0) {
    return Make(op, dtype, absl::Span<const UOpPtr>(src.begin(), src.size()), std::move(arg), tag);
  }
  static absl::StatusOr<UOpPtr> Create(Op op, DType dtype, absl::Span<const UOpPtr> src,
                                       Arg arg = {}, int64_t tag = 0);

  // Constants. The value is converted to the dtype's kind (bool / int64 / double); for a vector
  // dtype the CONST is a scalar broadcast (its dtype keeps the width).
  static UOpPtr Const(DType dtype, double v);
  static UOpPtr Const(DType dtype, int64_t v);
  static UOpPtr ConstInt(int64_t v) { return Const(dtypes::kIndex, v); }
  static UOpPtr ConstBool(bool v);
  // Converts a double/int64/bool arg into the dtype's canonical arg alternative.
  static Arg ConstArg(DType dtype, double v);
  static Arg ConstArg(DType dtype, int64_t v);
  // A symbolic integer in [min, max] (index dtype).
  static UOpPtr Variable(std::string name, int64_t min, int64_t max);
  static UOpPtr Range(int64_t end, int64_t id, AxisType type = AxisType::kLoop);
  static UOpPtr Sink(absl::Span<const UOpPtr> src);
  // ALU node; dtype from the sources (bool for comparisons, src[1] for WHERE).
  static UOpPtr Alu(Op op, absl::Span<const UOpPtr> src);

  // ---- fields ----
  Op op() const { return op_; }
  DType dtype() const { return dtype_; }
  absl::Span<const UOpPtr> src() const { return src_; }
  const UOpPtr& src(size_t i) const { return src_[i]; }
  size_t num_src() const { return src_.size(); }
  const Arg& arg() const { return arg_; }
  int64_t tag() const { return tag_; }
  size_t hash() const { return hash_; }
  uint64_t id() const { return id_; }  // never reused within the process (see the header comment)

  bool has_shape() const { return has_shape_; }
  const Shape& shape() const { return shape_; }  // empty if !has_shape() (check it first)
  int64_t Numel() const;                         // product of shape (1 for scalars)

  // Typed arg access; KILN_CHECKs the alternative (use std::get_if on arg() when unsure).
  int64_t ArgInt() const;
  double ArgFloat() const;  // CONST float or int as double
  bool ArgBool() const;
  const IntVec& ArgVec() const;
  const std::string& ArgStr() const;
  bool IsConst() const { return op_ == Op::CONST; }
  // The CONST value as a double / int64 (CONST nodes only).
  double ConstValue() const;

  // Structural key (SHA-256), computed on first use. Thread-safe.
  const Digest& Key() const;

  // A copy with some fields replaced (interned like any other node).
  UOpPtr WithSrc(absl::Span<const UOpPtr> src) const;
  UOpPtr WithArg(Arg arg) const;
  UOpPtr WithDType(DType dtype) const;
  UOpPtr WithTag(int64_t tag) const;
  UOpPtr Ptr() const { return UOpPtr::FromRaw(this); }

  // Range-analysis cache, owned by engine/symbolic (VMin/VMax). state: 0 none, 1 computing, 2 ready.
  struct RangeCache {
    mutable std::atomic<uint8_t> state{0};
    mutable int64_t lo = 0;
    mutable int64_t hi = 0;
  };
  const RangeCache& range_cache() const { return range_cache_; }

  // Number of live interned nodes (all shards). For tests and metrics.
  static size_t LiveCount();

  // Scratch word owned by engine/rewrite (GraphRewrite's memo: owner id << 32 | entry index).
  // Not part of identity; meaningless outside a running rewrite. Thread-safe (atomic).
  std::atomic<uint64_t>& rewrite_mark() const { return rewrite_mark_; }

  // Called (on the releasing thread, outside any table lock) just before a BUFFER node is destroyed, so the runtime
  // can free the device memory attached to it. One process-wide hook; set once at start-up by engine/runtime.
  using BufferDeathHook = void (*)(const UOp* buffer);
  static void SetBufferDeathHook(BufferDeathHook hook);

  UOp(const UOp&) = delete;
  UOp& operator=(const UOp&) = delete;

 private:
  friend class UOpPtr;
  friend struct InternTable;
  UOp(Op op, DType dtype, absl::Span<const UOpPtr> src, Arg arg, int64_t tag, size_t hash);
  ~UOp() = default;
  void AddRef() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  bool TryAddRef() const;  // fails if the node is dying (count already 0)
  static void Release(const UOp* p);

  mutable std::atomic<int32_t> refs_{0};
  Op op_;
  DType dtype_;
  bool has_shape_ = false;
  mutable std::atomic<bool> key_ready_{false};     // beside has_shape_: fills padding, so id_ costs no memory
  mutable std::atomic<uint64_t> rewrite_mark_{0};  // see rewrite_mark(); first cache line
  int64_t tag_;
  size_t hash_;
  uint64_t id_;
  UOpVec src_;
  Arg arg_;
  Shape shape_;
  RangeCache range_cache_;
  mutable Digest key_{};
};

// ---- graph utilities ----

// Every node reachable from the roots, each once, children before parents (sources in order).
// Iterative. The raw pointers are valid while the roots are held.
std::vector<const UOp*> Toposort(absl::Span<const UOpPtr> roots);
std::vector<const UOp*> Toposort(const UOpPtr& root);
// The same, leaving out the nodes `skip` holds for and everything reachable only through them (an incremental walk:
// the spec check's already accepted subgraphs).
std::vector<const UOp*> Toposort(const UOpPtr& root, absl::FunctionRef<bool(const UOp*)> skip);

// Shape inference used by the factories. Nullopt = the node has no shape. Errors name the op and
// the offending dims.
absl::StatusOr<std::optional<Shape>> InferShape(Op op, DType dtype, absl::Span<const UOpPtr> src,
                                                const Arg& arg);
// numpy broadcasting of two shapes.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);
std::string ShapeToString(const Shape& s);

// ---- sugar for building (mostly index) arithmetic; ints become CONSTs of the other side's dtype.
// `/` and `%` are CDIV/CMOD on integers and FDIV on floats. ----
UOpPtr operator+(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator-(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator*(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator/(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator%(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator+(const UOpPtr& a, int64_t b);
UOpPtr operator-(const UOpPtr& a, int64_t b);
UOpPtr operator*(const UOpPtr& a, int64_t b);
UOpPtr operator/(const UOpPtr& a, int64_t b);
UOpPtr operator%(const UOpPtr& a, int64_t b);
UOpPtr operator-(const UOpPtr& a);
UOpPtr Lt(const UOpPtr& a, const UOpPtr& b);
UOpPtr Lt(const UOpPtr& a, int64_t b);
UOpPtr Ne(const UOpPtr& a, const UOpPtr& b);
UOpPtr Eq(const UOpPtr& a, const UOpPtr& b);
UOpPtr Max(const UOpPtr& a, const UOpPtr& b);
UOpPtr Where(const UOpPtr& c, const UOpPtr& t, const UOpPtr& f);
UOpPtr Cast(const UOpPtr& a, DType d);

}  // namespace kiln
