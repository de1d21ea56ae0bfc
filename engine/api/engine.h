// kiln::api::Engine: the facade the server links (DESIGN.md §2, engine/api). Everything crosses it
// as plain structs and absl::Status; no UOp, DType or device type appears in this header.
//
//   Engine::Create        registers the compiled-in backends once and picks a device
//                         ("" = CPU when compiled in, else INTERP).
//   Engine::Prepare       GraphSpec -> PreparedGraph: decoded ONCE (op names, dtypes and args parsed,
//                         the op allowlist and limits checked, src indices checked to point at earlier
//                         nodes, so cycles and dangling sources are impossible) and, for graphs whose
//                         input shapes are all static, built through the validating UOp::Create so
//                         shape and dtype errors surface here. Prepared graphs are cached by GraphKey
//                         (SHA-256 of the spec), so preparing the same spec twice returns one object.
//   Engine::Run           binds host tensors to the inputs and runs the graph through the engine's
//                         TraceCache, keyed by (graph, input signature): the first call of a
//                         signature builds the graph through UOp::Create and realizes every output
//                         (schedule -> codegen -> compile (cached) -> run), the second captures, later
//                         ones replay the captured kernels without scheduling (RunResult::schedules
//                         0; each launch still timed); a signature the JIT cannot capture runs eagerly. Copies
//                         the outputs back. Returns per-kernel timings and compile counts.
//                         Obeys RunOptions (below): limits checked before anything is allocated or
//                         launched, deadline and cancellation between kernels (eager or replayed).
//   Engine::Warm          one Run on zero-filled inputs (static shapes only): compiles ahead of traffic.
//                         Obeys the same RunOptions, the zero inputs' bytes included.
//   Engine::LoadBuiltin   a builtin architecture ("mnist_cnn", "mlp") with its weights from a
//                         safetensors file (names and shapes checked against the architecture).
//   Engine::CreateTrainer a training run of a builtin architecture under TinyJit (trainer.h).
//   Engine::LoadOnnx / RunOnnx   ONNX models (onnx_model.h), run under the same trace cache.
//   Engine::RunBuiltin    runs one batch through the model in eval mode under TinyJit: the engine's
//                         TraceCache keys a trace by (model, input signature), so the first two
//                         calls of a signature run and capture, later ones replay the captured
//                         kernels without scheduling (replayed launches are counted, not timed).
//
// Errors: INVALID_ARGUMENT (bad graph or inputs; the message names the field, e.g. "nodes[3].src[0]"),
// RESOURCE_EXHAUSTED (over a RunOptions limit: the message names the estimate and the limit; or out
// of memory), DEADLINE_EXCEEDED / CANCELLED (the run stopped between kernels), UNAVAILABLE (no
// device), INTERNAL (an engine failure). A bad request never aborts: no exception leaves an Engine
// method (one that escapes the engine becomes INTERNAL, std::bad_alloc RESOURCE_EXHAUSTED, logged).
// State: each Engine owns its RealizeContext (engine/realize/realize.h: realized-result memo,
// loaded-kernel cache, realize statistics), its prepared graphs and its trace cache; two engines in
// one process share none of them. Process-wide: device buffers, the compiled-binary cache (memory +
// disk) and the device registry. api::Model (model.h) puts every model kind behind one Run call.
// Thread safety: every method may be called from any thread; runs execute one at a time per Engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/api/graph_spec.h"
#include "engine/base/run_control.h"

