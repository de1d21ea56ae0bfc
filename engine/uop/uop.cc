#include "engine/uop/uop.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/check.h"

namespace kiln {

// ---------------------------------------------------------------------------------------------
// Intern table
// ---------------------------------------------------------------------------------------------

namespace {

struct LookupKey {
  Op op;
  DType dtype;
  absl::Span<const UOpPtr> src;
  const Arg* arg;
  int64_t tag;
  size_t hash;
};

size_t ComputeHash(Op op, DType dtype, absl::Span<const UOpPtr> src, const Arg& arg, int64_t tag) {
  size_t h = absl::HashOf(op, dtype, tag, HashArg(arg));
  for (const UOpPtr& s : src) h = absl::HashOf(h, s.get());
  return h;
}

}  // namespace

struct InternTable {
  struct Hash {
    using is_transparent = void;
    size_t operator()(const UOp* u) const { return u->hash_; }
    size_t operator()(const LookupKey& k) const { return k.hash; }
  };
  struct Eq {
    using is_transparent = void;
    bool operator()(const UOp* a, const UOp* b) const { return a == b; }
    bool operator()(const UOp* a, const LookupKey& k) const { return Match(a, k); }
    bool operator()(const LookupKey& k, const UOp* a) const { return Match(a, k); }
    static bool Match(const UOp* a, const LookupKey& k) {
      if (a->hash_ != k.hash || a->op_ != k.op || a->dtype_ != k.dtype || a->tag_ != k.tag ||
          a->src_.size() != k.src.size())
        return false;
      for (size_t i = 0; i < k.src.size(); ++i) {
        if (a->src_[i].get() != k.src[i].get()) return false;
      }
      return a->arg_ == *k.arg;
    }
  };
  // Lookup by content only; the element found may be a different (dying) node with equal content.
  struct Shard {
    std::mutex mu;
    absl::flat_hash_set<const UOp*, Hash, Eq> set;
  };
  static constexpr size_t kShards = 64;
  Shard shards[kShards];

  Shard& ShardFor(size_t hash) { return shards[(hash >> 7) % kShards]; }

  static InternTable& Get() {
    static InternTable* t = new InternTable();  // never destroyed: nodes may outlive statics
    return *t;
  }

  UOpPtr Intern(Op op, DType dtype, absl::Span<const UOpPtr> src, Arg&& arg, int64_t tag) {
    size_t hash = ComputeHash(op, dtype, src, arg, tag);
    LookupKey key{op, dtype, src, &arg, tag, hash};
    Shard& shard = ShardFor(hash);
    {
      std::lock_guard<std::mutex> lock(shard.mu);
      auto it = shard.set.find(key);
      if (it != shard.set.end()) {
        const UOp* found = *it;
        if (found->TryAddRef()) return UOpPtr(found, UOpPtr::AdoptTag{});
        shard.set.erase(it);  // dying: its destructor will see it is no longer in the table
      }
    }
    // Build outside the lock (shape inference may allocate), then insert or adopt a racer's node.
    UOp* node = new UOp(op, dtype, src, std::move(arg), tag, hash);
    node->refs_.store(1, std::memory_order_relaxed);
    LookupKey built{node->op_, node->dtype_, node->src_, &node->arg_, node->tag_, hash};
    std::unique_lock<std::mutex> lock(shard.mu);
    // Look up by content again: another thread may have published an equal node meanwhile. (insert() alone
    // would compare pointers, and two equal nodes would both be published.)
    auto it = shard.set.find(built);
    if (it != shard.set.end()) {
      const UOp* found = *it;
      if (found->TryAddRef()) {
        lock.unlock();
        node->refs_.store(0, std::memory_order_relaxed);
        DeleteUnpublished(node);
        return UOpPtr(found, UOpPtr::AdoptTag{});
      }
      shard.set.erase(it);  // dying
    }
    shard.set.insert(node);
    return UOpPtr(node, UOpPtr::AdoptTag{});
  }

