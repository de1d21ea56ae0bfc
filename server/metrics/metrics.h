// Metrics: kilnd's Prometheus registry and exposer (prometheus-cpp), fed by server/core through
// InferObserver. Families (DESIGN.md §4):
//   kiln_request_duration_seconds   histogram {model, protocol, code}   every Infer
//   kiln_kernel_duration_seconds    histogram {device, model, kernel}   every timed kernel launch;
//                                   kernel = KernelLabel (position in the run + the name's shape
//                                   class), so a model's series do not grow with new batch sizes;
//                                   model="" for kiln.v1 graph runs; at most kMaxKernelLabels
//                                   series, later ones share model="", kernel="other"
//   kiln_kernel_launches_total      counter   {device}        every launch, JIT replays included
//                                   (replayed launches are not timed, so they add no histogram sample)
//   kiln_compile_duration_seconds   histogram {device}          per run that compiled kernels
//   kiln_jit_cache_hits_total, kiln_jit_cache_misses_total, kiln_jit_cache_evictions_total
//                                   counters  {device}          the builtin models' trace cache
//   kiln_jit_traces_created_total   counter   {model}           trace-cache misses per model: a new trace
//                                   (input signature); with a symbolic batch dim one serves every batch size
//   kiln_kernels_compiled_total     counter   {model}           kernels lowered and compiled by the model's runs
//   kiln_beam_searches_total        counter   {}                kernels searched by BEAM (--beam)
//   kiln_beam_pending               gauge     {}                background searches queued or running
//   kiln_beam_generation            gauge     {}                moves on when they drain (tuned kernels swap in)
//                                   (these three after each engine run)
//   kiln_queue_duration_seconds     histogram {model, version}  arrival to execution start
//   kiln_cache_entries, kiln_cache_bytes, kiln_cache_max_bytes
//                                   gauges    {cache, device}   the bounded engine caches after each
//                                   run: cache="prepared_graphs" and "jit_traces" per device engine,
//                                   "kernels" and "binaries" process-wide (device="all")
//   kiln_cache_evictions_total      counter   {cache, device}   entries evicted by the bounds
//   kiln_device_memory_bytes        gauge     {device}          bytes in device buffers, every
//                                   device with an engine (set at load/unload and after each run)
//   kiln_model_memory_bytes         gauge     {model, version, device}  device bytes a loaded
//                                   version holds (weights + JIT-captured buffers; 0 for kiln_graph);
//                                   the series goes away when the version is unloaded
//   nv_inference_request_success    counter   {model, version}           Triton's names and labels
//   nv_inference_request_failure    counter   {model, version, reason}   (reason REJECTED: full
//                                   queue or queue timeout; CANCELED; BACKEND; OTHER)
//   nv_inference_count              counter   {model, version}           batch elements
//   nv_inference_exec_count         counter   {model, version}   executions: a dynamic batch
//                                   counts once, so request_success / exec_count is the batching ratio
//   kiln_inference_batch_size       histogram {model, version}   rows of each execution
//   kiln_inference_dropped_total    counter   {model, version, reason}  requests dropped from the
//                                   queue unexecuted: reason cancelled, deadline or timeout
//   nv_inference_request_duration_us, nv_inference_queue_duration_us,
//   nv_inference_compute_input_duration_us, nv_inference_compute_infer_duration_us,
//   nv_inference_compute_output_duration_us  counters {model, version} (successful requests)
//   nv_cpu_utilization                       gauge  host CPU busy fraction (0..1) since the
//                                            previous scrape, from /proc/stat
//   nv_cpu_memory_total_bytes, nv_cpu_memory_used_bytes  gauges  host memory, from /proc/meminfo
//                                            (used = MemTotal - MemAvailable)
//   kiln_auth_refusals_total                 counter {reason}: unauthenticated, permission, rate,
//                                            concurrency (API keys and per-key limits)
//   nv_inference_pending_request_count       gauge {model, version}: queued, not yet executing
//   kiln_training_steps_total                counter {job}  training steps completed
//   kiln_training_loss                       gauge   {job}  loss of the job's last step
//   kiln_training_examples_per_second        gauge   {job}  smoothed training throughput
//   (each training family has a job="" series at 0 from the start, so dashboards have data)
//   kiln_llm_time_to_first_token_seconds     histogram {model, version}  kiln_llm generations
//   kiln_llm_inter_token_latency_seconds     histogram {model, version}  gaps between tokens
//   kiln_llm_prompt_tokens_total, kiln_llm_generated_tokens_total  counters {model, version}
//                                            (rate(kiln_llm_generated_tokens_total) is tokens/s)
//   kiln_llm_generations_total               counter {model, version, route, reason}
//   kiln_llm_kv_slots, kiln_llm_kv_slots_used, kiln_llm_queued_generations  gauges {model, version}:
//                                            KV-cache occupancy, set as generations start and end
// Requests that named no known model are counted in kiln_request_duration_seconds with
// model="" only (so client-chosen names never become labels).
// Thread safety: Observe* may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/core/auth.h"
#include "server/core/job_manager.h"
#include "server/core/observer.h"
#include "server/metrics/host_metrics.h"

