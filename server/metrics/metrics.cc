#include "server/metrics/metrics.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

prometheus::Histogram::BucketBoundaries BatchBuckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
}

prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1, 5, 10};
}

// Time to first token and inter-token latency of LLM generations: 1 ms .. 60 s.
prometheus::Histogram::BucketBoundaries TokenBuckets() {
  return {1e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::string CodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()), host_(std::make_shared<HostMetrics>()) {
  using prometheus::BuildCounter;
  using prometheus::BuildHistogram;
  request_duration_ = &BuildHistogram()
                           .Name("kiln_request_duration_seconds")
                           .Help("Inference request latency by model, protocol and status code")
                           .Register(*registry_);
  kernel_duration_ = &BuildHistogram()
                          .Name("kiln_kernel_duration_seconds")
                          .Help("Kernel execution time by device and kernel")
                          .Register(*registry_);
  cache_entries_ = &prometheus::BuildGauge()
                        .Name("kiln_cache_entries")
                        .Help("Entries held by a bounded engine cache")
                        .Register(*registry_);
  cache_bytes_ = &prometheus::BuildGauge()
                      .Name("kiln_cache_bytes")
                      .Help("Estimated bytes held by a bounded engine cache")
                      .Register(*registry_);
  cache_max_bytes_ = &prometheus::BuildGauge()
                          .Name("kiln_cache_max_bytes")
                          .Help("Byte bound of an engine cache (0 = entries bound only)")
                          .Register(*registry_);
  cache_evictions_ = &BuildCounter()
                          .Name("kiln_cache_evictions_total")
                          .Help("Entries evicted from a bounded engine cache")
                          .Register(*registry_);
  kernel_launches_ = &BuildCounter()
                          .Name("kiln_kernel_launches_total")
                          .Help("Kernel launches by device")
                          .Register(*registry_);
  success_ = &BuildCounter()
                  .Name("nv_inference_request_success")
                  .Help("Number of successful inference requests, all batch sizes")
                  .Register(*registry_);
  failure_ = &BuildCounter()
                  .Name("nv_inference_request_failure")
                  .Help("Number of failed inference requests, all batch sizes")
                  .Register(*registry_);
  inference_count_ = &BuildCounter()
                          .Name("nv_inference_count")
                          .Help("Number of inferences performed (batch elements)")
                          .Register(*registry_);
  exec_count_ = &BuildCounter()
                     .Name("nv_inference_exec_count")
                     .Help("Number of model executions performed")
                     .Register(*registry_);
  batch_size_ = &BuildHistogram()
                     .Name("kiln_inference_batch_size")
                     .Help("Rows (summed batch dims) of each model execution")
                     .Register(*registry_);
  dropped_ = &BuildCounter()
                  .Name("kiln_inference_dropped_total")
                  .Help("Requests dropped from the queue without running (cancelled, deadline, timeout)")
                  .Register(*registry_);
  request_us_ = &BuildCounter()
                     .Name("nv_inference_request_duration_us")
                     .Help("Cumulative inference request duration in microseconds")
                     .Register(*registry_);
  queue_us_ = &BuildCounter()
                   .Name("nv_inference_queue_duration_us")
                   .Help("Cumulative inference queuing duration in microseconds")
                   .Register(*registry_);
  compute_input_us_ = &BuildCounter()
                           .Name("nv_inference_compute_input_duration_us")
                           .Help("Cumulative compute input duration in microseconds")
                           .Register(*registry_);
  compute_output_us_ = &BuildCounter()
                            .Name("nv_inference_compute_output_duration_us")
                            .Help("Cumulative compute output duration in microseconds")
                            .Register(*registry_);
  compute_us_ = &BuildCounter()
                     .Name("nv_inference_compute_infer_duration_us")
                     .Help("Cumulative compute inference duration in microseconds")
                     .Register(*registry_);
  pending_ = &prometheus::BuildGauge()
                  .Name("nv_inference_pending_request_count")
                  .Help("Instantaneous number of pending requests awaiting execution per-model.")
                  .Register(*registry_);
  cache_hits_ = &BuildCounter()
                     .Name("nv_cache_num_hits_per_model")
                     .Help("Number of response cache hits per model")
                     .Register(*registry_);
  cache_misses_ = &BuildCounter()
                       .Name("nv_cache_num_misses_per_model")
                       .Help("Number of response cache misses per model")
                       .Register(*registry_);
  cache_hit_us_ = &BuildCounter()
                       .Name("nv_cache_hit_duration_per_model")
                       .Help("Total cache hit duration per model, in microseconds")
                       .Register(*registry_);
  cache_miss_us_ = &BuildCounter()
                        .Name("nv_cache_miss_duration_per_model")
                        .Help("Total cache miss (insert + lookup) duration per model, in microseconds")
                        .Register(*registry_);
  compile_duration_ = &BuildHistogram()
                           .Name("kiln_compile_duration_seconds")
                           .Help("Kernel lowering and compile time per engine run that compiled")
                           .Register(*registry_);
  jit_hits_ = &BuildCounter()
                   .Name("kiln_jit_cache_hits_total")
                   .Help("JIT trace cache lookups that found a trace for the input signature")
                   .Register(*registry_);
  jit_misses_ = &BuildCounter()
                     .Name("kiln_jit_cache_misses_total")
                     .Help("JIT trace cache lookups that created a new trace")
                     .Register(*registry_);
  jit_traces_created_ = &BuildCounter()
                            .Name("kiln_jit_traces_created_total")
                            .Help("JIT traces created per model (a new input signature; a symbolic batch dim "
                                  "makes one serve every batch size)")
                            .Register(*registry_);
  kernels_compiled_ = &BuildCounter()
                           .Name("kiln_kernels_compiled_total")
                           .Help("Kernels lowered and compiled by a model's runs")
                           .Register(*registry_);
  jit_evictions_ = &BuildCounter()
                        .Name("kiln_jit_cache_evictions_total")
                        .Help("JIT traces evicted from the trace cache (LRU)")
                        .Register(*registry_);
  beam_searches_ = &BuildCounter()
                       .Name("kiln_beam_searches_total")
                       .Help("Kernels searched by BEAM (kilnd --beam), in the background or not")
                       .Register(*registry_);
  beam_pending_ = &prometheus::BuildGauge()
                       .Name("kiln_beam_pending")
                       .Help("BEAM searches queued or running in the background")
                       .Register(*registry_);
  beam_generation_ = &prometheus::BuildGauge()
                          .Name("kiln_beam_generation")
                          .Help("Moves on each time the background BEAM searches drain; the next runs use the tuned "
                                "kernels")
                          .Register(*registry_);
  queue_duration_ = &BuildHistogram()
                         .Name("kiln_queue_duration_seconds")
                         .Help("Time from request arrival to execution start")
                         .Register(*registry_);
  device_memory_ = &prometheus::BuildGauge()
                        .Name("kiln_device_memory_bytes")
                        .Help("Bytes held in device buffers")
                        .Register(*registry_);
  model_memory_ = &prometheus::BuildGauge()
                       .Name("kiln_model_memory_bytes")
                       .Help("Bytes of device buffers a loaded model version holds")
                       .Register(*registry_);
  training_steps_ = &BuildCounter()
                         .Name("kiln_training_steps_total")
                         .Help("Training steps completed, per job")
                         .Register(*registry_);
  training_loss_ = &prometheus::BuildGauge()
                        .Name("kiln_training_loss")
                        .Help("Loss of the job's most recent training step")
                        .Register(*registry_);
  training_examples_per_second_ = &prometheus::BuildGauge()
                                       .Name("kiln_training_examples_per_second")
                                       .Help("Training throughput of the job (smoothed)")
                                       .Register(*registry_);
  llm_first_token_ = &BuildHistogram()
                          .Name("kiln_llm_time_to_first_token_seconds")
                          .Help("Arrival of a generation request to its first token, per kiln_llm model")
                          .Register(*registry_);
  llm_inter_token_ = &BuildHistogram()
                          .Name("kiln_llm_inter_token_latency_seconds")
                          .Help("Time between successive tokens of a generation, per kiln_llm model")
                          .Register(*registry_);
  llm_prompt_tokens_ = &BuildCounter()
                            .Name("kiln_llm_prompt_tokens_total")
                            .Help("Prompt tokens of finished generations")
                            .Register(*registry_);
  llm_generated_tokens_ = &BuildCounter()
                               .Name("kiln_llm_generated_tokens_total")
                               .Help("Tokens generated (rate() of it is tokens/s)")
                               .Register(*registry_);
  llm_generations_ = &BuildCounter()
                          .Name("kiln_llm_generations_total")
                          .Help("Finished generations by route and finish reason (stop, length, cancelled, error)")
                          .Register(*registry_);
  llm_slots_ = &prometheus::BuildGauge()
                    .Name("kiln_llm_kv_slots")
                    .Help("KV-cache slots (concurrent generations) of a kiln_llm model")
                    .Register(*registry_);
  llm_slots_used_ = &prometheus::BuildGauge()
                         .Name("kiln_llm_kv_slots_used")
                         .Help("KV-cache slots holding a generation")
                         .Register(*registry_);
  llm_queued_ = &prometheus::BuildGauge()
                     .Name("kiln_llm_queued_generations")
                     .Help("Generations waiting for a KV-cache slot")
                     .Register(*registry_);
  // The JIT cache counters of the default device at 0 from the start, so a dashboard's hit rate
  // has series before the first kiln_builtin request (more devices appear on first use).
  for (prometheus::Family<prometheus::Counter>* f : {jit_hits_, jit_misses_, jit_evictions_}) f->Add({{"device", "CPU"}});
  // A job="" series at 0 from the start, so the training panels have data before any job runs.
  training_steps_->Add({{"job", ""}});
  training_loss_->Add({{"job", ""}}).Set(0);
  training_examples_per_second_->Add({{"job", ""}}).Set(0);
}

Metrics::~Metrics() = default;

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Start(const std::string& address, int port,
                                                        const Authenticator* auth) {
  std::unique_ptr<Metrics> m(new Metrics());
  if (port >= 0) {
    try {  // prometheus-cpp reports bind failures by throwing; nothing escapes this function
      m->exposer_ = std::make_unique<prometheus::Exposer>(absl::StrCat(address, ":", port));
    } catch (const std::exception&) {
      return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", address, ":", port));
    }
    if (auth != nullptr && auth->keys_enabled()) {
      m->exposer_->RegisterAuth(
          [auth](const std::string&, const std::string& password) {
            return (auth->RolesOf(password) & static_cast<uint8_t>(Role::kMetrics)) != 0;
          },
          "kilnd");
    }
    m->exposer_->RegisterCollectable(m->registry_);
    m->exposer_->RegisterCollectable(m->host_);
    if (auth != nullptr) {
      m->auth_metrics_ = std::make_shared<AuthMetrics>(auth);
      m->exposer_->RegisterCollectable(m->auth_metrics_);
    }
    auto ports = m->exposer_->GetListeningPorts();
    m->port_ = ports.empty() ? port : ports.front();
  }
  return m;
}

void Metrics::ObserveInfer(const InferObservation& o) {
  const double seconds = static_cast<double>(o.duration_ns) * 1e-9;
  request_duration_
      ->Add({{"model", o.model}, {"protocol", o.protocol}, {"code", CodeName(o.code)}},
            SecondsBuckets())
      .Observe(seconds);
  if (!o.reached_model) return;
  const std::map<std::string, std::string> labels = {{"model", o.model}, {"version", o.version}};
  if (o.cache_hit || o.cache_miss) {  // Triton's nv_cache_* (cumulative microseconds)
    (o.cache_hit ? cache_hits_ : cache_misses_)->Add(labels).Increment();
    (o.cache_hit ? cache_hit_us_ : cache_miss_us_)->Add(labels).Increment(static_cast<double>(o.cache_ns / 1000));
  }
  if (o.code == absl::StatusCode::kOk && o.cache_hit) {  // no inference, no execution
    success_->Add(labels).Increment();
    request_us_->Add(labels).Increment(static_cast<double>(o.duration_ns / 1000));
  } else if (o.code == absl::StatusCode::kOk) {
    success_->Add(labels).Increment();
    inference_count_->Add(labels).Increment(static_cast<double>(o.batch_size));
    if (o.executed_rows > 0) {  // the one request of its execution that reports it
      exec_count_->Add(labels).Increment();
      batch_size_->Add(labels, BatchBuckets()).Observe(static_cast<double>(o.executed_rows));
    }
    request_us_->Add(labels).Increment(static_cast<double>(o.duration_ns / 1000));
    queue_us_->Add(labels).Increment(static_cast<double>(o.queue_ns / 1000));
    compute_input_us_->Add(labels).Increment(static_cast<double>(o.compute_input_ns / 1000));
    compute_us_->Add(labels).Increment(static_cast<double>(o.compute_infer_ns / 1000));
    compute_output_us_->Add(labels).Increment(static_cast<double>(o.compute_output_ns / 1000));
    queue_duration_->Add(labels, SecondsBuckets()).Observe(static_cast<double>(o.queue_ns) * 1e-9);
  } else {
    const char* reason = o.rejected                                ? "REJECTED"
                         : o.code == absl::StatusCode::kCancelled ? "CANCELED"
                         : o.engine_failure                       ? "BACKEND"
                                                                  : "OTHER";
    if (o.dropped) {
      const char* why = o.code == absl::StatusCode::kCancelled          ? "cancelled"
                        : o.code == absl::StatusCode::kDeadlineExceeded ? "deadline"
                                                                        : "timeout";
      dropped_->Add({{"model", o.model}, {"version", o.version}, {"reason", why}}).Increment();
    }
    failure_->Add({{"model", o.model}, {"version", o.version}, {"reason", reason}}).Increment();
  }
}

void Metrics::ObserveEngineRun(const EngineRunObservation& o) {
  for (const api::DeviceMemoryUsage& m : o.device_memory) {
    device_memory_->Add({{"device", m.device}}).Set(static_cast<double>(m.bytes));
  }
  if (!o.device.empty()) {
    const std::pair<const char*, const api::CacheStats*> caches[] = {
        {"prepared_graphs", &o.engine.prepared},
        {"jit_traces", &o.engine.traces},
        {"kernels", &o.engine.kernels},
        {"binaries", &o.engine.binaries}};
    absl::MutexLock l(&mu_);
    for (const auto& [name, c] : caches) {
      const bool per_device = c == &o.engine.prepared || c == &o.engine.traces;
      const prometheus::Labels labels{{"cache", name}, {"device", per_device ? o.device : "all"}};
      cache_entries_->Add(labels).Set(static_cast<double>(c->entries));
      cache_bytes_->Add(labels).Set(static_cast<double>(c->bytes));
      cache_max_bytes_->Add(labels).Set(static_cast<double>(c->max_bytes));
      int64_t& seen = seen_evictions_[{name, labels.at("device")}];
      prometheus::Counter& evictions = cache_evictions_->Add(labels);
      if (c->evictions > seen) evictions.Increment(static_cast<double>(c->evictions - seen));
      seen = std::max(seen, c->evictions);
    }
    prometheus::Counter& searches = beam_searches_->Add({});
    if (o.engine.beam_searches > seen_beam_searches_)
      searches.Increment(static_cast<double>(o.engine.beam_searches - seen_beam_searches_));
    seen_beam_searches_ = std::max(seen_beam_searches_, o.engine.beam_searches);
    beam_pending_->Add({}).Set(static_cast<double>(o.engine.beam_pending));
    beam_generation_->Add({}).Set(static_cast<double>(o.engine.beam_generation));
  }
  const std::string device = o.device_memory.empty() ? "" : o.device_memory.front().device;
  if (o.kernels_compiled > 0) {
    compile_duration_->Add({{"device", device}}, SecondsBuckets())
        .Observe(static_cast<double>(o.compile_ns) * 1e-9);
  }
  if (o.jit) (o.jit_hit ? jit_hits_ : jit_misses_)->Add({{"device", device}}).Increment();
  if (!o.model.empty()) {
    if (o.jit && !o.jit_hit) jit_traces_created_->Add({{"model", o.model}}).Increment();
    if (o.kernels_compiled > 0)
      kernels_compiled_->Add({{"model", o.model}}).Increment(static_cast<double>(o.kernels_compiled));
  }
  if (o.jit_evictions > 0) {
    jit_evictions_->Add({{"device", device}}).Increment(static_cast<double>(o.jit_evictions));
  }
}

void Metrics::ObservePending(const std::string& model, const std::string& version, int delta) {
  pending_->Add({{"model", model}, {"version", version}}).Increment(delta);
}

void Metrics::ObserveModels(absl::Span<const ModelMemoryObservation> loaded,
                            absl::Span<const api::DeviceMemoryUsage> devices) {
  for (const api::DeviceMemoryUsage& m : devices) {
    device_memory_->Add({{"device", m.device}}).Set(static_cast<double>(m.bytes));
  }
  absl::MutexLock l(&mu_);
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Gauge*> next;
  for (const ModelMemoryObservation& m : loaded) {
    auto key = std::make_tuple(m.model, m.version, m.device);
    auto it = model_series_.find(key);
    prometheus::Gauge* g =
        it != model_series_.end()
            ? it->second
            : &model_memory_->Add(
                  {{"model", m.model}, {"version", m.version}, {"device", m.device}});
    g->Set(static_cast<double>(m.bytes));
    next.emplace(std::move(key), g);
  }
  for (const auto& [key, g] : model_series_) {
    if (!next.contains(key)) model_memory_->Remove(g);
  }
  model_series_ = std::move(next);
}

void Metrics::ObserveModelMemory(const ModelMemoryObservation& m) {
  absl::MutexLock l(&mu_);
  auto it = model_series_.find(std::make_tuple(m.model, m.version, m.device));
  if (it != model_series_.end()) it->second->Set(static_cast<double>(m.bytes));
}

void Metrics::ObserveGeneration(const GenerationObservation& g) {
  const prometheus::Labels labels = {{"model", g.model}, {"version", g.version}};
  if (g.completion_tokens > 0 && g.first_token_ns > 0) {
    llm_first_token_->Add(labels, TokenBuckets()).Observe(static_cast<double>(g.first_token_ns) * 1e-9);
  }
  prometheus::Histogram& gaps = llm_inter_token_->Add(labels, TokenBuckets());
  for (uint64_t ns : g.inter_token_ns) gaps.Observe(static_cast<double>(ns) * 1e-9);
  llm_prompt_tokens_->Add(labels).Increment(static_cast<double>(g.prompt_tokens));
  llm_generated_tokens_->Add(labels).Increment(static_cast<double>(g.completion_tokens));
  llm_generations_->Add({{"model", g.model}, {"version", g.version}, {"route", g.route}, {"reason", g.finish_reason}})
      .Increment();
}

void Metrics::ObserveLlmOccupancy(const LlmOccupancy& o) {
  const prometheus::Labels labels = {{"model", o.model}, {"version", o.version}};
  llm_slots_->Add(labels).Set(static_cast<double>(o.slots));
  llm_slots_used_->Add(labels).Set(static_cast<double>(o.active));
  llm_queued_->Add(labels).Set(static_cast<double>(o.queued));
}

void Metrics::ObserveTrainingStep(const std::string& job, double loss,
                                  double examples_per_second) {
  training_steps_->Add({{"job", job}}).Increment();
  training_loss_->Add({{"job", job}}).Set(loss);
  training_examples_per_second_->Add({{"job", job}}).Set(examples_per_second);
}

void Metrics::ObserveKernels(const std::string& model, absl::Span<const api::KernelTiming> kernels) {
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const api::KernelTiming& k = kernels[i];
    std::string name = KernelLabel(i, k.name);
    auto key = std::make_tuple(k.device, model, name);
    auto it = kernel_series_.find(key);
    if (it == kernel_series_.end() && kernel_series_.size() >= kMaxKernelLabels) {
      key = std::make_tuple(k.device, std::string(), std::string("other"));
      it = kernel_series_.find(key);
    }
    if (it == kernel_series_.end()) {
      prometheus::Histogram* h = &kernel_duration_->Add(
          {{"device", std::get<0>(key)}, {"model", std::get<1>(key)}, {"kernel", std::get<2>(key)}},
          SecondsBuckets());
      it = kernel_series_.emplace(key, h).first;
    }
    if (k.timed) it->second->Observe(static_cast<double>(k.duration_ns) * 1e-9);
    kernel_launches_->Add({{"device", k.device}}).Increment();
  }
}

std::string KernelLabel(size_t position, std::string_view name) {
  std::string out = absl::StrCat(position, ":");
  bool in_number = false;
  for (char c : name) {
    const bool digit = c >= '0' && c <= '9';
    if (digit && !in_number) out.push_back('n');
    if (!digit) out.push_back(c);
    in_number = digit;
  }
  return out;
}

}  // namespace kiln::server