  // Removes `u` from its shard if the table still points at it.
  void Forget(const UOp* u) {
    Shard& shard = ShardFor(u->hash_);
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.set.find(u);  // pointer-identity lookup (Hash/Eq on UOp*)
    if (it != shard.set.end()) shard.set.erase(it);
  }

  static void DeleteUnpublished(UOp* node);

  size_t Size() {
    size_t n = 0;
    for (Shard& s : shards) {
      std::lock_guard<std::mutex> lock(s.mu);
      n += s.set.size();
    }
    return n;
  }
};

// ---------------------------------------------------------------------------------------------
// Reference counting with iterative destruction
// ---------------------------------------------------------------------------------------------

namespace {
thread_local std::vector<const UOp*>* tl_pending = nullptr;
std::atomic<UOp::BufferDeathHook> g_buffer_death_hook{nullptr};
}  // namespace

void UOp::SetBufferDeathHook(BufferDeathHook hook) { g_buffer_death_hook.store(hook); }

bool UOp::TryAddRef() const {
  int32_t n = refs_.load(std::memory_order_relaxed);
  while (n > 0) {
    if (refs_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel)) return true;
  }
  return false;
}

void InternTable::DeleteUnpublished(UOp* node) {
  // Never published: its sources hold references that must be released like any other.
  UOpVec src = std::move(node->src_);
  delete node;
  src.clear();
}