namespace kiln::server {

inline constexpr size_t kMaxKernelLabels = 256;

// The kernel label of the launch at `position` in a run: "<position>:<name with every run of
// digits replaced by n>", e.g. 3:r_n_n_n for r_64_10_4_4. Kernel names carry their shapes (the
// batch size among them); the label keeps the kernel's kind and place in the model's run.
std::string KernelLabel(size_t position, std::string_view name);

class Metrics final : public InferObserver, public TrainingObserver {
 public:
  // Serves /metrics on address:port (0 = a free port; negative = no HTTP exposer, the registry
  // still counts). UNAVAILABLE if the port cannot be bound.
  // With `auth` holding API keys, /metrics needs HTTP basic auth whose password is a key with the
  // metrics role (Prometheus: basic_auth { password: KEY }); the user name is not checked.
  static absl::StatusOr<std::unique_ptr<Metrics>> Start(const std::string& address, int port,
                                                        const Authenticator* auth = nullptr);
  ~Metrics() override;

  int port() const { return port_; }
  void ObserveInfer(const InferObservation& observation) override;
  void ObserveKernels(const std::string& model, absl::Span<const api::KernelTiming> kernels) override;
  void ObserveEngineRun(const EngineRunObservation& observation) override;
  void ObservePending(const std::string& model, const std::string& version, int delta) override;
  void ObserveModels(absl::Span<const ModelMemoryObservation> loaded,
                     absl::Span<const api::DeviceMemoryUsage> devices) override;
  void ObserveModelMemory(const ModelMemoryObservation& memory) override;
  void ObserveTrainingStep(const std::string& job, double loss,
                           double examples_per_second) override;
  void ObserveGeneration(const GenerationObservation& generation) override;
  void ObserveLlmOccupancy(const LlmOccupancy& occupancy) override;

 private:
  Metrics();

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<HostMetrics> host_;  // nv_cpu_* families, computed per scrape
  std::shared_ptr<AuthMetrics> auth_metrics_;  // kiln_auth_refusals_total, when an Authenticator is given
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  prometheus::Family<prometheus::Histogram>* request_duration_;
  prometheus::Family<prometheus::Histogram>* kernel_duration_;
  prometheus::Family<prometheus::Counter>* kernel_launches_;
  prometheus::Family<prometheus::Counter>* success_;
  prometheus::Family<prometheus::Counter>* failure_;
  prometheus::Family<prometheus::Counter>* inference_count_;
  prometheus::Family<prometheus::Counter>* exec_count_;
  prometheus::Family<prometheus::Histogram>* batch_size_;
  prometheus::Family<prometheus::Counter>* dropped_;
  prometheus::Family<prometheus::Counter>* request_us_;
  prometheus::Family<prometheus::Counter>* queue_us_;
  prometheus::Family<prometheus::Counter>* compute_input_us_;
  prometheus::Family<prometheus::Counter>* compute_us_;
  prometheus::Family<prometheus::Counter>* compute_output_us_;
  prometheus::Family<prometheus::Gauge>* pending_;
  prometheus::Family<prometheus::Counter>* cache_hits_;
  prometheus::Family<prometheus::Counter>* cache_misses_;
  prometheus::Family<prometheus::Counter>* cache_hit_us_;
  prometheus::Family<prometheus::Counter>* cache_miss_us_;
  prometheus::Family<prometheus::Histogram>* compile_duration_;
  prometheus::Family<prometheus::Counter>* jit_hits_;
  prometheus::Family<prometheus::Counter>* jit_misses_;
  prometheus::Family<prometheus::Counter>* jit_traces_created_;
  prometheus::Family<prometheus::Counter>* kernels_compiled_;
  prometheus::Family<prometheus::Counter>* jit_evictions_;
  prometheus::Family<prometheus::Counter>* beam_searches_;
  prometheus::Family<prometheus::Gauge>* beam_pending_;
  prometheus::Family<prometheus::Gauge>* beam_generation_;
  int64_t seen_beam_searches_ ABSL_GUARDED_BY(mu_) = 0;
  prometheus::Family<prometheus::Histogram>* queue_duration_;
  prometheus::Family<prometheus::Gauge>* device_memory_;
  prometheus::Family<prometheus::Gauge>* cache_entries_;
  prometheus::Family<prometheus::Gauge>* cache_bytes_;
  prometheus::Family<prometheus::Gauge>* cache_max_bytes_;
  prometheus::Family<prometheus::Counter>* cache_evictions_;
  prometheus::Family<prometheus::Gauge>* model_memory_;
  prometheus::Family<prometheus::Counter>* training_steps_;
  prometheus::Family<prometheus::Gauge>* training_loss_;
  prometheus::Family<prometheus::Gauge>* training_examples_per_second_;
  prometheus::Family<prometheus::Histogram>* llm_first_token_;
  prometheus::Family<prometheus::Histogram>* llm_inter_token_;
  prometheus::Family<prometheus::Counter>* llm_prompt_tokens_;
  prometheus::Family<prometheus::Counter>* llm_generated_tokens_;
  prometheus::Family<prometheus::Counter>* llm_generations_;
  prometheus::Family<prometheus::Gauge>* llm_slots_;
  prometheus::Family<prometheus::Gauge>* llm_slots_used_;
  prometheus::Family<prometheus::Gauge>* llm_queued_;

  absl::Mutex mu_;
  // kiln_kernel_duration_seconds series by (device, model, kernel label).
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Histogram*> kernel_series_
      ABSL_GUARDED_BY(mu_);
  // Evictions last reported per (cache, device), to turn cumulative counts into increments.
  std::map<std::pair<std::string, std::string>, int64_t> seen_evictions_ ABSL_GUARDED_BY(mu_);
  // kiln_model_memory_bytes series of the loaded versions, by (model, version, device).
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Gauge*> model_series_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