namespace kiln::api {

struct EngineOptions {
  std::string device;  // "" = default ("CPU" when compiled in, else "INTERP")
  GraphLimits limits;
  size_t prepared_cache_entries = 256;          // prepared graphs kept by key (LRU) ...
  size_t prepared_cache_bytes = size_t{64} << 20;  // ... and their estimated bytes (0 = no byte bound)
  size_t jit_cache_entries = 64;                // builtin models' JIT traces (LRU) ...
  size_t jit_cache_bytes = size_t{512} << 20;   // ... and the bytes their plans allocated (0 = none)
};

// What bounds one run (Run, Warm, RunBuiltin). The engine estimates the run from its schedule
// (engine/realize/estimate.h: FLOPs, bytes moved, peak memory) and refuses it with
// RESOURCE_EXHAUSTED, naming the estimate and the limit, before it allocates or launches anything;
// a limit <= 0 is no limit. The deadline and the cancellation token are checked between kernels:
// a run past its deadline returns DEADLINE_EXCEEDED, a cancelled one CANCELLED (a kernel in flight
// finishes; the work limits are what bound a single kernel).
using CancellationToken = ::kiln::CancellationToken;
using MemoryBudget = ::kiln::MemoryBudget;

struct RunLimits {
  int64_t max_flops = kDefaultMaxRunFlops;
  int64_t max_bytes_moved = kDefaultMaxRunBytesMoved;
  // Peak bytes of one run: device buffers (inputs, intermediates, outputs) plus `output_copies`
  // host copies of the outputs.
  int64_t max_memory_bytes = kDefaultMaxRunMemoryBytes;
  int64_t max_output_bytes = 0;  // total bytes of the outputs (what a response carries); 0 = none
  int output_copies = 1;         // host copies of the outputs the caller holds at once (kilnd: 2)
};

struct RunOptions {
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<const CancellationToken> cancellation;  // null = not cancellable
  // For the request scheduler (higher first); carried to the engine, runs do not read it yet.
  int priority = 0;
  RunLimits limits;
  // Process-wide memory cap (not owned; null = none): the run reserves its estimated new bytes
  // against live device buffers plus other runs' reservations, or is refused.
  MemoryBudget* memory_budget = nullptr;
  // Time every kernel launch, JIT replays of builtin and ONNX models included (they are untimed
  // otherwise; kiln.v1 graph runs are always timed). For profiles (server/core/profiler.h): timing
  // a launch waits for it to finish, so it costs the overlap of consecutive launches.
  bool time_kernels = false;
  // What the run is for, in the VIZ kernel log (kilnd: the model's name); "" = the engine's own
  // name for the graph or model. Read only while VIZ is on.
  std::string label;
  // Record this run in the VIZ log as if VIZ=1 were set (kilnd: the request parameter kiln_viz):
  // the kernels it compiles, with their rewrite passes and BEAM candidates, and the launches of
  // kernels that were recorded when compiled. A kernel it only reuses (compiled earlier while
  // nothing was recorded) is not recorded. With VIZ=1 every run is recorded anyway.
  bool viz = false;
  // > 1: a symbolic batch dim (issue #20). Dim 0 of the inputs and outputs is a batch of at most `max_batch` rows: a
  // builtin or ONNX model runs a batch of n <= max_batch rows padded to max_batch rows with n bound as a Variable
  // (Tensor::Rows), so one captured trace serves every batch size (its kernels loop over n rows, taken at run time).
  // A model whose graph mixes rows (a reduce over the batch: Tensor::Rows refuses it) falls back for good to a trace
  // per batch size, as do batches over max_batch. kilnd sets it to the config's max_batch_size.
  int64_t max_batch = 0;
};

// A host tensor handed to Run; `data` is not owned and must outlive the call.
struct HostTensorView {
  std::string dtype;  // kiln dtype name
  std::vector<int64_t> shape;
  std::string_view data;  // little-endian, row-major, numel * itemsize bytes
};

struct HostTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;
};

struct KernelTiming {
  std::string name;    // generated kernel name (E_..., r_...)
  std::string device;
  uint64_t duration_ns = 0;
  bool timed = true;   // false: a JIT replay launch, duration unknown (0)
  bool compiled = false;  // this launch's kernel was compiled by this run
  int64_t start_ns = 0;   // timed launches: host steady clock (nanoseconds since its epoch, the
                          // clock of std::chrono::steady_clock) just before the launch; 0 = unknown
  int64_t flops = 0;      // the kernel's FLOPs and bytes moved as codegen estimates them
  int64_t bytes = 0;
};

struct RunResult {
  std::vector<HostTensor> outputs;    // in GraphSpec.outputs order
  std::vector<KernelTiming> kernels;  // one per launch, in launch order
  int kernels_compiled = 0;           // kernels lowered + compiled by this run (0 = all cached)
  uint64_t compile_ns = 0;
  uint64_t total_ns = 0;              // wall time of the run (build + realize + copies)
  // Schedules this run created (CreateSchedule calls): 0 for a JIT replay, which launches the
  // captured kernels without scheduling.
  int schedules = 0;
  // What the trace cache did ("run", "capture" or "replay"; "" = the run was eager) and whether the
  // signature's trace existed (a cache hit).
  std::string jit_event;
  bool jit_hit = false;
};