void UOp::Release(const UOp* p) {
  if (p->refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (tl_pending != nullptr) {  // already draining on this thread: queue instead of recursing
    tl_pending->push_back(p);
    return;
  }
  std::vector<const UOp*> pending;
  tl_pending = &pending;
  pending.push_back(p);
  while (!pending.empty()) {
    const UOp* u = pending.back();
    pending.pop_back();
    InternTable::Get().Forget(u);
    if (u->op_ == Op::BUFFER) {
      if (BufferDeathHook hook = g_buffer_death_hook.load(std::memory_order_acquire)) hook(u);
    }
    UOp* mu = const_cast<UOp*>(u);
    UOpVec src = std::move(mu->src_);
    delete mu;
    src.clear();  // releases children; those that die are pushed onto `pending`
  }
  tl_pending = nullptr;
}

UOpPtr::UOpPtr(const UOpPtr& o) : p_(o.p_) {
  if (p_ != nullptr) p_->AddRef();
}
UOpPtr& UOpPtr::operator=(const UOpPtr& o) {
  if (o.p_ != nullptr) o.p_->AddRef();
  const UOp* old = p_;
  p_ = o.p_;
  if (old != nullptr) UOp::Release(old);
  return *this;
}
UOpPtr& UOpPtr::operator=(UOpPtr&& o) noexcept {
  if (this != &o) {
    const UOp* old = p_;
    p_ = o.p_;
    o.p_ = nullptr;
    if (old != nullptr) UOp::Release(old);
  }
  return *this;
}
UOpPtr::~UOpPtr() {
  if (p_ != nullptr) UOp::Release(p_);
}
UOpPtr UOpPtr::FromRaw(const UOp* p) {
  if (p != nullptr) p->AddRef();
  return UOpPtr(p, AdoptTag{});
}

size_t UOp::LiveCount() { return InternTable::Get().Size(); }

// ---------------------------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------------------------

namespace {
std::atomic<uint64_t> g_next_id{1};  // UOp::id(); 0 is never given (UOpKey of null)
}  // namespace

UOp::UOp(Op op, DType dtype, absl::Span<const UOpPtr> src, Arg arg, int64_t tag, size_t hash)
    : op_(op), dtype_(dtype), tag_(tag), hash_(hash), id_(g_next_id.fetch_add(1, std::memory_order_relaxed)),
      src_(src.begin(), src.end()), arg_(std::move(arg)) {
  auto shape = InferShape(op_, dtype_, src_, arg_);
  if (shape.ok() && shape->has_value()) {
    has_shape_ = true;
    shape_ = std::move(**shape);
  }
}

UOpPtr UOp::Make(Op op, DType dtype, absl::Span<const UOpPtr> src, Arg arg, int64_t tag) {
  return InternTable::Get().Intern(op, dtype, src, std::move(arg), tag);
}

namespace {

bool ArgKindOk(Op op, const Arg& arg) {
  switch (op) {
    case Op::CONST:
      return std::holds_alternative<bool>(arg) || std::holds_alternative<int64_t>(arg) ||
             std::holds_alternative<ConstFloat>(arg);
    case Op::BUFFER:
    case Op::UNIQUE:
    case Op::PARAM:
    case Op::DEFINE_LOCAL:
    case Op::DEFINE_REG:
      return std::holds_alternative<int64_t>(arg);
    case Op::DEVICE:
    case Op::SPECIAL:
      return std::holds_alternative<std::string>(arg);
    case Op::DEFINE_VAR: return std::holds_alternative<VarArg>(arg);
    case Op::RANGE: return std::holds_alternative<AxisArg>(arg);
    case Op::RESHAPE:
    case Op::EXPAND:
    case Op::PERMUTE:
    case Op::PAD:
    case Op::SHRINK:
    case Op::FLIP:
    case Op::GEP:
      return std::holds_alternative<IntVec>(arg);
    case Op::REDUCE_AXIS: return std::holds_alternative<ReduceArg>(arg);
    case Op::REDUCE: return std::holds_alternative<Op>(arg) && IsReduceOp(std::get<Op>(arg));
    default: return true;
  }
}

absl::Status CheckDTypes(Op op, DType dtype, absl::Span<const UOpPtr> src) {
  auto mismatch = [&](absl::string_view what) {
    std::vector<std::string> names;
    for (const UOpPtr& s : src) names.push_back(s->dtype().Name());
    return absl::InvalidArgumentError(absl::StrCat(std::string(OpName(op)), ": ", what, " (dtype ", dtype.Name(),
                                                   ", sources ", absl::StrJoin(names, ", "), ")"));
  };
  if (IsUnary(op)) {
    if (src[0]->dtype() != dtype) return mismatch("result dtype must equal the source dtype");
    if (op != Op::NEG && !dtype.IsFloat()) return mismatch("needs a float dtype");
  } else if (op == Op::WHERE) {
    if (src[0]->dtype().scalar != ScalarType::kBool) return mismatch("condition must be bool");
    if (src[1]->dtype() != dtype || src[2]->dtype() != dtype)
      return mismatch("both branches must have the result dtype");
  } else if (op == Op::MULACC) {
    for (const UOpPtr& s : src)
      if (s->dtype() != dtype) return mismatch("all sources must have the result dtype");
  } else if (IsBinary(op)) {
    if (src[0]->dtype() != src[1]->dtype()) return mismatch("sources must share one dtype");
    if (IsComparison(op)) {
      if (dtype.scalar != ScalarType::kBool || dtype.count != src[0]->dtype().count)
        return mismatch("a comparison returns bool");
    } else if (src[0]->dtype() != dtype) {
      return mismatch("result dtype must equal the source dtype");
    }
    bool is_int_op = op == Op::SHL || op == Op::SHR || op == Op::CDIV || op == Op::CMOD ||
                     op == Op::FLOORDIV || op == Op::FLOORMOD;
    if (is_int_op && !dtype.IsInt()) return mismatch("needs an integer dtype");
    if ((op == Op::XOR || op == Op::OR || op == Op::AND) && !(dtype.IsInt() || dtype.IsBool()))
      return mismatch("needs an integer or bool dtype");
    if (op == Op::FDIV && !dtype.IsFloat()) return mismatch("needs a float dtype");
  } else if (op == Op::BITCAST) {
    if (src[0]->dtype().is_ptr || dtype.is_ptr) return mismatch("cannot bitcast pointers");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UOpPtr> UOp::Create(Op op, DType dtype, absl::Span<const UOpPtr> src, Arg arg,
                                   int64_t tag) {
  if (static_cast<unsigned>(op) >= static_cast<unsigned>(kNumOps))
    return absl::InvalidArgumentError("unknown op");
  const OpInfo& info = GetOpInfo(op);
  int n = static_cast<int>(src.size());
  if (n < info.min_src || (info.max_src >= 0 && n > info.max_src)) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(info.name), ": wrong number of sources: got ", n, ", expected ",
        info.max_src == info.min_src ? absl::StrCat(info.min_src)
        : info.max_src < 0           ? absl::StrCat("at least ", info.min_src)
                                     : absl::StrCat(info.min_src, "..", info.max_src)));
  }
  for (int i = 0; i < n; ++i) {
    if (!src[i]) return absl::InvalidArgumentError(absl::StrCat(std::string(info.name), ": source ", i, " is null"));
  }
  if (!ArgKindOk(op, arg))
    return absl::InvalidArgumentError(absl::StrCat(std::string(info.name), ": wrong kind of arg"));
  if (op == Op::CONST && dtype.is_ptr)
    return absl::InvalidArgumentError("CONST: a constant cannot have a pointer dtype");
  if (absl::Status st = CheckDTypes(op, dtype, src); !st.ok()) return st;
  auto shape = InferShape(op, dtype, src, arg);
  if (!shape.ok()) return shape.status();
  return Make(op, dtype, src, std::move(arg), tag);
}

Arg UOp::ConstArg(DType dtype, double v) {
  if (dtype.IsFloat()) return ConstFloat(v);
  if (dtype.IsBool()) return v != 0.0;
  if (std::isnan(v)) return int64_t{0};
  if (dtype.IsUnsigned() && v >= 9223372036854775808.0) {
    return static_cast<int64_t>(static_cast<uint64_t>(std::min(v, 18446744073709549568.0)));
  }
  return static_cast<int64_t>(std::clamp(v, -9223372036854775808.0, 9223372036854774784.0));
}

Arg UOp::ConstArg(DType dtype, int64_t v) {
  if (dtype.IsFloat()) return ConstFloat(static_cast<double>(v));
  if (dtype.IsBool()) return v != 0;
  return v;
}

UOpPtr UOp::Const(DType dtype, double v) { return Make(Op::CONST, dtype, {}, ConstArg(dtype, v)); }
UOpPtr UOp::Const(DType dtype, int64_t v) { return Make(Op::CONST, dtype, {}, ConstArg(dtype, v)); }
UOpPtr UOp::ConstBool(bool v) { return Make(Op::CONST, dtypes::kBool, {}, v); }

UOpPtr UOp::Variable(std::string name, int64_t min, int64_t max) {
  return Make(Op::DEFINE_VAR, dtypes::kIndex, {}, VarArg{std::move(name), min, max});
}

UOpPtr UOp::Range(int64_t end, int64_t id, AxisType type) {
  return Make(Op::RANGE, dtypes::kIndex, {ConstInt(end)}, AxisArg{id, type});
}

UOpPtr UOp::Sink(absl::Span<const UOpPtr> src) { return Make(Op::SINK, dtypes::kVoid, src); }

UOpPtr UOp::Alu(Op op, absl::Span<const UOpPtr> src) {
  DType dt = op == Op::WHERE ? src[1]->dtype() : src[0]->dtype();
  if (IsComparison(op)) dt = DType(ScalarType::kBool).Vec(src[0]->dtype().count);
  return Make(op, dt, src);
}

// ---------------------------------------------------------------------------------------------
// Accessors
// ---------------------------------------------------------------------------------------------

int64_t UOp::Numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

int64_t UOp::ArgInt() const {
  const int64_t* v = std::get_if<int64_t>(&arg_);
  KILN_CHECK_MSG(v != nullptr, "arg is not an int");
  return *v;
}

double UOp::ArgFloat() const { return ConstValue(); }

bool UOp::ArgBool() const {
  const bool* v = std::get_if<bool>(&arg_);
  KILN_CHECK_MSG(v != nullptr, "arg is not a bool");
  return *v;
}

const IntVec& UOp::ArgVec() const {
  const IntVec* v = std::get_if<IntVec>(&arg_);
  KILN_CHECK_MSG(v != nullptr, "arg is not an int vector");
  return *v;
}

const std::string& UOp::ArgStr() const {
  const std::string* v = std::get_if<std::string>(&arg_);
  KILN_CHECK_MSG(v != nullptr, "arg is not a string");
  return *v;
}

double UOp::ConstValue() const {
  if (const auto* f = std::get_if<ConstFloat>(&arg_)) return f->value;
  if (const auto* i = std::get_if<int64_t>(&arg_)) {
    return dtype_.IsUnsigned() ? static_cast<double>(static_cast<uint64_t>(*i))
                               : static_cast<double>(*i);
  }
  if (const auto* b = std::get_if<bool>(&arg_)) return *b ? 1.0 : 0.0;
  KILN_CHECK_MSG(false, "arg is not a constant");
  return 0.0;
}

UOpPtr UOp::WithSrc(absl::Span<const UOpPtr> src) const { return Make(op_, dtype_, src, arg_, tag_); }
UOpPtr UOp::WithArg(Arg arg) const { return Make(op_, dtype_, src_, std::move(arg), tag_); }
UOpPtr UOp::WithDType(DType dtype) const { return Make(op_, dtype, src_, arg_, tag_); }
UOpPtr UOp::WithTag(int64_t tag) const { return Make(op_, dtype_, src_, arg_, tag); }

// ---------------------------------------------------------------------------------------------
// Structural key
// ---------------------------------------------------------------------------------------------

namespace {

std::mutex g_key_mu;

void HashArg(Sha256& h, const Arg& arg) {
  uint8_t idx = static_cast<uint8_t>(arg.index());
  h.Update(&idx, 1);
  auto put_i64 = [&](int64_t v) { h.Update(&v, sizeof v); };
  auto put_str = [&](const std::string& s) {
    put_i64(static_cast<int64_t>(s.size()));
    h.Update(s);
  };
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
        } else if constexpr (std::is_same_v<T, bool>) {
          put_i64(v ? 1 : 0);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          put_i64(v);
        } else if constexpr (std::is_same_v<T, ConstFloat>) {
          put_i64(static_cast<int64_t>(v.Bits()));
        } else if constexpr (std::is_same_v<T, std::string>) {
          put_str(v);
        } else if constexpr (std::is_same_v<T, IntVec>) {
          put_i64(static_cast<int64_t>(v.size()));
          for (int64_t x : v) put_i64(x);
        } else if constexpr (std::is_same_v<T, Op>) {
          put_str(std::string(OpName(v)));
        } else if constexpr (std::is_same_v<T, AxisArg>) {
          put_i64(v.id);
          put_i64(static_cast<int64_t>(v.type));
        } else if constexpr (std::is_same_v<T, VarArg>) {
          put_str(v.name);
          put_i64(v.min);
          put_i64(v.max);
        } else if constexpr (std::is_same_v<T, ReduceArg>) {
          put_str(std::string(OpName(v.op)));
          put_i64(static_cast<int64_t>(v.axes.size()));
          for (int64_t x : v.axes) put_i64(x);
        }
      },
      arg);
}

}  // namespace

