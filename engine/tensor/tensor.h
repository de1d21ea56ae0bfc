// Tensor: kiln's lazy tensor front end (tinygrad's Tensor semantics; DESIGN.md §3).
//
// Laziness. A Tensor is a handle to a tensor-level UOp (docs/kernel-ir.md §1) plus a device name. Every
// operation only builds (interned) UOps; nothing is computed until Realize(), ToVector<T>() or Item<T>(),
// which call engine/realize. Because UOps are hash-consed, building the same expression twice yields the
// same UOp (`(a + b).uop() == (a + b).uop()`), and realizing it twice schedules no kernel the second time.
// Realize() replaces the Tensor's UOp by the realized one (a BUFFER viewed through a RESHAPE), so later
// operations build on the buffer. Copies of a Tensor are independent values: realizing one does not
// re-point the others (realizing them later is free: realize memoizes by node).
//
// Graph contract (what the scheduler sees): ALU nodes always have sources of equal shape -- the Tensor
// broadcasts explicitly (numpy rules: RESHAPE to the common rank with leading 1s, then EXPAND); scalar
// constants are CONST nodes of shape () reshaped/expanded the same way; REDUCE_AXIS keeps reduced dims
// as 1 and the Tensor RESHAPEs them away when keepdim is false; no-op movement (reshape/expand to the
// same shape, permute by the identity) builds nothing.
//
// Lowering follows tinygrad: neg = x*-1, a-b = a+(-b), float x/y = x*RECIPROCAL(y), exp = EXP2(x/ln2),
// log = LOG2(x)*ln2, cos = SIN(pi/2-x), min = -max(-x) (bitwise not for ints), sigmoid/tanh/gelu from
// EXP2, pow from exp/log with sign and 0**0 fixes. Float-only unary ops cast integer inputs to the
// default float first (LeastUpperFloat).
//
// dtype promotion: binary ops promote both sides to LeastUpperDType. A C++ scalar operand (Scalar) is
// "weak", as a Python scalar is in tinygrad: a float tensor keeps its dtype with any scalar; an int
// tensor keeps its dtype with an int (or bool) scalar and promotes to the default float with a float
// scalar; a bool tensor promotes to the scalar's default dtype (int32 / float32). True division of
// ints gives the default float; FloorDiv/Mod of ints use FLOORDIV/FLOORMOD (Python semantics).
//
// Errors never abort. An invalid operation (shape mismatch, bad axis, bad reshape, dtype not allowed)
// returns an *error tensor*: it holds no UOp and carries an absl::Status (InvalidArgument, with the op
// and the offending values in the message). Every operation on an error tensor returns that same error
// (the first error wins and propagates through later ops, including through the other operand of a
// binary op); status() reads it; Realize / ToVector / Item return it. On an error tensor uop() is
// null, shape() is empty, dtype() is void and device() is "". A default-constructed Tensor is an error
// tensor (FailedPrecondition). Nodes are built with UOp::Create, so IR-level shape/dtype errors
// surface as error tensors too.
//
// Thread safety: a Tensor is a value (copyable, movable); distinct Tensors may be used on distinct
// threads at once (the UOp intern table is thread-safe). The random generator state (ManualSeed) is
// process-wide and guarded by a mutex.
//
// Linking: everything except realization is in the `kiln_tensor` library (no dependency on
// engine/realize). Realize, FromHost/FromVector, ToVector/Item live in `kiln_tensor_realize`
// (tensor_realize.cc), which links `kiln_realize`.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/dtype/dtype.h"
#include "engine/uop/uop.h"

namespace kiln {

class Tensor;

// A C++ scalar operand: bool, integer or floating point, kept with its kind so that promotion can
// treat it as weak (see the header comment).
struct Scalar {
  enum class Kind : uint8_t { kBool, kInt, kFloat };
  Kind kind = Kind::kInt;
  int64_t i = 0;   // kInt, kBool (0/1)
  double f = 0.0;  // kFloat