// Per (graph, kernel) counters, for ListKernels.
struct KernelStats {
  std::string graph_key;
  std::string name;
  std::string device;
  uint64_t launches = 0;
  uint64_t total_ns = 0;
  uint64_t compiles = 0;  // times this graph's runs compiled this kernel
};

// One bounded cache: current size, bounds and counters.
struct CacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;      // estimated bytes held
  int64_t max_entries = 0;
  int64_t max_bytes = 0;  // 0 = no byte bound
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
};

struct EngineStats {
  uint64_t prepares = 0;          // Prepare calls that decoded a new graph
  uint64_t prepare_hits = 0;      // Prepare calls answered from the prepared-graph cache
  CacheStats prepared;            // this engine's prepared graphs
  CacheStats traces;              // this engine's JIT traces (every model kind)
  CacheStats kernels;             // this engine's loaded kernels (its RealizeContext)
  CacheStats binaries;            // compiled binaries held in memory (process-wide compile cache)
  uint64_t runs = 0;
  uint64_t realizes = 0;          // Realize calls on this engine's context
  uint64_t schedules = 0;         // schedules created on this engine's context (JIT replays create none)
  uint64_t kernels_compiled = 0;  // over all runs
  uint64_t compile_ns = 0;        // over all runs
  // The builtin models' JIT trace cache (engine/jit TraceCache).
  int64_t jit_hits = 0;
  int64_t jit_misses = 0;
  int64_t jit_evictions = 0;
  int64_t jit_entries = 0;
  // Kernel search (process-wide; engine/realize/beam.h): kernels searched, choices read from the BEAM cache,
  // background searches queued or running, and the generation that moves on when those have drained.
  int64_t beam_searches = 0;
  int64_t beam_cache_hits = 0;
  int64_t beam_pending = 0;
  int64_t beam_generation = 0;
};

// Bytes held in device buffers, per device.
struct DeviceMemoryUsage {
  std::string device;
  uint64_t bytes = 0;
};

// A builtin architecture with its weights (Engine::LoadBuiltin). Immutable; shared between threads.
//   mnist_cnn  tinygrad's beautiful_mnist CNN (conv 5x5 x2, BatchNorm, pool, conv 3x3 x2, BatchNorm,
//              pool, Linear 576->10); input (N, 1, 28, 28) float32, output logits (N, 10).
//   mlp        Linear layers with ReLU between them, sizes from the weights
//              (layers.<i>.weight (out, in), layers.<i>.bias (out)); input (N, in), output (N, out).
class BuiltinModel {
 public:
  ~BuiltinModel();
  const std::string& architecture() const;
  const std::vector<int64_t>& input_shape() const;   // one item, batch dim excluded
  const std::vector<int64_t>& output_shape() const;  // one item, batch dim excluded
  const std::string& dtype() const;                  // of input and output: "float32"
  int64_t num_parameters() const;                    // elements over every state tensor
  const std::string& device() const;                 // the engine device its weights live on
  // Bytes of device memory this model keeps alive: its weights plus the buffers its JIT traces
  // captured (intermediates, outputs, random keys), each buffer counted once. Grows when a new
  // input signature is captured; waits for a running call of the model's traces to finish.
  uint64_t device_bytes() const;

  struct Impl;
  explicit BuiltinModel(std::unique_ptr<Impl> impl);
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Cache bounds (kilnd flags; call at start-up, before creating engines). Loaded kernels: the bounds of
// every engine's kernel cache created from now on, entries >= 1 and bytes (0 = no byte bound);
// compiled binaries kept in memory (process-wide): bytes (the disk cache is unbounded by this).
void ConfigureProcessCaches(size_t kernel_entries, size_t kernel_bytes, size_t binary_bytes);

// Kernel search for the whole process (kilnd --beam; tinygrad BEAM=n, engine/realize/beam.h): every kernel compiled
// from now on takes its opts from the BEAM cache; one not there runs with the heuristic's opts while a background
// thread searches it with this beam width and stores the choice in the disk cache, and the next runs swap the tuned
// kernels in (whole JIT traces at a time). 0 = the hand-coded heuristic. Call at start-up.
void ConfigureKernelSearch(int beam_width);

// The architectures LoadBuiltin knows.
std::vector<std::string> BuiltinArchitectures();

class Engine;
class OnnxModel;              // onnx_model.h
struct NamedHostTensorView;   // onnx_model.h
class Trainer;        // trainer.h
struct TrainerSpec;   // trainer.h

// A validated, decoded graph. Immutable except for its counters; shared between threads.
class PreparedGraph {
 public:
  ~PreparedGraph();
  const std::string& key() const;  // hex GraphKey of the spec
  const GraphSpec& spec() const;
  int num_inputs() const;
  // Estimated bytes this object holds (the spec and its decoded form): what caches count.
  int64_t bytes() const;
  // Counters of this graph's runs.
  uint64_t runs() const;
  uint64_t kernels_compiled() const;
  std::vector<KernelStats> Kernels() const;