const Digest& UOp::Key() const {
  if (key_ready_.load(std::memory_order_acquire)) return key_;
  UOpPtr self = Ptr();
  std::vector<const UOp*> order = Toposort(self);
  std::lock_guard<std::mutex> lock(g_key_mu);
  for (const UOp* u : order) {
    if (u->key_ready_.load(std::memory_order_relaxed)) continue;
    Sha256 h;
    // Op by name and dtype by name, so keys survive reordering of the enums.
    h.Update(OpName(u->op_));
    h.Update("|", 1);
    h.Update(u->dtype_.Name());
    h.Update("|", 1);
    HashArg(h, u->arg_);
    for (const UOpPtr& s : u->src_) h.Update(s->key_.data(), s->key_.size());
    u->key_ = h.Final();
    u->key_ready_.store(true, std::memory_order_release);
  }
  return key_;
}

// ---------------------------------------------------------------------------------------------
// Toposort
// ---------------------------------------------------------------------------------------------

namespace {

// Toposort's walk; `skip(u)`: u is neither listed nor descended into.
template <typename Skip>
std::vector<const UOp*> ToposortSkipping(absl::Span<const UOpPtr> roots, Skip skip) {
  std::vector<const UOp*> out;
  absl::flat_hash_set<const UOp*> visited;
  std::vector<std::pair<const UOp*, size_t>> stack;
  for (const UOpPtr& r : roots) {
    if (!r || skip(r.get()) || visited.contains(r.get())) continue;
    visited.insert(r.get());
    stack.emplace_back(r.get(), 0);
    while (!stack.empty()) {
      auto& [u, i] = stack.back();
      if (i < u->num_src()) {
        const UOp* c = u->src(i++).get();
        if (!skip(c) && visited.insert(c).second) stack.emplace_back(c, 0);
      } else {
        out.push_back(u);
        stack.pop_back();
      }
    }
  }
  return out;
}

}  // namespace

