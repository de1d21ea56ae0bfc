// Counter-based random numbers. Each call draws a key from (seed, call counter) on the host; element i
// gets bits = fmix32(fmix32(i ^ k0) + k1) (murmur3's finalizer), built from uint32 XOR/SHR/MUL/ADD
// UOps over an arange, so the values are a pure function of (seed, counter, index) on every device.
#include <cmath>
#include <mutex>
#include <utility>

#include "engine/tensor/tensor.h"
#include "engine/tensor/tensor_internal.h"

namespace kiln {

using tensor_internal::CheckShape;
using tensor_internal::Invalid;
using tensor_internal::ShapeProd;

namespace {

struct RngState {
  std::mutex mu;
  uint64_t seed = 0;
  uint64_t counter = 0;
};

RngState& Rng() {
  static RngState* s = new RngState();
  return *s;
}

// The random-key hook of this thread (see Tensor::SetRngKeyHook); heap-held so thread exit needs no destructor.
thread_local Tensor::RngKeyHook* t_rng_key_hook = nullptr;

constexpr uint32_t kMix1 = 0x85ebca6bu;
constexpr uint32_t kMix2 = 0xc2b2ae35u;

uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= kMix1;
  h ^= h >> 13;
  h *= kMix2;
  h ^= h >> 16;
  return h;
}

std::pair<uint32_t, uint32_t> NextKey() {
  RngState& r = Rng();
  std::lock_guard<std::mutex> lock(r.mu);
  uint64_t c = r.counter++;
  uint32_t k0 = Fmix32(static_cast<uint32_t>(r.seed) ^ Fmix32(static_cast<uint32_t>(c) + 0x9e3779b9u));
  uint32_t k1 = Fmix32(static_cast<uint32_t>(r.seed >> 32) ^ Fmix32(static_cast<uint32_t>(c >> 32) + k0));
  return {k0, k1};
}

// The same finalizer as Fmix32, as uint32 tensor ops.
Tensor Fmix(const Tensor& x) {
  Tensor h = x.BitwiseXor(x.Rshift(16)).Mul(int64_t{kMix1});
  h = h.BitwiseXor(h.Rshift(13)).Mul(int64_t{kMix2});
  return h.BitwiseXor(h.Rshift(16));
}

}  // namespace

void Tensor::SetRngKeyHook(RngKeyHook hook) {
  if (!hook) {
    delete t_rng_key_hook;
    t_rng_key_hook = nullptr;
    return;
  }
  if (t_rng_key_hook == nullptr) t_rng_key_hook = new RngKeyHook();
  *t_rng_key_hook = std::move(hook);
}

std::pair<uint32_t, uint32_t> Tensor::NextRngKey() { return NextKey(); }

void Tensor::ManualSeed(uint64_t seed) {
  RngState& r = Rng();
  std::lock_guard<std::mutex> lock(r.mu);
  r.seed = seed;
  r.counter = 0;
}

Tensor Tensor::RandomBits(absl::Span<const int64_t> shape, const std::string& device) {
  if (absl::Status st = CheckShape("Rand", shape); !st.ok()) return FromStatus(st);
  int64_t n = ShapeProd(shape);
  if (n > (int64_t{1} << 32)) return FromStatus(Invalid("Rand", "at most 2^32 elements per call, got ", n));
  auto [k0, k1] = NextKey();
  if (n == 0) return Zeros(shape, dtypes::kUInt32, device);
  Tensor idx = Arange(0, n, 1, dtypes::kUInt32, device);
  if (t_rng_key_hook != nullptr && *t_rng_key_hook) {
    Tensor key = (*t_rng_key_hook)(k0, k1, device);
    if (!key.ok()) return key;
    if (key.dtype() != dtypes::kUInt32 || key.shape() != Shape{2})
      return FromStatus(Invalid("Rand", "the random-key hook must return a uint32 tensor of shape (2,)"));
    const int64_t nn[1] = {n};
    Tensor key0 = key.Shrink({{0, 1}}).Expand(nn), key1 = key.Shrink({{1, 2}}).Expand(nn);
    return Fmix(Fmix(idx.BitwiseXor(key0)).Add(key1)).Reshape(shape);
  }
  return Fmix(Fmix(idx.BitwiseXor(int64_t{k0})).Add(int64_t{k1})).Reshape(shape);
}

Tensor Tensor::Rand(absl::Span<const int64_t> shape, DType dtype, const std::string& device) {
  if (!dtype.IsFloat()) return FromStatus(Invalid("Rand", "needs a float dtype, got ", dtype.Name()));
  // mantissa-sized integers scaled into [0, 1), exact in the target dtype (so never rounds to 1)
  int bits = dtype == dtypes::kFloat16 ? 11 : dtype == dtypes::kBFloat16 ? 8 : dtype == dtypes::kFloat64 ? 32 : 24;
  DType work = dtype == dtypes::kFloat64 ? dtypes::kFloat64 : dtypes::kFloat32;
  Tensor u = RandomBits(shape, device);
  if (bits < 32) u = u.Rshift(32 - bits);
  return u.Cast(work).Mul(std::ldexp(1.0, -bits)).Cast(dtype);
}

Tensor Tensor::Randn(absl::Span<const int64_t> shape, DType dtype, const std::string& device) {
  if (!dtype.IsFloat()) return FromStatus(Invalid("Randn", "needs a float dtype, got ", dtype.Name()));
  IntVec two = {2};
  two.insert(two.end(), shape.begin(), shape.end());
  Tensor src = Rand(two, dtypes::kFloat32, device);
  // Box-Muller: cos(2 pi u0) * sqrt(-2 ln(1 - u1))
  Tensor u0 = src.Slice({SliceArg::Index(0)}), u1 = src.Slice({SliceArg::Index(1)});
  return u0.Mul(2 * M_PI).Cos().Mul(u1.RSub(1).Log().Mul(-2).Sqrt()).Cast(dtype);
}

Tensor Tensor::RandInt(int64_t low, int64_t high, absl::Span<const int64_t> shape, DType dtype,
                       const std::string& device) {
  if (!dtype.IsInt()) return FromStatus(Invalid("RandInt", "needs an integer dtype, got ", dtype.Name()));
  if (high <= low || static_cast<uint64_t>(high - low) > (uint64_t{1} << 32))
    return FromStatus(Invalid("RandInt", "need low < high and high - low <= 2^32, got [", low, ", ", high, ")"));
  // floor(bits * range / 2^32) is in [0, range) (exact in uint64)
  Tensor r = RandomBits(shape, device).Cast(dtypes::kUInt64).Mul(high - low).Rshift(32);
  return r.Cast(dtype).Add(low);
}

Tensor Tensor::Uniform(absl::Span<const int64_t> shape, double low, double high, DType dtype,
                       const std::string& device) {
  return Rand(shape, dtype, device).Mul(high - low).Add(low);
}

}  // namespace kiln
