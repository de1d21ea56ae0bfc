// TinyJit: see tiny_jit.h.
#include "engine/jit/tiny_jit.h"

#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/realize/realize.h"
#include "engine/runtime/buffer.h"
#include "engine/schedule/schedule.h"

namespace kiln::jit {
namespace {

absl::Status JitError(const std::string& msg) { return absl::InvalidArgumentError(msg); }

std::string NamesStr(const std::vector<std::string>& names) {
  return absl::StrCat(
      "[",
      absl::StrJoin(names, ", ",
                    [](std::string* o, const std::string& n) { absl::StrAppend(o, "'", n, "'"); }),
      "]");
}

std::string InfoStr(const std::vector<InputInfo>& info) {
  return absl::StrCat(
      "[",
      absl::StrJoin(info, ", ",
                    [](std::string* o, const InputInfo& i) { absl::StrAppend(o, i.ToString()); }),
      "]");
}

InputInfo InfoOf(const Tensor& t) { return InputInfo{t.shape(), t.dtype(), t.device()}; }

bool HasBuffer(const UOpPtr& u) {
  for (const UOp* n : Toposort(u))
    if (n->op() == Op::BUFFER) return true;
  return false;
}

// Realizes every returned tensor (one schedule) and checks none is an error.
absl::Status RealizeAll(std::vector<Tensor>& ret) {
  std::vector<Tensor*> ptrs;
  for (Tensor& t : ret) {
    if (!t.ok()) return t.status();
    ptrs.push_back(&t);
  }
  if (ptrs.empty()) return absl::OkStatus();
  return Tensor::Realize(absl::Span<Tensor* const>(ptrs.data(), ptrs.size()));
}

// Restores the thread's random-key hook on scope exit.
struct RngHookGuard {
  ~RngHookGuard() { Tensor::SetRngKeyHook({}); }
};

}  // namespace

std::string InputInfo::ToString() const {
  return absl::StrCat("(shape=(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")",
                      ", dtype=", dtype.Name(), ", device=", device, ")");
}

TinyJit::TinyJit(JitFunction fn) : fn_(std::move(fn)) {}

TinyJit::TinyJit(PositionalJitFunction fn)
    : fn_([f = std::move(fn)](const JitArgs& a) { return f(a.positional); }) {}

TinyJit::~TinyJit() = default;

void TinyJit::Reset() {
  cnt_ = 0;
  plan_.reset();
  ret_.clear();
  expected_names_.clear();
  expected_info_.clear();
  rng_keys_.clear();
  input_mem_.clear();
  alias_scratch_.clear();
}

absl::StatusOr<std::vector<Tensor>> TinyJit::operator()(const std::vector<Tensor>& inputs) {
  JitArgs a;
  a.positional = inputs;
  return Call(a);
}

absl::StatusOr<TinyJit::Inputs> TinyJit::PrepareInputs(const JitArgs& args) const {
  Inputs in;
  auto add = [&](std::string name, const Tensor& t) -> absl::Status {
    if (!t.ok()) return t.status();
    Tensor r = t;
    if (!r.IsRealized()) {
      if (!HasBuffer(r.uop()))
        return JitError(absl::StrCat("JIT inputs must be real buffers; use .clone() (input ", name,
                                     " is a constant with no buffer)"));
      KILN_RETURN_IF_ERROR(r.Realize());
    }
    bool contiguous = false;
    const UOp* b = BufferOf(r.uop().get(), &contiguous);
    if (b == nullptr || !contiguous || b->ArgInt() != r.numel())
      return JitError(absl::StrCat("JIT inputs must be real buffers; use .clone() (input ", name,
                                   " is a view of a buffer: pass .Contiguous() of it)"));
    in.names.push_back(std::move(name));
    in.buffers.push_back(b->Ptr());
    in.tensors.push_back(std::move(r));
    return absl::OkStatus();
  };
  for (size_t i = 0; i < args.positional.size(); ++i)
    KILN_RETURN_IF_ERROR(add(absl::StrCat(i), args.positional[i]));
  for (const auto& [name, t] : args.named) KILN_RETURN_IF_ERROR(add(name, t));
  absl::flat_hash_set<const UOp*> seen;
  for (const UOpPtr& b : in.buffers)
    if (!seen.insert(b.get()).second) return JitError("duplicate inputs to JIT");
  return in;
}