std::vector<const UOp*> Toposort(absl::Span<const UOpPtr> roots) {
  return ToposortSkipping(roots, [](const UOp*) { return false; });
}

std::vector<const UOp*> Toposort(const UOpPtr& root, absl::FunctionRef<bool(const UOp*)> skip) {
  return ToposortSkipping(absl::Span<const UOpPtr>(&root, 1), skip);
}

std::vector<const UOp*> Toposort(const UOpPtr& root) {
  return Toposort(absl::Span<const UOpPtr>(&root, 1));
}

// ---------------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------------

std::string ShapeToString(const Shape& s) { return absl::StrCat("(", absl::StrJoin(s, ", "), ")"); }

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ShapeToString(a), " and ",
                                                     ShapeToString(b), " do not broadcast"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

absl::StatusOr<std::optional<Shape>> InferShape(Op op, DType dtype, absl::Span<const UOpPtr> src,
                                                const Arg& arg) {
  auto err = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(OpName(op)), ": ", parts...));
  };
  switch (op) {
    case Op::CONST:
    case Op::DEFINE_VAR:
    case Op::RANGE:
    case Op::SPECIAL:
      return std::optional<Shape>(Shape{});
    case Op::BIND:
      return std::optional<Shape>(Shape{});
    case Op::BUFFER: {
      const int64_t* n = std::get_if<int64_t>(&arg);
      if (n == nullptr) return std::optional<Shape>();
      if (*n < 0) return err("negative buffer size ", *n);
      return std::optional<Shape>(Shape{*n});
    }
    default: break;
  }
  if (IsElementwise(op)) {
    if (src.empty()) return std::optional<Shape>();
    Shape out;
    for (const UOpPtr& s : src) {
      if (!s || !s->has_shape()) return std::optional<Shape>();
    }
    out = src[0]->shape();
    for (size_t i = 1; i < src.size(); ++i) {
      auto b = BroadcastShapes(out, src[i]->shape());
      if (!b.ok()) return err(b.status().message());
      out = *std::move(b);
    }
    if (op == Op::BITCAST && !out.empty() && !src[0]->dtype().is_ptr) {
      int64_t from = src[0]->dtype().ItemSize(), to = dtype.ItemSize();
      if (from != to && to > 0) {
        int64_t bytes = 0;
        if (__builtin_mul_overflow(out.back(), static_cast<int64_t>(from), &bytes))
          return err("last dim ", out.back(), " overflows int64 in bytes");
        if ((out.back() * from) % to != 0)
          return err("cannot bitcast last dim ", out.back(), " of ", from, "-byte items to ", to,
                     "-byte items");
        out.back() = out.back() * from / to;
      }
    }
    return std::optional<Shape>(std::move(out));
  }
  if (!IsTensorOnly(op) && op != Op::ASSIGN) return std::optional<Shape>();
  if (src.empty() || !src[0] || !src[0]->has_shape()) return std::optional<Shape>();
  const Shape& in = src[0]->shape();
  const IntVec* v = std::get_if<IntVec>(&arg);
  switch (op) {
    case Op::ROWS: {
      // The bound Variable counts rows of dim 0, so its range must be [>= 1, dim 0].
      const UOp* b = src.size() == 2 ? src[1].get() : nullptr;
      const VarArg* var = b != nullptr && b->op() == Op::BIND && b->num_src() == 2
                              ? std::get_if<VarArg>(&b->src(0)->arg())
                              : nullptr;
      if (var == nullptr) return err("source 1 must bind a Variable");
      if (in.empty()) return err("a scalar has no rows");
      if (var->min < 1 || var->max != in[0])
        return err("Variable '", var->name, "' ranges over [", var->min, ", ", var->max, "] but must range over [1, ",
                   in[0], "] (dim 0)");
      return std::optional<Shape>(in);
    }
    case Op::RESHAPE: {
      if (v == nullptr) return err("arg must be a shape");
      int64_t n = 1, m = 1;
      for (int64_t d : *v) {
        if (d < 0) return err("negative dim ", d, " in ", ShapeToString(Shape(v->begin(), v->end())));
        if (__builtin_mul_overflow(n, d, &n)) return err("element count of the new shape overflows int64");
      }
      for (int64_t d : in) {
        if (__builtin_mul_overflow(m, d, &m)) return err("element count of the source shape overflows int64");
      }
      if (n != m)
        return err("cannot reshape ", ShapeToString(in), " (", m, " elements) to ",
                   ShapeToString(Shape(v->begin(), v->end())), " (", n, " elements)");
      return std::optional<Shape>(Shape(v->begin(), v->end()));
    }
    case Op::EXPAND: {
      if (v == nullptr) return err("arg must be a shape");
      if (v->size() != in.size())
        return err("rank mismatch: ", ShapeToString(in), " to ", ShapeToString(Shape(v->begin(), v->end())));
      for (size_t i = 0; i < in.size(); ++i) {
        if ((*v)[i] < 0 || (in[i] != (*v)[i] && in[i] != 1))
          return err("cannot expand ", ShapeToString(in), " to ", ShapeToString(Shape(v->begin(), v->end())));
      }
      return std::optional<Shape>(Shape(v->begin(), v->end()));
    }
    case Op::PERMUTE: {
      if (v == nullptr || v->size() != in.size()) return err("permutation must have rank ", in.size());
      std::vector<bool> seen(in.size(), false);
      Shape out(in.size());
      for (size_t i = 0; i < v->size(); ++i) {
        int64_t p = (*v)[i];
        if (p < 0 || p >= static_cast<int64_t>(in.size()) || seen[p])
          return err("invalid permutation");
        seen[p] = true;
        out[i] = in[p];
      }
      return std::optional<Shape>(std::move(out));
    }
    case Op::PAD:
    case Op::SHRINK: {
      if (v == nullptr || v->size() != 2 * in.size())
        return err("arg must hold 2 values per dim (", 2 * in.size(), ")");
      Shape out(in.size());
      for (size_t i = 0; i < in.size(); ++i) {
        int64_t a = (*v)[2 * i], b = (*v)[2 * i + 1];
        if (op == Op::PAD) {
          if (a < 0 || b < 0) return err("negative padding on dim ", i);
          if (__builtin_add_overflow(in[i], a, &out[i]) || __builtin_add_overflow(out[i], b, &out[i]))
            return err("padded dim ", i, " overflows int64");
        } else {
          if (a < 0 || b < a || b > in[i])
            return err("range [", a, ", ", b, ") out of bounds for dim ", i, " of size ", in[i]);
          out[i] = b - a;
        }
      }
      return std::optional<Shape>(std::move(out));
    }
    case Op::FLIP: {
      if (v == nullptr || v->size() != in.size()) return err("arg must have one flag per dim");
      for (int64_t f : *v)
        if (f != 0 && f != 1) return err("flags must be 0 or 1");
      return std::optional<Shape>(in);
    }
    case Op::REDUCE_AXIS: {
      const ReduceArg* r = std::get_if<ReduceArg>(&arg);
      if (r == nullptr) return err("arg must be a ReduceArg");
      if (!IsReduceOp(r->op)) return err("reduce op must be ADD, MUL or MAX");
      Shape out = in;
      for (size_t i = 0; i < r->axes.size(); ++i) {
        int64_t a = r->axes[i];
        if (a < 0 || a >= static_cast<int64_t>(in.size())) return err("axis ", a, " out of range");
        if (i > 0 && a <= r->axes[i - 1]) return err("axes must be sorted and unique");
        out[a] = 1;
      }
      return std::optional<Shape>(std::move(out));
    }
    case Op::COPY:
    case Op::CONTIGUOUS:
    case Op::CONTIGUOUS_BACKWARD:
    case Op::DETACH:
    case Op::STAGE:
      return std::optional<Shape>(in);
    case Op::ASSIGN: {
      if (src.size() > 1 && src[1]->has_shape() && src[1]->shape() != in)
        return err("target ", ShapeToString(in), " and value ", ShapeToString(src[1]->shape()),
                   " shapes differ");
      return std::optional<Shape>(in);
    }
    default:
      return std::optional<Shape>();
  }
}