  Scalar() = default;
  template <typename T>
    requires std::is_arithmetic_v<T>
  Scalar(T v) {  // NOLINT(google-explicit-constructor)
    if constexpr (std::is_same_v<T, bool>) {
      kind = Kind::kBool;
      i = v ? 1 : 0;
    } else if constexpr (std::is_floating_point_v<T>) {
      kind = Kind::kFloat;
      f = static_cast<double>(v);
    } else {
      kind = Kind::kInt;
      i = static_cast<int64_t>(v);
    }
  }
  bool IsFloat() const { return kind == Kind::kFloat; }
  bool IsInt() const { return kind == Kind::kInt; }
  bool IsBool() const { return kind == Kind::kBool; }
  double AsDouble() const { return IsFloat() ? f : static_cast<double>(i); }
  // The dtype a Python scalar of this kind would get: bool, int32 or float32 (tinygrad from_py).
  DType DefaultDType() const;
};

class Operand;

// A set of axes for reductions: all axes (the default) or a list (negative values count from the end).
class Axes {
 public:
  Axes() = default;  // all axes
  template <typename T>
    requires std::is_integral_v<T> && (!std::is_same_v<T, bool>)
  Axes(T axis) : all_(false), axes_{static_cast<int64_t>(axis)} {}  // NOLINT
  Axes(std::initializer_list<int64_t> axes) : all_(false), axes_(axes) {}  // NOLINT
  Axes(absl::Span<const int64_t> axes) : all_(false), axes_(axes.begin(), axes.end()) {}  // NOLINT
  Axes(const IntVec& axes) : all_(false), axes_(axes) {}  // NOLINT
  static Axes All() { return Axes(); }
  bool all() const { return all_; }
  const IntVec& list() const { return axes_; }

 private:
  bool all_ = true;
  IntVec axes_;
};

// One entry of Tensor::Slice: an integer index (drops the dim), a Python-style range
// start:stop:step (negative values count from the end, out-of-range values clamp, step != 0), or a
// new axis of size 1.
struct SliceArg {
  enum class Kind : uint8_t { kIndex, kRange, kNewAxis };
  Kind kind = Kind::kRange;
  int64_t index = 0;
  std::optional<int64_t> start, stop;
  int64_t step = 1;

  static SliceArg Index(int64_t i) { return {Kind::kIndex, i, std::nullopt, std::nullopt, 1}; }
  static SliceArg Range(std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step = 1) {
    return {Kind::kRange, 0, start, stop, step};
  }
  static SliceArg All() { return Range(std::nullopt, std::nullopt); }
  static SliceArg NewAxis() { return {Kind::kNewAxis, 0, std::nullopt, std::nullopt, 1}; }
};

// Options of Conv2d and the pools. Each of stride/dilation holds 1 value (all spatial dims) or one per
// spatial dim; padding holds 1 value (all sides), one per spatial dim (both sides), or two per spatial
// dim in dim order: (before_h, after_h, before_w, after_w).
struct ConvOptions {
  IntVec stride = {1};
  IntVec padding = {0};
  IntVec dilation = {1};
  int64_t groups = 1;
  std::optional<DType> acc_dtype;  // dtype of the sum (default: the sum's default accumulator)
};
// How a Matmul's right-hand operand changes between runs. kConstant: never (an ONNX initializer marked constant):
// the CPU backend then reads it through a packed copy whatever its width, which a JIT trace makes once (ExecPlan's
// constant calls), where kAny packs only the widths whose rows alias in the caches (nn_ops.cc, PaysToPackRhs); a
// constant 8-bit B cast to int32 is packed for the integer tensor core (PackedIntegerRhs).
enum class MatmulRhs : uint8_t { kAny, kConstant };

struct PoolOptions {
  IntVec stride;  // empty = the kernel size
  IntVec padding = {0};
  IntVec dilation = {1};
  bool count_include_pad = true;  // AvgPool2d only
};

// Maps a C++ element type to its DType (float, double, [u]int8..64, bool).
template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, bool>) return dtypes::kBool;
  else if constexpr (std::is_same_v<T, float>) return dtypes::kFloat32;
  else if constexpr (std::is_same_v<T, double>) return dtypes::kFloat64;
  else if constexpr (std::is_same_v<T, int8_t>) return dtypes::kInt8;
  else if constexpr (std::is_same_v<T, uint8_t>) return dtypes::kUInt8;
  else if constexpr (std::is_same_v<T, int16_t>) return dtypes::kInt16;
  else if constexpr (std::is_same_v<T, uint16_t>) return dtypes::kUInt16;
  else if constexpr (std::is_same_v<T, int32_t>) return dtypes::kInt32;
  else if constexpr (std::is_same_v<T, uint32_t>) return dtypes::kUInt32;
  else if constexpr (std::is_same_v<T, int64_t>) return dtypes::kInt64;
  else if constexpr (std::is_same_v<T, uint64_t>) return dtypes::kUInt64;
  else static_assert(sizeof(T) == 0, "no kiln dtype for this C++ type");
}