absl::StatusOr<std::vector<Tensor>> TinyJit::Call(const JitArgs& args) {
  const bool enabled = GetKnob(Knob::kJit) != 0;
  if (enabled && cnt_ >= 1 && CaptureScope::Active())
    return absl::FailedPreconditionError(
        "having TinyJit inside another TinyJit is not supported (len(capturing)=1)");
  KILN_ASSIGN_OR_RETURN(Inputs inputs, PrepareInputs(args));
  if (!enabled) return RunAndRealize(args);
  if (cnt_ == 0 && !capture_first_) {
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> ret, RunAndRealize(args));
    cnt_ = 1;
    return ret;
  }
  if (cnt_ <= 1) return Capture(args, std::move(inputs));
  return Replay(inputs, args.vars);
}

absl::StatusOr<std::vector<Tensor>> TinyJit::RunAndRealize(const JitArgs& args) {
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> ret, fn_(args));
  KILN_RETURN_IF_ERROR(RealizeAll(ret));
  return ret;
}

absl::StatusOr<std::vector<Tensor>> TinyJit::Capture(const JitArgs& args, Inputs inputs) {
  std::vector<RngKey> keys;
  std::vector<CapturedItem> items;
  std::vector<Tensor> ret;
  {
    RngHookGuard hook_guard;
    absl::Status hook_error;
    Tensor::SetRngKeyHook(
        [&keys, &hook_error](uint32_t k0, uint32_t k1, const std::string& device) {
          std::vector<uint32_t> key = {k0, k1};
          Tensor t = Tensor::FromVector(key, {2}, device);
          if (!t.ok()) return t;
          const UOp* b = BufferOf(t.uop().get());
          keys.push_back(RngKey{b->Ptr(), runtime::BufferTable::Global().Lookup(b)});
          if (keys.back().buffer == nullptr)
            hook_error = absl::InternalError("JIT: random key buffer has no memory");
          return t;
        });
    CaptureScope scope;
    // Pass the realized inputs, so the function's graph reads exactly the buffers the plan swaps.
    JitArgs realized;
    size_t k = 0;
    for (size_t i = 0; i < args.positional.size(); ++i)
      realized.positional.push_back(inputs.tensors[k++]);
    for (const auto& [name, t] : args.named) realized.named.emplace(name, inputs.tensors[k++]);
    realized.vars = args.vars;
    KILN_ASSIGN_OR_RETURN(ret, fn_(realized));
    KILN_RETURN_IF_ERROR(RealizeAll(ret));
    KILN_RETURN_IF_ERROR(hook_error);
    items = scope.Take();
  }
  if (items.empty()) return absl::FailedPreconditionError("didn't JIT anything!");
  std::vector<UOpPtr> outs;
  for (const Tensor& t : ret) outs.push_back(t.uop());
  KILN_ASSIGN_OR_RETURN(plan_, ExecPlan::Build(std::move(items), inputs.buffers, outs));
  // JIT=2: device graphs wherever the device has them; JIT unset: where the device has them on by default (CUDA);
  // JIT=1 set explicitly: plain replay.
  plan_->SetGraphMode(GetKnob(Knob::kJit) >= 2 ? ExecPlan::GraphMode::kOn
                      : KnobIsSet(Knob::kJit)  ? ExecPlan::GraphMode::kOff
                                               : ExecPlan::GraphMode::kDeviceDefault);
  expected_names_ = inputs.names;
  expected_info_.clear();
  for (const Tensor& t : inputs.tensors) expected_info_.push_back(InfoOf(t));
  rng_keys_ = std::move(keys);
  input_mem_.assign(inputs.buffers.size(), runtime::DeviceMemory{});
  alias_scratch_.assign(inputs.buffers.size(), nullptr);
  ret_ = ret;
  // The capture's random keys were drawn during the capture: the first execution uses them as they are.
  std::vector<RngKey> fresh_keys = std::exchange(rng_keys_, {});
  absl::Status st = Execute(inputs);
  rng_keys_ = std::move(fresh_keys);
  if (!st.ok()) {
    Reset();
    cnt_ = 1;
    return st;
  }
  cnt_ = 2;
  return ret_;
}

