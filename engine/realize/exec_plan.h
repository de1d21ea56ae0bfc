// Capture and replay of realizations: the machinery under TinyJit (engine/jit).
//
// CaptureScope. While one is alive on a thread, Realize() on that thread schedules as usual but runs nothing: it
// appends the schedule's items (kernels and copies, with the schedule's variable values) to the scope and returns the
// output views, whose buffers get memory only when a plan built from the capture runs. During capture the realize
// memo is bypassed both ways (a value memoized before the capture would drop its kernels from it) and ToHost fails
// with FailedPrecondition "cannot access tensor data during JIT capture, the value will be baked in". Scopes do not
// nest: constructing one while another is active on the thread is a caller bug (check CaptureScope::Active()).
//
// ExecPlan. Captured items lowered once into loaded programs with pre-resolved buffer memory. `inputs` are BUFFER
// nodes whose memory is supplied per Run (by position); every other buffer is allocated at Build (unless it already
// has memory) and held by the plan for its lifetime. Run() patches the input pointers into a flat argument array and
// launches the kernels in order: no scheduling, no compiling, no allocation, no lock except the devices' own.
// The buffers a plan writes are "volatile" while the plan lives: the realize memo never remembers a value that reads
// one (its contents change on every Run), and memo entries that read one are dropped at Build.
//
// Bounded work: Build estimates the captured items (estimate.h) and checks them against CurrentRunControl()'s limits
// before it allocates anything (RESOURCE_EXHAUSTED), reserving the new bytes in its MemoryBudget while it allocates.
// Run checks the plan's estimate (FLOPs, bytes moved, peak memory) against the current limits first, then the
// deadline and cancellation token before every call (DEADLINE_EXCEEDED / CANCELLED; a device graph batch is one call).
//
// Thread safety: a CaptureScope is per thread. An ExecPlan is not thread-safe (Run mutates its argument array); use
// one plan from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/realize/estimate.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/device.h"
#include "engine/schedule/schedule.h"
#include "engine/uop/uop.h"

namespace kiln {

namespace realize_internal {
struct LoadedKernel;
struct CaptureState;
}  // namespace realize_internal

// One captured schedule item with the variable values of the schedule it came from.
struct CapturedItem {
  ScheduleItem item;
  absl::flat_hash_map<std::string, int64_t> var_vals;
};

class CaptureScope {
 public:
  CaptureScope();
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

  // Whether a scope is alive on this thread.
  static bool Active();
  // The items recorded so far (moved out; the scope stays active and records on).
  std::vector<CapturedItem> Take();
  int num_kernels() const;

 private:
  std::unique_ptr<realize_internal::CaptureState> state_;
  realize_internal::CaptureState* prev_ = nullptr;
};

class ExecPlan {
 public:
  // Lowers and compiles every kernel, allocates the non-input buffers, resolves their memory. `extra_buffers` are
  // BUFFER nodes (e.g. outputs no kernel writes) that must have memory too. Errors: compile failures, unknown device,
  // a kernel reading a buffer on another device, out of memory.
  static absl::StatusOr<std::unique_ptr<ExecPlan>> Build(
      std::vector<CapturedItem> items, absl::Span<const UOpPtr> inputs,
      absl::Span<const UOpPtr> extra_buffers = {});
  ~ExecPlan();
  ExecPlan(const ExecPlan&) = delete;
  ExecPlan& operator=(const ExecPlan&) = delete;

  // Runs every item with `inputs[i]` standing for the i-th input BUFFER of Build (same count; each at least as large
  // as the captured one -- the caller checks signatures). Synchronizes the devices before returning.
  absl::Status Run(absl::Span<const runtime::DeviceMemory> inputs);
  // Timed runs: each kernel launch of a Run is timed on its device (Launch(..., timed = true); a
  // host-side clock on CPU, events or a sync on accelerators) into call_seconds(), one entry per call
  // in KernelNames() order (-1: not timed -- copies, kernels inside a device graph). Off by default.
  void set_timed(bool timed) { timed_ = timed; }
  const std::vector<double>& call_seconds() const { return call_seconds_; }
  // With timing: the host steady clock (SteadyNowNs) just before each timed call was issued (0 where
  // call_seconds() is -1), in KernelNames() order.
  const std::vector<int64_t>& call_start_ns() const { return call_start_ns_; }
  // The codegen estimates of each call's kernel (flops, bytes; 0 for copies), in KernelNames() order.
  struct CallCost {
    int64_t flops = 0;
    int64_t bytes = 0;
  };
  std::vector<CallCost> CallCosts() const;

  // Device graphs (JIT=2, tinygrad's graph batching). kOff: Run launches kernel by kernel. kDeviceDefault: each run
  // of consecutive kernels on one device whose graphs_by_default() (CUDA) is recorded as one device graph
  // (Device::CreateGraph) at the next Run and replayed by one GraphExec::Launch per Run; kOn: the same on every device
  // that implements CreateGraph (CPU and INTERP: a prebuilt launch list). Copies and devices without graphs stay
  // ungraphed. When an input's memory differs from the previous Run, only the items that use it are updated
  // (GraphExec::UpdateBuffers, cuGraphExecKernelNodeSetParams on CUDA); nothing is re-recorded.
  enum class GraphMode { kOff, kDeviceDefault, kOn };
  void SetGraphMode(GraphMode mode);
  int num_graphs() const { return static_cast<int>(graphs_.size()); }
  int64_t graph_updates() const { return graph_updates_; }  // items re-pointed at new buffers so far