class Tensor {
 public:
  // A default Tensor is an error tensor (FailedPrecondition: "uninitialized Tensor").
  Tensor();
  // Wraps a tensor-level UOp (it must have a shape and a non-void dtype, else the result is an
  // error tensor).
  explicit Tensor(UOpPtr uop, const std::string& device = "CPU");
  // An error tensor carrying `status` (which must not be OK; OK becomes an Internal error).
  static Tensor FromStatus(absl::Status status);
  // Copies and moves carry the autograd state (requires_grad, grad) with the value; *assignment*
  // replaces only the value (UOp, device, status) and keeps the target's autograd state, so a
  // parameter stays a parameter when it is reassigned, loaded or Assign()ed (engine/tensor/gradient.h).
  Tensor(const Tensor& o);
  Tensor(Tensor&& o) noexcept;
  Tensor& operator=(const Tensor& o);
  Tensor& operator=(Tensor&& o) noexcept;
  ~Tensor();

  // ---- state ----
  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  const UOpPtr& uop() const { return uop_; }
  const Shape& shape() const;
  DType dtype() const;
  const std::string& device() const;
  int64_t ndim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const;
  // Size of dim `d` (negative counts from the end); 0 if out of range or an error tensor.
  int64_t size(int64_t d) const;
  // Whether the UOp is a realized BUFFER (possibly viewed through movement ops).
  bool IsRealized() const;
  // "Tensor(shape=(2, 3), dtype=float, device=CPU)" or "Tensor(error: ...)".
  std::string ToString() const;

  // ---- creation (lazy: no buffer is allocated) ----
  // A new BUFFER of numel(shape) elements; its memory is allocated by engine/realize on first use
  // and its contents are unspecified until written (Assign).
  static Tensor Empty(absl::Span<const int64_t> shape, DType dtype = dtypes::kDefaultFloat,
                      const std::string& device = "CPU");
  // `value` broadcast to `shape`; dtype defaults to the scalar's default dtype (bool/int32/float32).
  static Tensor Full(absl::Span<const int64_t> shape, Scalar value, std::optional<DType> dtype = std::nullopt,
                     const std::string& device = "CPU");
  static Tensor Zeros(absl::Span<const int64_t> shape, DType dtype = dtypes::kDefaultFloat,
                      const std::string& device = "CPU");
  static Tensor Ones(absl::Span<const int64_t> shape, DType dtype = dtypes::kDefaultFloat,
                     const std::string& device = "CPU");
  // [start, stop) by step, numpy semantics (value i = start + i*step, length ceil((stop-start)/step));
  // dtype defaults to float32 if any argument is a float, else int32. Built from constants with
  // PAD/EXPAND (no reduction): the index is a sum of per-bit planes.
  static Tensor Arange(Scalar stop);
  static Tensor Arange(Scalar start, Scalar stop, Scalar step = 1, std::optional<DType> dtype = std::nullopt,
                       const std::string& device = "CPU");
  // n x m identity (m defaults to n).
  static Tensor Eye(int64_t n, std::optional<int64_t> m = std::nullopt, DType dtype = dtypes::kDefaultFloat,
                    const std::string& device = "CPU");
  Tensor FullLike(Scalar value, std::optional<DType> dtype = std::nullopt) const;
  Tensor ZerosLike(std::optional<DType> dtype = std::nullopt) const;
  Tensor OnesLike(std::optional<DType> dtype = std::nullopt) const;

  // Host data (kiln_tensor_realize): a realized buffer holding a copy of `data`.
  static Tensor FromHost(const void* data, DType dtype, absl::Span<const int64_t> shape,
                         const std::string& device = "CPU");
  // A realized buffer of `shape` whose first `nbytes` are a copy of `data` and whose rest is unspecified: the first
  // rows of a symbolic batch (Rows) without copying the rest.
  static Tensor FromHostPrefix(const void* data, size_t nbytes, DType dtype, absl::Span<const int64_t> shape,
                               const std::string& device = "CPU");
  template <typename T>
  static Tensor FromVector(const std::vector<T>& data, absl::Span<const int64_t> shape,
                           const std::string& device = "CPU");