  struct Impl;
  explicit PreparedGraph(std::unique_ptr<Impl> impl);
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// The structural key of a spec (hex SHA-256 over every field, length-prefixed).
std::string GraphKey(const GraphSpec& spec);

// Whether an op name may appear in a GraphSpec ("INPUT", "CONST", ALU, CAST, movement,
// REDUCE_AXIS, CONTIGUOUS).
bool IsAllowedOp(std::string_view op);

// Bytes per element of a kiln dtype name; 0 if unknown.
int64_t DTypeItemSize(std::string_view dtype);

// The canonical name of a device spec, as the registry and DevicePool name devices: kinds upper
// case, a bare accelerator kind is its index 0 ("cl" -> "CL:0", "CUDA" -> "CUDA:0"), "CPU:0" ->
// "CPU"; "CPU", "INTERP" and "NULL" stay bare. INVALID_ARGUMENT for a malformed spec. Does not
// check that the device exists.
absl::StatusOr<std::string> CanonicalDeviceName(std::string_view spec);

// The devices this machine has, as engine/runtime's DevicePool discovers them at start ("CPU", "CL:0",
// "CUDA:0", ...; registers the compiled-in backends first). For `kilnd --list-devices`.
std::vector<std::string> ListDevices();

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(EngineOptions options = {});
  ~Engine();

  const std::string& device() const;
  const GraphLimits& limits() const;

  absl::StatusOr<std::shared_ptr<const PreparedGraph>> Prepare(const GraphSpec& spec);
  absl::StatusOr<RunResult> Run(const PreparedGraph& graph, absl::Span<const HostTensorView> inputs,
                                const RunOptions& options = {});
  absl::StatusOr<RunResult> Warm(const PreparedGraph& graph, const RunOptions& options = {});

  // NOT_FOUND: the weights file is missing; INVALID_ARGUMENT: unknown architecture, or the file
  // is not safetensors or does not match the architecture (names the tensor and the shapes).
  absl::StatusOr<std::shared_ptr<const BuiltinModel>> LoadBuiltin(const std::string& architecture,
                                                                  const std::string& weights_path);
  // `input`: float32, shape (N, *model.input_shape()) with N >= 1. Output "output" (N, *output_shape).
  absl::StatusOr<RunResult> RunBuiltin(const BuiltinModel& model, const HostTensorView& input,
                                       const RunOptions& options = {});

  // ONNX models (onnx_model.h): load model.onnx (external data beside it), run by input name.
  absl::StatusOr<std::shared_ptr<const OnnxModel>> LoadOnnx(const std::string& path);
  absl::StatusOr<RunResult> RunOnnx(const OnnxModel& model, absl::Span<const NamedHostTensorView> inputs,
                                    const RunOptions& options = {});

  // A training run of a builtin architecture (trainer.h). INVALID_ARGUMENT names the bad field
  // (architecture, mlp_sizes, optimizer.*, init_weights).
  absl::StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const TrainerSpec& spec);

  // Bytes held in device buffers on this engine's device (every owner's, not only this engine's).
  std::vector<DeviceMemoryUsage> DeviceMemory() const;

  EngineStats stats() const;

  struct State;  // engine_state.h

 private:
  explicit Engine(std::unique_ptr<State> state);
  absl::StatusOr<RunResult> RunOnnxUnguarded(const OnnxModel& model,
                                             absl::Span<const NamedHostTensorView> inputs,
                                             const RunOptions& options);
  std::unique_ptr<State> state_;
};

}  // namespace kiln::api
