// TinyJit: capture a function's kernel sequence once, replay it per call (tinygrad's TinyJit,
// reference/tinygrad.md §6, with its semantics).
//
// Calls (cnt = calls so far):
//   every call   inputs are collected (positional, then named in name order), unrealized inputs are realized, and
//                each must be a real, whole, contiguous buffer and appear once.
//   cnt 0        the function runs normally; its returned tensors are realized.
//   cnt 1        capture: Realize() calls inside the function (and of its returned tensors) are recorded instead of
//                run (engine/realize/exec_plan.h); the recording is compiled into an ExecPlan whose inputs are the
//                input buffers, executed once with this call's inputs, and its outputs are returned.
//   cnt >= 2     replay: the signature (names, then shape/dtype/device per input) is checked, the new input buffers
//                are swapped in, the Variables take this call's `vars` and the captured kernels run. The SAME output tensors as at capture are returned:
//                their buffers are overwritten by every replay (clone an output to keep it).
// Everything else the function reads (weights, realized constants) is an implicit input baked in by buffer identity:
// replays see its current contents, and ASSIGNs into it (optimizer steps) are replayed.
// Random numbers regenerate on every replay: during capture each random call's key lives in a small device buffer
// that every replay refills from the process-wide random stream, so a jitted function draws the same numbers as
// the same calls without the JIT. An input that the plan itself writes (an output fed back) is copied first.
// JIT=0 (Knob::kJit) disables capture: every call runs the function. JIT=2 replays the plan's kernels as device
// graphs (ExecPlan::GraphMode::kOn: CUDA graphs on CUDA, a launch list on CPU/INTERP); JIT unset does so only on
// devices whose graphs are on by default (CUDA); JIT=1 set explicitly is plain kernel-by-kernel replay.
//
// Errors (tinygrad's JitError, as Status; the message carries tinygrad's words):
//   InvalidArgument     "JIT inputs must be real buffers; use .clone()"    (a const input or a view of a buffer)
//                       "duplicate inputs to JIT"
//                       "args mismatch in JIT: expected_names=... != ..."  (different input names / count)
//                       "args mismatch in JIT: expected_input_info=... != ..." (shape / dtype / device differ)
//                       "args mismatch in JIT: no value for Variable n" / "Variable n = 9 is outside [1, 8]"
//   FailedPrecondition  "didn't JIT anything!"                            (the capture recorded no kernel)
//                       "having TinyJit inside another TinyJit is not supported" (capture/replay inside a capture)
//                       "cannot access tensor data during JIT capture, the value will be baked in"
// A failed call leaves cnt unchanged (a failed capture can be retried).
//
// Thread safety: a TinyJit is not thread-safe; call it from one thread at a time (TraceCache serializes per entry).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dtype/dtype.h"
#include "engine/realize/exec_plan.h"
#include "engine/tensor/tensor.h"

namespace kiln::jit {

// Inputs of a jitted call: positional, and named (tinygrad kwargs) ordered by name, so the order a caller builds
// them in does not matter.
// `vars` are this call's Variable values (tinygrad passes bound Variables as arguments): the function binds its
// Variables from them (UOp::Variable + Bind, e.g. Tensor::Rows for a symbolic batch dim), and a replay runs the
// captured kernels with the new values, so one capture serves every value in the Variables' ranges.
struct JitArgs {
  std::vector<Tensor> positional;
  std::map<std::string, Tensor> named;
  std::map<std::string, int64_t> vars;
};

using JitFunction = std::function<absl::StatusOr<std::vector<Tensor>>(const JitArgs&)>;
using PositionalJitFunction =
    std::function<absl::StatusOr<std::vector<Tensor>>(const std::vector<Tensor>&)>;

// The signature of one input.
struct InputInfo {
  Shape shape;
  DType dtype;
  std::string device;
  bool operator==(const InputInfo& o) const {
    return shape == o.shape && dtype == o.dtype && device == o.device;
  }
  bool operator!=(const InputInfo& o) const { return !(*this == o); }
  std::string ToString() const;  // "(shape=(4, 4), dtype=float, device=CPU)"
};

class TinyJit {
 public:
  explicit TinyJit(JitFunction fn);
  explicit TinyJit(PositionalJitFunction fn);
  ~TinyJit();
  TinyJit(const TinyJit&) = delete;
  TinyJit& operator=(const TinyJit&) = delete;

  absl::StatusOr<std::vector<Tensor>> operator()(const std::vector<Tensor>& inputs);
  absl::StatusOr<std::vector<Tensor>> Call(const JitArgs& args);

  // Forgets the capture: the next call runs the function normally (cnt 0).
  void Reset();

  int cnt() const { return cnt_; }
  bool captured() const { return plan_ != nullptr; }
  // Kernels in the captured plan (0 before capture).
  int num_kernels() const { return plan_ ? plan_->num_kernels() : 0; }
  const std::vector<std::string>& expected_names() const { return expected_names_; }
  const std::vector<InputInfo>& expected_input_info() const { return expected_info_; }
  const ExecPlan* plan() const { return plan_.get(); }
  // Times every launch of the plan's runs (capture and replays; ExecPlan::set_timed).
  void set_time_launches(bool timed) { time_launches_ = timed; }
  // The first call captures (no cnt-0 run). For functions whose every input and implicit input is realized before
  // the first call (nothing is realized for the first time inside it, which the capture would then repeat on every
  // replay): an LLM's decode step, whose first run and capture each took the same 1.1-1.3 s of scheduling and
  // lowering (SmolLM2; kilnd traces 10 of them before the model is READY).
  void set_capture_first(bool on) { capture_first_ = on; }
  // Appends every device buffer this JIT keeps alive: the plan's held buffers, the random-key buffers and the
  // per-input alias copies (possibly repeating one; callers count unique buffers).
  void CollectBuffers(std::vector<const runtime::Buffer*>* out) const;

 private:
  struct Inputs {
    std::vector<std::string> names;
    std::vector<Tensor> tensors;  // realized, in order
    std::vector<UOpPtr> buffers;  // their BUFFER nodes
  };
  struct RngKey {
    UOpPtr node;
    std::shared_ptr<runtime::Buffer> buffer;
  };
  absl::StatusOr<Inputs> PrepareInputs(const JitArgs& args) const;
  absl::StatusOr<std::vector<Tensor>> RunAndRealize(const JitArgs& args);
  absl::StatusOr<std::vector<Tensor>> Capture(const JitArgs& args, Inputs inputs);
  absl::StatusOr<std::vector<Tensor>> Replay(const Inputs& inputs, const std::map<std::string, int64_t>& vars);
  // Resolves the input memory (copying inputs the plan writes), refills the random keys, runs the plan.
  absl::Status Execute(const Inputs& inputs);

  JitFunction fn_;
  int cnt_ = 0;
  bool time_launches_ = false;
  bool capture_first_ = false;
  std::unique_ptr<ExecPlan> plan_;
  std::vector<Tensor> ret_;
  std::vector<std::string> expected_names_;
  std::vector<InputInfo> expected_info_;
  std::vector<RngKey> rng_keys_;
  std::vector<runtime::DeviceMemory> input_mem_;  // reused per replay
  std::vector<std::shared_ptr<runtime::Buffer>>
      alias_scratch_;  // per input, allocated on first aliasing
};

}  // namespace kiln::jit