  // ---- random (counter-based: a pure integer hash of (seed, call counter, element index) built from
  // uint32 MUL/XOR/SHR/ADD UOps, so the values do not depend on the device) ----
  // Sets the process-wide seed and resets the call counter.
  static void ManualSeed(uint64_t seed);
  // Uniform in [0, 1).
  static Tensor Rand(absl::Span<const int64_t> shape, DType dtype = dtypes::kDefaultFloat,
                     const std::string& device = "CPU");
  // Standard normal (Box-Muller over two uniform draws).
  static Tensor Randn(absl::Span<const int64_t> shape, DType dtype = dtypes::kDefaultFloat,
                      const std::string& device = "CPU");
  // Integers uniform in [low, high) (high - low <= 2^32).
  static Tensor RandInt(int64_t low, int64_t high, absl::Span<const int64_t> shape,
                        DType dtype = dtypes::kInt32, const std::string& device = "CPU");
  // Uniform in [low, high).
  static Tensor Uniform(absl::Span<const int64_t> shape, double low = 0.0, double high = 1.0,
                        DType dtype = dtypes::kDefaultFloat, const std::string& device = "CPU");
  // Random-key hook (for TinyJit, engine/jit). While set on this thread, every random call hands its key (k0, k1) --
  // drawn from the process-wide (seed, counter) stream as usual -- to the hook and uses the uint32 tensor of shape (2,)
  // it returns instead of baking the key into the graph as constants, so a replayed capture can refill the key on
  // every replay. An empty hook clears it.
  using RngKeyHook = std::function<Tensor(uint32_t k0, uint32_t k1, const std::string& device)>;
  static void SetRngKeyHook(RngKeyHook hook);
  // Draws the next key of the process-wide stream (advances the call counter), as a random call does.
  static std::pair<uint32_t, uint32_t> NextRngKey();

  // ---- dtype and graph markers ----
  Tensor Cast(DType dtype) const;  // no-op when already `dtype`
  // Reinterprets the bits; a different item size rescales the last dim.
  Tensor Bitcast(DType dtype) const;
  Tensor Contiguous() const;  // CONTIGUOUS: forces its own buffer
  Tensor Detach() const;      // DETACH: blocks gradients
  // ROWS: a symbolic batch dim. `bound` is BIND(Variable(name, 1, shape[0]), n): only the first n rows (dim 0) of
  // this tensor are meant, and only the first n rows of anything computed from it are computed (kernels take n as a
  // runtime argument, so one compiled kernel and one JIT trace serve every n); the other rows are unspecified. The
  // scheduler checks that rows stay rows: a graph that reduces over, pads, shrinks, flips or permutes dim 0 of a
  // bounded tensor, or reshapes it into another dim 0, is refused at realize (InvalidArgument naming the op).
  // Shapes stay the bound's maximum: buffers hold shape[0] rows.
  Tensor Rows(const UOpPtr& bound) const;
  // The same values on `device` ("CPU", "CL:0", "CUDA"): a COPY, realized as a device-to-device copy through the host
  // (bit-exact). Returns *this when already there.
  Tensor To(const std::string& device) const;
  // Replaces this tensor's UOp by ASSIGN(this, value) and returns the new value. A tensor value must
  // have this dtype (as in tinygrad) and broadcast to this shape; a scalar is converted to this dtype.
  // On error this tensor becomes an error tensor.
  Tensor Assign(const Operand& value);

  // ---- elementwise unary ----
  Tensor Neg() const;
  Tensor Reciprocal() const;
  Tensor Exp() const;
  Tensor Exp2() const;
  Tensor Log() const;
  Tensor Log2() const;
  Tensor Sqrt() const;
  Tensor Rsqrt() const;
  Tensor Sin() const;
  Tensor Cos() const;
  Tensor Tan() const;
  Tensor Abs() const;
  Tensor Sign() const;
  Tensor Square() const;
  Tensor Relu() const;
  Tensor Sigmoid() const;
  Tensor Tanh() const;
  Tensor Gelu() const;
  Tensor Silu() const;
  Tensor Trunc() const;
  Tensor Floor() const;
  Tensor Ceil() const;
  Tensor Round() const;  // half to even
  Tensor LogicalNot() const;
  Tensor BitwiseNot() const;  // ints and bool
  Tensor Clip(Scalar min, Scalar max) const;