absl::StatusOr<std::vector<Tensor>> TinyJit::Replay(const Inputs& inputs, const std::map<std::string, int64_t>& vars) {
  if (inputs.names != expected_names_)
    return JitError(absl::StrCat("args mismatch in JIT: self.captured.expected_names=",
                                 NamesStr(expected_names_), " != names=", NamesStr(inputs.names)));
  for (size_t i = 0; i < inputs.tensors.size(); ++i) {
    if (InfoOf(inputs.tensors[i]) != expected_info_[i]) {
      std::vector<InputInfo> got;
      for (const Tensor& t : inputs.tensors) got.push_back(InfoOf(t));
      return JitError(absl::StrCat(
          "args mismatch in JIT: self.captured.expected_input_info=", InfoStr(expected_info_),
          " != expected_input_info=", InfoStr(got)));
    }
  }
  if (!plan_->variables().empty()) {
    absl::flat_hash_map<std::string, int64_t> vals(vars.begin(), vars.end());
    if (absl::Status st = plan_->SetVars(vals); !st.ok())
      return JitError(absl::StrCat("args mismatch in JIT: ", st.message()));
  }
  KILN_RETURN_IF_ERROR(Execute(inputs));
  ++cnt_;
  return ret_;
}

absl::Status TinyJit::Execute(const Inputs& inputs) {
  runtime::BufferTable& table = runtime::BufferTable::Global();
  for (size_t i = 0; i < inputs.buffers.size(); ++i) {
    std::shared_ptr<runtime::Buffer> buf = table.Lookup(inputs.buffers[i].get());
    if (buf == nullptr)
      return absl::FailedPreconditionError("JIT: an input buffer has no device memory");
    input_mem_[i] = buf->memory();
    if (plan_->Writes(
            input_mem_[i])) {  // the plan overwrites this input while reading it: read a copy
      std::shared_ptr<runtime::Buffer>& scratch = alias_scratch_[i];
      if (scratch == nullptr || scratch->nbytes() != buf->nbytes()) {
        KILN_ASSIGN_OR_RETURN(scratch,
                              runtime::Buffer::Create(buf->device(), buf->dtype(), buf->numel()));
      }
      std::vector<char> host(buf->nbytes());
      KILN_RETURN_IF_ERROR(buf->device()->Synchronize());
      KILN_RETURN_IF_ERROR(buf->CopyOut(host.data(), host.size()));
      KILN_RETURN_IF_ERROR(scratch->CopyIn(host.data(), host.size()));
      input_mem_[i] = scratch->memory();
    }
  }
  for (RngKey& k : rng_keys_) {
    auto [k0, k1] = Tensor::NextRngKey();
    const uint32_t key[2] = {k0, k1};
    KILN_RETURN_IF_ERROR(k.buffer->CopyIn(key, sizeof(key)));
  }
  plan_->set_timed(time_launches_);
  return plan_->Run(input_mem_);
}

void TinyJit::CollectBuffers(std::vector<const runtime::Buffer*>* out) const {
  if (plan_ != nullptr) {
    for (const auto& b : plan_->held_buffers()) out->push_back(b.get());
  }
  for (const RngKey& k : rng_keys_) {
    if (k.buffer != nullptr) out->push_back(k.buffer.get());
  }
  for (const auto& b : alias_scratch_) {
    if (b != nullptr) out->push_back(b.get());
  }
}

}  // namespace kiln::jit