// ---------------------------------------------------------------------------------------------
// Arithmetic sugar
// ---------------------------------------------------------------------------------------------

namespace {
UOpPtr ConstLike(const UOpPtr& like, int64_t v) { return UOp::Const(like->dtype(), v); }
UOpPtr Bin(Op op, const UOpPtr& a, const UOpPtr& b) { return UOp::Alu(op, {a, b}); }
Op DivOp(const UOpPtr& a) { return a->dtype().IsFloat() ? Op::FDIV : Op::CDIV; }
}  // namespace

UOpPtr operator+(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::ADD, a, b); }
UOpPtr operator-(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::ADD, a, -b); }
UOpPtr operator*(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::MUL, a, b); }
UOpPtr operator/(const UOpPtr& a, const UOpPtr& b) { return Bin(DivOp(a), a, b); }
UOpPtr operator%(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::CMOD, a, b); }
UOpPtr operator+(const UOpPtr& a, int64_t b) { return a + ConstLike(a, b); }
UOpPtr operator-(const UOpPtr& a, int64_t b) { return a + ConstLike(a, -b); }
UOpPtr operator*(const UOpPtr& a, int64_t b) { return a * ConstLike(a, b); }
UOpPtr operator/(const UOpPtr& a, int64_t b) { return a / ConstLike(a, b); }
UOpPtr operator%(const UOpPtr& a, int64_t b) { return a % ConstLike(a, b); }
UOpPtr operator-(const UOpPtr& a) { return a * ConstLike(a, -1); }
UOpPtr Lt(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::CMPLT, a, b); }
UOpPtr Lt(const UOpPtr& a, int64_t b) { return Bin(Op::CMPLT, a, ConstLike(a, b)); }
UOpPtr Ne(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::CMPNE, a, b); }
UOpPtr Eq(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::CMPEQ, a, b); }
UOpPtr Max(const UOpPtr& a, const UOpPtr& b) { return Bin(Op::MAX, a, b); }
UOpPtr Where(const UOpPtr& c, const UOpPtr& t, const UOpPtr& f) { return UOp::Alu(Op::WHERE, {c, t, f}); }
UOpPtr Cast(const UOpPtr& a, DType d) { return UOp::Make(Op::CAST, d, {a}); }

}  // namespace kiln