  // ---- elementwise binary (broadcasting + promotion) ----
  Tensor Add(const Operand& y) const;
  Tensor Sub(const Operand& y) const;
  Tensor Mul(const Operand& y) const;
  Tensor Div(const Operand& y) const;       // true division
  Tensor FloorDiv(const Operand& y) const;  // Python //
  Tensor Mod(const Operand& y) const;       // Python % (sign of the divisor)
  Tensor Pow(const Operand& y) const;
  Tensor Maximum(const Operand& y) const;
  Tensor Minimum(const Operand& y) const;
  Tensor Lt(const Operand& y) const;
  Tensor Le(const Operand& y) const;
  Tensor Gt(const Operand& y) const;
  Tensor Ge(const Operand& y) const;
  Tensor Eq(const Operand& y) const;
  Tensor Ne(const Operand& y) const;
  Tensor LogicalAnd(const Operand& y) const;
  Tensor LogicalOr(const Operand& y) const;
  Tensor BitwiseAnd(const Operand& y) const;  // ints and bool
  Tensor BitwiseOr(const Operand& y) const;
  Tensor BitwiseXor(const Operand& y) const;
  Tensor Lshift(int64_t bits) const;  // ints
  Tensor Rshift(int64_t bits) const;
  // Reversed forms: s - x, s / x, ... (for the free operators with a scalar on the left).
  Tensor RSub(Scalar s) const;
  Tensor RDiv(Scalar s) const;
  Tensor RPow(Scalar s) const;
  // cond.Where(x, y): x where cond (cast to bool) else y; x and y promote against each other.
  Tensor Where(const Operand& x, const Operand& y) const;

  // ---- reductions (axes: all by default; negative allowed; duplicates are an error) ----
  // Ints accumulate in SumAccDType; half/bfloat16 accumulate in float32 and cast back. Reducing a tensor
  // with no elements gives the op's identity (sum 0, prod 1, max -inf / the dtype minimum, min +inf / the
  // dtype maximum; mean nan) where numpy raises for max/min.
  Tensor Sum(const Axes& axes = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt) const;
  Tensor Prod(const Axes& axes = {}, bool keepdim = false, std::optional<DType> dtype = std::nullopt) const;
  Tensor Max(const Axes& axes = {}, bool keepdim = false) const;
  Tensor Min(const Axes& axes = {}, bool keepdim = false) const;
  Tensor Mean(const Axes& axes = {}, bool keepdim = false) const;
  Tensor Var(const Axes& axes = {}, bool keepdim = false, double correction = 1.0) const;
  Tensor Std(const Axes& axes = {}, bool keepdim = false, double correction = 1.0) const;
  Tensor Any(const Axes& axes = {}, bool keepdim = false) const;
  Tensor All(const Axes& axes = {}, bool keepdim = false) const;
  // int32 index of the first max/min along `axis` (of the flattened tensor when nullopt).
  Tensor Argmax(std::optional<int64_t> axis = std::nullopt, bool keepdim = false) const;
  Tensor Argmin(std::optional<int64_t> axis = std::nullopt, bool keepdim = false) const;

  // ---- movement ----
  Tensor Reshape(absl::Span<const int64_t> shape) const;  // one -1 allowed
  Tensor Permute(absl::Span<const int64_t> order) const;  // negative dims allowed
  Tensor Transpose(int64_t dim0 = 1, int64_t dim1 = 0) const;
  // To `shape` (rank >= ndim; new dims on the left; -1 keeps a dim).
  Tensor Expand(absl::Span<const int64_t> shape) const;
  // numpy broadcast to `shape`.
  Tensor BroadcastTo(absl::Span<const int64_t> shape) const;
  // (before, after) per dim; negative values shrink. Padded elements are `value`.
  Tensor Pad(absl::Span<const std::pair<int64_t, int64_t>> padding, Scalar value = 0) const;
  // [start, end) per dim.
  Tensor Shrink(absl::Span<const std::pair<int64_t, int64_t>> bounds) const;
  Tensor Flip(const Axes& axes) const;
  // Python-style indexing; trailing dims not mentioned are kept whole.
  Tensor Slice(absl::Span<const SliceArg> args) const;
  Tensor Squeeze(std::optional<int64_t> dim = std::nullopt) const;
  Tensor Unsqueeze(int64_t dim) const;
  Tensor Flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  static Tensor Cat(absl::Span<const Tensor> tensors, int64_t dim = 0);
  static Tensor Stack(absl::Span<const Tensor> tensors, int64_t dim = 0);
  Tensor Repeat(absl::Span<const int64_t> repeats) const;
  // out[i][j][k] = self[i][index[i][j][k]][k] for dim = 1 (torch.gather); index: same rank, int dtype.
  Tensor Gather(int64_t dim, const Tensor& index) const;