  // The Variables the captured kernels take (a symbolic row count, Tensor::Rows), in first-use order, with their
  // current values (the captured ones until SetVars).
  const std::vector<VarArg>& variables() const { return variables_; }
  std::vector<int64_t> VariableValues() const;
  // New values for the following Runs: every Variable of the plan must be in `vals` and within its [min, max]
  // (InvalidArgument naming it otherwise, and nothing changes); other names are ignored. Device graphs holding old
  // values are rebuilt at the next Run.
  absl::Status SetVars(const absl::flat_hash_map<std::string, int64_t>& vals);

  // Whether the plan writes `mem` (an output or intermediate buffer; an input aliasing one must be copied first).
  bool Writes(const runtime::DeviceMemory& mem) const;
  int num_kernels() const { return num_kernels_; }
  // Constant calls: kernels that take no Variable and read only constant buffers (runtime::Buffer::constant(), an
  // ONNX model's weights) or the outputs of other constant calls. The first complete Run runs them; later Runs skip
  // them, their outputs (plan memory) keep the values; an output buffer that other calls also write (the scheduler
  // reuses intermediates' buffers) is replaced by memory of the constant call's own for the calls that read it. A
  // ResNet-50's conv weights repacked channels-last for the conv kernels (Tensor::Conv2d): 25.5M floats copied on
  // every inference.
  int num_constant_calls() const { return num_constant_; }
  // Per call (KernelNames() order): whether the last Run skipped it (a constant call after the first Run).
  const std::vector<bool>& SkippedInLastRun() const { return skipped_; }
 private:
  bool timed_ = false;
  std::vector<double> call_seconds_;
  std::vector<int64_t> call_start_ns_;

 public:
  int num_inputs() const { return num_inputs_; }
  // Names of the kernels in launch order (copies are "copy").
  std::vector<std::string> KernelNames() const;
  // The non-input buffers the plan holds for its lifetime (intermediates, outputs, and the already-realized
  // buffers it reads, such as weights).
  const std::vector<std::shared_ptr<runtime::Buffer>>& held_buffers() const {
    return held_buffers_;
  }
  // Bytes of the buffers Build allocated for the plan (intermediates and outputs; not the inputs, nor buffers that
  // had memory before, such as weights): what the plan itself costs while it lives.
  int64_t allocated_bytes() const { return allocated_bytes_; }
  // The estimate of one Run (checked against the current limits at every Run).
  const WorkEstimate& estimate() const { return estimate_; }

 private:
  struct Call {
    runtime::Program* program = nullptr;  // null for a copy
    uint32_t arg_begin = 0, arg_count = 0;
    uint32_t var_begin = 0, var_count = 0;
    runtime::LaunchDims dims;
    runtime::Device* dst_device = nullptr;  // copies: args_[arg_begin] <- args_[arg_begin + 1]
    runtime::Device* src_device = nullptr;
    runtime::Device* device = nullptr;  // kernels: the device that loaded `program`
    size_t copy_bytes = 0;
    std::string name;
    CallCost cost;  // kernels: codegen::Program's flops and mem_bytes
    realize_internal::LoadedKernel* kernel = nullptr;  // kernels: held by kernels_ (its VIZ record, LogIdForLaunch)
    bool constant = false;  // a constant call (num_constant_calls): skipped once constants_ready_
  };
  struct Patch {
    uint32_t arg;    // index into args_
    uint32_t input;  // index into Run's inputs
  };
  struct Graph {
    size_t first = 0, end = 0;                 // calls_[first, end)
    std::unique_ptr<runtime::GraphExec> exec;
    std::vector<runtime::DeviceMemory> bound;  // args_ of those calls as the graph last saw them
  };
  ExecPlan() = default;
  // Marks the constant calls (num_constant_calls); FailedPrecondition if a call writes a constant buffer.
  absl::Status FindConstantCalls(const std::vector<CapturedItem>& items,
                                 const absl::flat_hash_map<const UOp*, uint32_t>& input_slot,
                                 const absl::flat_hash_set<const UOp*>& allocated,
                                 const absl::flat_hash_set<const UOp*>& read_after);
  absl::Status BuildGraphs();
  absl::Status UpdateGraph(Graph& g);

  std::vector<Call> calls_;
  std::vector<runtime::DeviceMemory> args_;
  std::vector<int64_t> vars_;
  std::vector<uint32_t> var_of_;   // per vars_ entry: its index in variables_
  std::vector<VarArg> variables_;
  std::vector<Patch> patches_;
  std::vector<runtime::Device*> devices_;
  std::vector<const void*> written_;  // ptr or handle of every buffer the plan writes (sorted)
  std::vector<std::shared_ptr<realize_internal::LoadedKernel>> kernels_;
  std::vector<std::shared_ptr<runtime::Buffer>> held_buffers_;
  std::vector<UOpPtr> held_nodes_;    // non-input BUFFER nodes (keeps their memory attached)
  std::vector<const UOp*> volatile_;  // registered volatile while the plan lives
  std::vector<char> staging_;         // host staging for copies
  int num_kernels_ = 0;
  int num_inputs_ = 0;
  int num_constant_ = 0;
  bool constants_ready_ = false;  // a Run completed: the constant calls' outputs hold their values
  std::vector<bool> skipped_;       // per call: skipped by the last Run
  GraphMode graph_mode_ = GraphMode::kOff;
  bool graphs_built_ = false;
  std::vector<Graph> graphs_;
  std::vector<int> graph_at_;  // per call: the graph starting at it, or -1
  int64_t graph_updates_ = 0;
  int64_t allocated_bytes_ = 0;
  WorkEstimate estimate_;
};

// Allocates memory for a BUFFER node (or a view of one) if it has none. For the JIT's outputs after capture.
absl::Status EnsureAllocated(const UOpPtr& view);

}  // namespace kiln