  // ---- linear algebra and nn (nn_ops.cc) ----
  // numpy matmul with batch broadcasting: (..., n, k) @ (..., k, m); 1-D operands as numpy.
  // `rhs_use`: MatmulRhs::kConstant where the caller knows w never changes (an ONNX initializer, MarkConstant).
  Tensor Matmul(const Tensor& w, std::optional<DType> acc_dtype = std::nullopt,
                MatmulRhs rhs_use = MatmulRhs::kAny) const;
  Tensor Dot(const Tensor& w, std::optional<DType> acc_dtype = std::nullopt) const { return Matmul(w, acc_dtype); }
  // tinygrad's _pool: (..., *i) -> (..., *o, *k), the windows of size `kernel` with `stride` and `dilation` as
  // axes of a view (no copy). Conv2d and the pooling ops read their input through it; so do the conv gradients.
  Tensor Pool(absl::Span<const int64_t> kernel, absl::Span<const int64_t> stride,
              absl::Span<const int64_t> dilation) const;
  // x (N, Cin, H, W) * w (Cout, Cin/groups, KH, KW) [+ bias (Cout)] -> (N, Cout, OH, OW) with
  // O = floor((I + pad_before + pad_after - dilation*(K-1) - 1) / stride) + 1. Also any number of
  // spatial dims (Conv1d/Conv3d shapes).
  Tensor Conv2d(const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
                const ConvOptions& options = {}) const;
  Tensor MaxPool2d(absl::Span<const int64_t> kernel = {2, 2}, const PoolOptions& options = {}) const;
  Tensor AvgPool2d(absl::Span<const int64_t> kernel = {2, 2}, const PoolOptions& options = {}) const;
  Tensor Softmax(int64_t axis = -1) const;
  Tensor LogSoftmax(int64_t axis = -1) const;
  // Normalizes over the last `normalized_dims` dims, then * weight + bias when given.
  Tensor LayerNorm(int64_t normalized_dims = 1, const std::optional<Tensor>& weight = std::nullopt,
                   const std::optional<Tensor>& bias = std::nullopt, double eps = 1e-5) const;
  // (x - mean) * weight * invstd + bias along `axis` (functional; statistics given).
  Tensor BatchNorm(const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, const Tensor& mean,
                   const Tensor& invstd, int64_t axis = 1) const;
  // self: logits (..., C); labels: int (...). reduction: "mean" (over non-ignored), "sum" or "none".
  Tensor SparseCategoricalCrossentropy(const Tensor& labels, int64_t ignore_index = -1,
                                       double label_smoothing = 0.0, const std::string& reduction = "mean") const;
  // self == arange(num_classes) along a new last dim (bool).
  Tensor OneHot(int64_t num_classes) const;

  // ---- more math (extra_ops.cc; compositions of the ops above, added for ONNX import) ----
  // Division truncating toward zero (C): ints use CDIV (x / 0 is defined, never a trap); floats trunc(x / y).
  Tensor TruncDiv(const Operand& y) const;
  // IEEE division x / y (FDIV, correctly rounded; Div is x * (1/y)); ints are converted to the default float first.
  Tensor TrueDiv(const Operand& y) const;
  // Remainder with the dividend's sign (C fmod): ints CMOD, floats x - y * trunc(x / y).
  Tensor Fmod(const Operand& y) const;
  Tensor Erf() const;  // Abramowitz-Stegun 7.1.26 with a higher-order fit (|error| < 2e-7)
  Tensor Atan() const;
  Tensor Asin() const;
  Tensor Acos() const;
  Tensor Sinh() const;
  Tensor Cosh() const;
  Tensor Asinh() const;
  Tensor Acosh() const;
  Tensor Atanh() const;
  Tensor IsNan() const;
  Tensor IsInf(bool positive = true, bool negative = true) const;
  // Inclusive (or exclusive) running sum / product along `axis`, optionally from the end. O(n^2) work along the
  // axis (a pooled window per element), as tinygrad's small-axis cumsum.
  Tensor CumSum(int64_t axis, bool exclusive = false, bool reverse = false) const;
  Tensor CumProd(int64_t axis, bool exclusive = false, bool reverse = false) const;
  // Lower / upper triangle of the last two dims (elements with col - row <= k / >= k kept, the rest 0).
  Tensor Tril(int64_t k = 0) const;
  Tensor Triu(int64_t k = 0) const;

  // ---- autograd (engine/tensor/gradient.cc; rules and semantics in engine/tensor/gradient.h) ----
  // Marks this tensor object as a parameter: Backward() fills its Grad(). Float dtypes only (else
  // this becomes an error tensor). Returns *this.
  Tensor& RequiresGrad(bool on = true);
  bool requires_grad() const { return requires_grad_; }
  // The gradient written by the last Backward() (accumulated over Backward() calls until ZeroGrad);
  // an error tensor (FailedPrecondition) when there is none.
  Tensor Grad() const;
  bool has_grad() const { return grad_ != nullptr; }
  void SetGrad(const Tensor& g);
  void ZeroGrad() { grad_.reset(); }
  // Scalar loss only: gradients of this tensor w.r.t. every live tensor object with requires_grad
  // whose current UOp is in this graph; each one's Grad() becomes (old Grad() +) the gradient. Lazy:
  // nothing is realized.
  absl::Status Backward();
  // d(this)/d(targets); `grad` seeds the output gradient (default: ones, scalar outputs only).
  absl::StatusOr<std::vector<Tensor>> Gradient(absl::Span<const Tensor> targets,
                                               const std::optional<Tensor>& grad = std::nullopt) const;

  // ---- realization (kiln_tensor_realize) ----
  // Realizes this tensor and replaces its UOp by the realized buffer view.
  absl::Status Realize();
  // Realizes several tensors in one schedule.
  static absl::Status Realize(absl::Span<Tensor* const> tensors);
  // Host copy of the elements in row-major order; T must be the tensor's dtype exactly (Cast first).
  template <typename T>
  absl::StatusOr<std::vector<T>> ToVector() const;
  // The single element of a tensor with numel() == 1.
  template <typename T>
  absl::StatusOr<T> Item() const;
  // Realizes (a copy of) this tensor and copies its bytes to `dst` (nbytes must be numel*itemsize).
  absl::Status CopyToHost(void* dst, size_t nbytes) const;
  // The same for the first `nbytes` (<= numel*itemsize) of the row-major values: the first rows of a batch.
  absl::Status CopyPrefixToHost(void* dst, size_t nbytes) const;

 private:
  static Tensor Wrap(UOpPtr uop, UOpPtr device);
  absl::Status CopyOut(void* dst, size_t nbytes, bool prefix) const;
  static Tensor FromHostBytes(const void* data, std::optional<size_t> nbytes, DType dtype,
                              absl::Span<const int64_t> shape, const std::string& device);
  // Builds a node on this tensor's device; errors become error tensors.
  Tensor Node(Op op, DType dtype, absl::Span<const UOpPtr> src, Arg arg = {}) const;
  Tensor Node1(Op op, DType dtype, Arg arg = {}) const;
  // Unary float op: casts to LeastUpperFloat first.
  Tensor UnaryFloat(Op op) const;
  // Promotes and broadcasts (self, y); reversed puts y first. match_dtype=false skips promotion.
  static absl::StatusOr<std::pair<Tensor, Tensor>> Broadcasted(const Tensor& x, const Operand& y, bool reverse,
                                                                bool match_dtype = true);
  Tensor BinaryOp(Op op, const Operand& y, bool reverse = false) const;
  Tensor Compare(Op op, const Operand& y, bool reverse) const;
  Tensor Inverse() const;  // -x for floats, ~x for ints, !x for bool (order-reversing)
  // A CONST of shape () with this tensor's device, `value` converted to `dtype`.
  Tensor ConstOf(Scalar value, DType dtype) const;
  // `s` as a tensor, with the weak-scalar dtype rule against this tensor.
  Tensor WeakScalar(const Scalar& s) const;
  Tensor ReduceOp(Op op, const Axes& axes, bool keepdim) const;
  // Reduced-element count for Mean/Var; error if axes are invalid.
  absl::StatusOr<int64_t> ReducedCount(const Axes& axes) const;
  Tensor PowScalar(double e) const;
  static Tensor RandomBits(absl::Span<const int64_t> shape, const std::string& device);
  absl::Status ReadInto(void* dst, size_t nbytes, DType want) const;

  UOpPtr uop_;
  UOpPtr device_;  // DEVICE node (interned; its arg is the name)
  absl::Status status_;
  // Autograd state. requires_grad_ == true means this object is in the live-parameter registry
  // (gradient.cc) that Backward() scans.
  bool requires_grad_ = false;
  std::shared_ptr<const Tensor> grad_;
};

// Either a Tensor or a Scalar: the right-hand side of binary operations.
class Operand {
 public:
  Operand(const Tensor& t) : tensor_(t) {}  // NOLINT(google-explicit-constructor)
  Operand(Scalar s) : scalar_(s) {}  // NOLINT(google-explicit-constructor)
  template <typename T>
    requires std::is_arithmetic_v<T>
  Operand(T v) : scalar_(v) {}  // NOLINT(google-explicit-constructor)

  bool is_tensor() const { return tensor_.has_value(); }
  const Tensor& tensor() const { return *tensor_; }
  const Scalar& scalar() const { return scalar_; }

 private:
  std::optional<Tensor> tensor_;
  Scalar scalar_;
};

// ---- operators (a Scalar on either side is weak) ----
Tensor operator+(const Tensor& a, const Operand& b);
Tensor operator-(const Tensor& a, const Operand& b);
Tensor operator*(const Tensor& a, const Operand& b);
Tensor operator/(const Tensor& a, const Operand& b);
Tensor operator%(const Tensor& a, const Operand& b);
Tensor operator&(const Tensor& a, const Operand& b);
Tensor operator|(const Tensor& a, const Operand& b);
Tensor operator^(const Tensor& a, const Operand& b);
Tensor operator<(const Tensor& a, const Operand& b);
Tensor operator<=(const Tensor& a, const Operand& b);
Tensor operator>(const Tensor& a, const Operand& b);
Tensor operator>=(const Tensor& a, const Operand& b);
Tensor operator==(const Tensor& a, const Operand& b);
Tensor operator!=(const Tensor& a, const Operand& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator<(const Scalar& a, const Tensor& b);
Tensor operator<=(const Scalar& a, const Tensor& b);
Tensor operator>(const Scalar& a, const Tensor& b);
Tensor operator>=(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator!(const Tensor& a);
Tensor operator~(const Tensor& a);

// ---- templates ----

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& data, absl::Span<const int64_t> shape, const std::string& device) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != static_cast<int64_t>(data.size()))
    return FromStatus(absl::InvalidArgumentError("FromVector: data size does not match the shape"));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(data.begin(), data.end());
    return FromHost(bytes.data(), dtypes::kBool, shape, device);
  } else {
    return FromHost(data.data(), DTypeOf<T>(), shape, device);
  }
}

template <typename T>
absl::StatusOr<std::vector<T>> Tensor::ToVector() const {
  if (!ok()) return status_;
  size_t n = static_cast<size_t>(numel());
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(n);
    absl::Status st = ReadInto(bytes.data(), n, dtypes::kBool);
    if (!st.ok()) return st;
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> out(n);
    absl::Status st = ReadInto(out.data(), n * sizeof(T), DTypeOf<T>());
    if (!st.ok()) return st;
    return out;
  }
}

template <typename T>
absl::StatusOr<T> Tensor::Item() const {
  if (!ok()) return status_;
  if (numel() != 1) return absl::InvalidArgumentError("Item: the tensor must have exactly one element");
  absl::StatusOr<std::vector<T>> v = ToVector<T>();
  if (!v.ok()) return v.status();
  return static_cast<T>((*v)[0]);
}

}  // namespace kiln
