// kilnd: the kiln inference daemon. Wires the model repository (server/core) to the gRPC front
// end (server/grpc) and waits for SIGTERM/SIGINT; nothing else lives here.
//
// Training jobs (--data-dir): the running job checkpoints at the next step boundary on SIGTERM.
// Shutdown contract: on the first SIGTERM/SIGINT, health goes NOT_SERVING and readiness false
// at once, new inference and repository calls get UNAVAILABLE, calls in flight finish, and the
// process exits before --exit-timeout-secs (a watchdog forces exit code 2 if it cannot).
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/debugging/symbolize.h"
#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/api/engine.h"
#include "engine/api/viz.h"
#include "server/core/failpoint.h"
#include "server/core/inference_server.h"
#include "server/core/job_manager.h"
#include "server/core/limits.h"
#include "server/core/log_settings.h"
#include "server/grpc/grpc_server.h"
#include "server/main/security.h"
#include "server/main/triton_flags.h"
#include "server/metrics/metrics.h"
#include "server/rest/rest_server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model_repository, "models", "model repository folder (Triton layout)");
ABSL_FLAG(std::string, grpc_address, "0.0.0.0", "host/IP the gRPC server listens on");
ABSL_FLAG(int32_t, grpc_port, 8001, "gRPC port (KServe v2); 0 = pick a free port");
ABSL_FLAG(int32_t, grpc_handshake_timeout_ms, 10000,
          "gRPC: a connection must finish its handshake (TLS, the HTTP/2 preface and first "
          "SETTINGS) within this, or it is closed (gRPC's own default is 120000)");
ABSL_FLAG(int32_t, metrics_port, 8002,
          "Prometheus metrics port (/metrics on the --grpc-address host); 0 = pick a free port, "
          "negative = no metrics endpoint");
ABSL_FLAG(int64_t, max_request_bytes, kiln::server::kDefaultMaxRequestBytes,
          "largest gRPC message and total input bytes accepted per request");
ABSL_FLAG(int64_t, max_queue_size, kiln::server::kDefaultMaxQueueSize,
          "requests waiting per model version before new ones get RESOURCE_EXHAUSTED (a model's "
          "dynamic_batching queue policy max_queue_size also bounds each priority level, "
          "answering UNAVAILABLE as Triton does)");
ABSL_FLAG(int32_t, exit_timeout_secs, 30,
          "on SIGTERM/SIGINT, seconds for calls in flight to finish before exit");
ABSL_FLAG(std::string, device, "",
          "default device of models whose config names none (no instance_group or KIND_AUTO): "
          "CPU, CL, CL:1, CUDA, INTERP; empty = CPU when built in, else INTERP");
ABSL_FLAG(bool, inline_execution, true,
          "run a request on the receiving thread when its device is idle and nothing is queued "
          "(saves the hand-off to the device's executor); false = always queue");
ABSL_FLAG(int64_t, inline_max_compute_us, 2000,
          "run inline only requests whose expected engine time (the model's latest run, per "
          "batch item, times the batch) is at most this many microseconds");
ABSL_FLAG(bool, list_devices, false,
          "print the devices this machine has (CPU, CL:n, CUDA:n), one per line, and exit");
ABSL_FLAG(std::string, log_format, "default", "log line format: default or ISO8601");
ABSL_FLAG(bool, debug, false, "debug logging (every failed call is logged)");
ABSL_FLAG(int32_t, http_port, 8000,
          "HTTP port (KServe v2 REST) on the --grpc-address host; 0 = no REST gateway");
ABSL_FLAG(int64_t, http_max_body_bytes, 64LL << 20, "largest HTTP request body accepted");
ABSL_FLAG(int64_t, http_max_header_bytes, 16 << 10, "largest total size of HTTP request headers");
ABSL_FLAG(int64_t, http_max_chunks, 32768, "most pieces (chunks) of one chunked HTTP request body");
ABSL_FLAG(int32_t, http_thread_count, 64,
          "HTTP handler threads: requests handled at once (connections are served by the "
          "--http-io-threads event loop and do not hold one)");
ABSL_FLAG(int32_t, http_io_threads, 2, "HTTP event-loop threads (all connections' I/O)");
ABSL_FLAG(int32_t, http_timeout_ms, 5000,
          "HTTP read/write timeout: a connection that sends or takes no byte this long "
          "mid-request or mid-response is closed");
ABSL_FLAG(int32_t, http_header_timeout_ms, 10000,
          "HTTP: a request head must arrive whole within this, from its first byte");
ABSL_FLAG(int32_t, http_body_timeout_ms, 120000,
          "HTTP: a request body must arrive whole within this, from the end of its head");
ABSL_FLAG(int32_t, http_keep_alive_timeout_s, 5,
          "HTTP: an idle keep-alive connection is closed after this many seconds");
ABSL_FLAG(int32_t, http_max_connections, 4096,
          "HTTP connections open at once; more are answered 503 and closed");
ABSL_FLAG(int32_t, http_max_connections_per_client, 512,
          "HTTP connections open at once from one client address (0 = no cap; raise it behind a "
          "proxy or load balancer, whose connections all come from its address)");
ABSL_FLAG(std::string, http_port_file, "",
          "if set, write the bound HTTP port to this file once serving (for tests and scripts)");
ABSL_FLAG(std::string, data_dir, "",
          "folder for kilnd's state: training jobs (jobs.db), checkpoints, uploaded datasets; "
          "empty = no training jobs (kiln.v1.Training answers UNAVAILABLE)");
ABSL_FLAG(bool, resume_jobs, true,
          "at start, resume training jobs that kilnd stopped while they ran (else they wait, "
          "INTERRUPTED, for ResumeJob)");
ABSL_FLAG(std::vector<std::string>, dataset_roots, {"/usr/share/datasets"},
          "comma-separated folders that JobSpec.dataset.idx_dir may name datasets under");
ABSL_FLAG(int64_t, max_dataset_bytes, kiln::server::kDefaultMaxDatasetBytes,
          "largest dataset UploadDataset accepts, in bytes");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound gRPC port to this file once serving (for tests and scripts)");
// ** limits of every engine run a request makes (README "Limits"), checked before allocation **
ABSL_FLAG(int64_t, max_run_flops, kiln::server::kDefaultMaxRunFlops,
          "estimated ALU operations one run may take (0 = no cap); over it: RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_run_bytes_moved, kiln::server::kDefaultMaxRunBytesMoved,
          "estimated bytes of the buffers one run's kernels touch (0 = no cap)");
ABSL_FLAG(int64_t, max_run_memory_bytes, kiln::server::kDefaultMaxRunMemoryBytes,
          "peak memory of one run: inputs, intermediates, outputs and their host copies (0 = no cap)");
ABSL_FLAG(int64_t, max_response_bytes, kiln::server::kDefaultMaxResponseBytes,
          "bytes of the outputs one response may carry (gRPC: never above 2 GiB - 1 MiB)");
ABSL_FLAG(int64_t, max_run_seconds, kiln::server::kDefaultMaxRunSeconds,
          "deadline of any request, from its start, capping the client's (0 = the client's only); "
          "a run past it stops between kernels with DEADLINE_EXCEEDED");
ABSL_FLAG(int64_t, max_memory_bytes, 0,
          "process-wide budget: device buffers held plus the new bytes of runs in flight; a run "
          "that would exceed it is refused (0 = 3/4 of the machine's memory, negative = none)");
// ** caches, bounded by bytes (LRU; evictions in kiln_cache_evictions_total) **
ABSL_FLAG(int64_t, prepared_cache_bytes, 64LL << 20,
          "per device: bytes of decoded graphs kept for reuse (0 = entries bound only)");
ABSL_FLAG(int64_t, jit_cache_bytes, 512LL << 20,
          "per device: bytes the builtin models' captured JIT traces may hold (0 = entries only)");
ABSL_FLAG(int64_t, kernel_cache_bytes, 128LL << 20,
          "process-wide: bytes of loaded (compiled) kernels kept (0 = entries bound only)");
ABSL_FLAG(int64_t, kernel_cache_entries, 2048, "process-wide: loaded kernels kept");
ABSL_FLAG(int64_t, viz_kernels, 256,
          "with VIZ=1: the kernel compiles the /viz page keeps (a ring; the oldest are dropped)");
ABSL_FLAG(int32_t, beam, 0,
          "kernel search width (tinygrad BEAM=n) for every kernel kilnd compiles: each kernel is searched once and "
          "the fastest variant kept in the disk kernel cache, shared with `kiln tune` and later starts (0 = the "
          "hand-coded heuristic; the BEAM environment variable is read when the flag is 0). With model_warmup a "
          "model's kernels are searched at load, before it is READY; otherwise on their first request");
ABSL_FLAG(int64_t, binary_cache_bytes, 64LL << 20,
          "process-wide: bytes of compiled binaries kept in memory (the disk cache is separate)");
// ** streams, reflection, repository **
ABSL_FLAG(int64_t, stream_max_pending_responses, 256,
          "ModelStreamInfer: answers waiting for a client to read before its stream is closed "
          "with RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, stream_max_pending_bytes, 64LL << 20,
          "ModelStreamInfer: bytes of answers waiting for a client to read (as above)");
ABSL_FLAG(bool, grpc_reflection, false,
          "serve gRPC server reflection (lists every service to anyone; off by default)");
ABSL_FLAG(bool, repository_follow_links, false,
          "follow every symbolic link (and read multiply-linked files) below the model repository "
          "root; off: links that lead outside the root and such files are refused");

namespace {

// absl flag names use '_'; kilnd also accepts Triton-style dashes (--model-repository).
// Repeated --load-model flags (Triton's) are merged into one list (absl keeps only the last).
std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>* storage) {
  storage->reserve(argc);
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      const size_t end = std::min(arg.find('='), arg.size());
      for (size_t k = 2; k < end; ++k) {
        if (arg[k] == '-') arg[k] = '_';
      }
    }
    storage->push_back(std::move(arg));
  }
  kiln::server::MergeRepeatedListFlag("load_model", storage);
  std::vector<char*> out;
  for (std::string& arg : *storage) out.push_back(arg.data());
  return out;
}

bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.good()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

// The REST gateway on --http-port (nullptr when disabled). Like metrics it is best effort: a
// port that cannot be bound is logged and kilnd serves gRPC without it.
std::unique_ptr<kiln::server::RestServer> StartRest(kiln::server::InferenceServer* core,
                                                    kiln::server::JobManager* jobs,
                                                    const kiln::server::Security& security) {
  const int port = absl::GetFlag(FLAGS_http_port);
  if (port == 0) return nullptr;
  kiln::server::RestServerOptions options;
  std::string http_address = kiln::server::HttpAddress();
  if (http_address.empty()) http_address = absl::GetFlag(FLAGS_grpc_address);
  options.address = kiln::server::ListenAddress(security, http_address, "HTTP");
  options.auth = security.auth.get();
  options.tls = security.http_tls;
  options.port = port < 0 ? 0 : port;  // negative = a free port (tests)
  options.max_body_bytes = absl::GetFlag(FLAGS_http_max_body_bytes);
  options.max_header_bytes = absl::GetFlag(FLAGS_http_max_header_bytes);
  options.max_chunks = absl::GetFlag(FLAGS_http_max_chunks);
  options.thread_count = absl::GetFlag(FLAGS_http_thread_count);
  options.io_threads = absl::GetFlag(FLAGS_http_io_threads);
  options.read_timeout_ms = options.write_timeout_ms = absl::GetFlag(FLAGS_http_timeout_ms);
  options.header_timeout_ms = absl::GetFlag(FLAGS_http_header_timeout_ms);
  options.body_timeout_ms = absl::GetFlag(FLAGS_http_body_timeout_ms);
  options.keep_alive_timeout_s = absl::GetFlag(FLAGS_http_keep_alive_timeout_s);
  options.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  options.max_connections_per_client = absl::GetFlag(FLAGS_http_max_connections_per_client);
  auto rest = kiln::server::RestServer::Start(options, core, jobs);
  if (!rest.ok()) {
    spdlog::warn("kilnd: {}; serving without REST", std::string(rest.status().message()));
    return nullptr;
  }
  spdlog::info("kilnd: serving KServe v2 REST{} on {}:{}",
               options.tls.enabled ? (options.tls.mutual() ? " over mutual TLS" : " over TLS (HTTPS)") : "",
               options.address, (*rest)->port());
  const std::string port_file = absl::GetFlag(FLAGS_http_port_file);
  if (!port_file.empty() && !WritePortFile(port_file, (*rest)->port())) {
    spdlog::error("kilnd: cannot write --http-port-file");
    return nullptr;
  }
  return *std::move(rest);
}

// The limit and cache flags into `options`, and the process-wide cache bounds into the engine.
void ApplyLimitFlags(kiln::server::ServerOptions* options) {
  kiln::server::RunPolicy& run = options->run;
  run.limits.max_flops = std::max<int64_t>(0, absl::GetFlag(FLAGS_max_run_flops));
  run.limits.max_bytes_moved = std::max<int64_t>(0, absl::GetFlag(FLAGS_max_run_bytes_moved));
  run.limits.max_memory_bytes = std::max<int64_t>(0, absl::GetFlag(FLAGS_max_run_memory_bytes));
  run.limits.max_output_bytes = std::clamp<int64_t>(absl::GetFlag(FLAGS_max_response_bytes), 1,
                                                    kiln::server::kMaxProtoResponseBytes);
  run.max_run_seconds = std::max<int64_t>(0, absl::GetFlag(FLAGS_max_run_seconds));
  int64_t global = absl::GetFlag(FLAGS_max_memory_bytes);
  if (global == 0) {
    const int64_t pages = sysconf(_SC_PHYS_PAGES);
    const int64_t page = sysconf(_SC_PAGESIZE);
    global = pages > 0 && page > 0 ? pages / 4 * 3 * page : 0;
  }
  options->global_memory_bytes = std::max<int64_t>(0, global);
  options->prepared_cache_bytes =
      static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_prepared_cache_bytes)));
  options->jit_cache_bytes =
      static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_jit_cache_bytes)));
  options->repository_follow_links = absl::GetFlag(FLAGS_repository_follow_links);
  kiln::api::ConfigureProcessCaches(
      static_cast<size_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_kernel_cache_entries))),
      static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_kernel_cache_bytes))),
      static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_binary_cache_bytes))));
  kiln::api::viz::SetCapacity(static_cast<size_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_viz_kernels))));
  if (absl::GetFlag(FLAGS_beam) > 0) kiln::api::ConfigureKernelSearch(absl::GetFlag(FLAGS_beam));
  spdlog::info("kilnd: limits per run: {} FLOPs, {} bytes moved, {} bytes of memory, {} response "
               "bytes, {} s; global memory budget {} bytes",
               run.limits.max_flops, run.limits.max_bytes_moved, run.limits.max_memory_bytes,
               run.limits.max_output_bytes, run.max_run_seconds, options->global_memory_bytes);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "kilnd --model-repository DIR [--grpc-port 8001] [--max-request-bytes N] ...\n"
      "Flags take dashes or underscores (--data-dir = --data_dir); --help lists them all.");
  // --help lists the flags defined under server/main/ (absl's default looks for a file named
  // after the binary, kilnd.cc, and so matched none).
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "server/main/");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::InitializeSymbolizer(argv[0]);  // stacks in the logs of guarded failures (guard.h)
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeFlagNames(argc, argv, &storage);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  if (kiln::server::ListEndpointsIfAsked()) return 0;
  if (absl::GetFlag(FLAGS_list_devices)) {
    for (const std::string& d : kiln::api::ListDevices()) std::printf("%s\n", d.c_str());
    return 0;
  }
  const std::string log_format = absl::GetFlag(FLAGS_log_format);
  if (log_format != "default" && log_format != "ISO8601") {
    std::fprintf(stderr, "kilnd: --log-format must be default or ISO8601, not '%s'\n",
                 log_format.c_str());
    return 2;
  }
  // Level and pattern, and the logging extension's switches (server/core/log_settings.h).
  kiln::server::InitLogSettings(
      absl::GetFlag(FLAGS_debug) ? std::max(1, kiln::server::VerboseLevel()) : kiln::server::VerboseLevel(),
      log_format);
  // KILN_FAILPOINTS (tests only) is parsed once, here, so a typo is logged at start.
  kiln::server::failpoint::Armed();
  const int64_t max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  const int exit_timeout_secs = std::max(0, absl::GetFlag(FLAGS_exit_timeout_secs));
  if (max_request_bytes <= 0) {
    std::fprintf(stderr, "kilnd: --max-request-bytes must be positive\n");
    return 2;
  }

  // Request bodies and their decoded forms reach tens of MiB on many threads. glibc's dynamic
  // mmap threshold would move such blocks into per-thread heaps after the first free, where
  // they stay resident; a fixed threshold returns every block >= 1 MiB to the OS on free.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // One malloc arena. Smaller blocks (a 10^6-node graph decodes into millions of them) otherwise
  // land in the per-thread arena of whichever gRPC thread decoded them, and glibc keeps those
  // arenas' pages: the bad-input table run 100 times grew RSS by ~85 MiB with the default arena
  // count (and with 2 or 4), by < 1 MiB with one; malloc_trim did not return them. kilnd's hot
  // paths allocate little per request, so the shared arena lock costs nothing measurable here.
  mallopt(M_ARENA_MAX, 1);

  // SIGTERM/SIGINT are taken by sigwait below; block them before any thread starts so every
  // thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reload: the API key file
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<kiln::server::Security> security = kiln::server::SecurityFromFlags();
  if (!security.ok()) {
    spdlog::error("kilnd: {}", std::string(security.status().message()));
    return 1;
  }
  if (absl::StatusOr<kiln::server::TlsFiles> tls = kiln::server::HttpTlsFromFlags(); tls.ok()) {
    security->http_tls = *std::move(tls);
  } else {
    spdlog::error("kilnd: {}", std::string(tls.status().message()));
    return 1;
  }

  kiln::server::ServerOptions options;
  options.model_repository = absl::GetFlag(FLAGS_model_repository);
  options.max_request_bytes = max_request_bytes;
  options.device = absl::GetFlag(FLAGS_device);
  options.inline_execution = absl::GetFlag(FLAGS_inline_execution);
  options.inline_max_compute_us = std::max<int64_t>(0, absl::GetFlag(FLAGS_inline_max_compute_us));
  options.max_queue_size = std::max<int64_t>(1, absl::GetFlag(FLAGS_max_queue_size));
  options.allow_client_shm = kiln::server::AllowClientShm();
  options.trace_file = kiln::server::TraceFile();
  ApplyLimitFlags(&options);
  absl::StatusOr<kiln::server::ModelControlPlan> control =
      kiln::server::ApplyModelControlFlags(&options);
  if (!control.ok()) {
    std::fprintf(stderr, "kilnd: %s\n", std::string(control.status().message()).c_str());
    return 2;
  }
  auto core = kiln::server::InferenceServer::Create(options);
  if (!core.ok()) {
    spdlog::error("kilnd: {}", std::string(core.status().message()));
    return 1;
  }

  // Metrics are best effort: a port that cannot be bound is logged and kilnd serves without it.
  std::unique_ptr<kiln::server::Metrics> metrics;
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  {
    auto started = kiln::server::Metrics::Start(
        kiln::server::ListenAddress(*security, absl::GetFlag(FLAGS_grpc_address), "metrics"), metrics_port,
        security->auth.get());
    if (started.ok()) {
      metrics = *std::move(started);
      (*core)->SetObserver(metrics.get());
    } else {
      spdlog::warn("kilnd: {}; serving without metrics", std::string(started.status().message()));
    }
  }
  // Explicit mode's --load-model, --exit-on-error, poll mode's poller (triton_flags.h).
  absl::StatusOr<std::unique_ptr<kiln::server::RepositoryPoller>> poller =
      kiln::server::StartModelControl(*control, **core);
  if (!poller.ok()) {
    spdlog::error("kilnd: {}", std::string(poller.status().message()));
    return 1;
  }

  std::unique_ptr<kiln::server::JobManager> jobs;
  if (const std::string data_dir = absl::GetFlag(FLAGS_data_dir); !data_dir.empty()) {
    kiln::server::JobManagerOptions jo;
    jo.data_dir = data_dir;
    jo.model_repository = options.model_repository;
    jo.repository_follow_links = options.repository_follow_links;
    jo.resume_jobs = absl::GetFlag(FLAGS_resume_jobs);
    // The canonical default device ("CL" is CL:0): training shares that device (and its memory
    // metric label) with the models served there.
    jo.device = (*core)->default_device();
    jo.max_dataset_bytes = std::max<int64_t>(1, absl::GetFlag(FLAGS_max_dataset_bytes));
    jo.dataset_roots.clear();
    for (const std::string& root : absl::GetFlag(FLAGS_dataset_roots)) {
      if (!root.empty()) jo.dataset_roots.emplace_back(root);
    }
    kiln::server::InferenceServer* server = core->get();
    jo.load_model = [server](const std::string& model) {
      kiln::server::LoadOptions load;
      load.internal = true;  // publishing loads in every --model-control-mode
      return server->LoadModel(model, load);
    };
    auto created = kiln::server::JobManager::Create(std::move(jo));
    if (!created.ok()) {
      spdlog::error("kilnd: {}", std::string(created.status().message()));
      return 1;
    }
    jobs = *std::move(created);
    if (metrics != nullptr) jobs->SetObserver(metrics.get());
  }

  kiln::server::GrpcServerOptions grpc_options;
  grpc_options.address = kiln::server::ListenAddress(*security, absl::GetFlag(FLAGS_grpc_address), "gRPC");
  grpc_options.auth = security->auth.get();
  if (absl::StatusOr<kiln::server::TlsFiles> tls = kiln::server::GrpcTlsFromFlags(); tls.ok()) {
    grpc_options.tls = *std::move(tls);
  } else {
    spdlog::error("kilnd: {}", std::string(tls.status().message()));
    return 1;
  }
  grpc_options.port = absl::GetFlag(FLAGS_grpc_port);
  grpc_options.handshake_timeout_ms = absl::GetFlag(FLAGS_grpc_handshake_timeout_ms);
  grpc_options.max_message_bytes = max_request_bytes;
  grpc_options.reflection = absl::GetFlag(FLAGS_grpc_reflection);
  grpc_options.stream_limits.max_pending_responses =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_stream_max_pending_responses));
  grpc_options.stream_limits.max_pending_bytes =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_stream_max_pending_bytes));
  auto grpc = kiln::server::GrpcServer::Start(grpc_options, core->get(), jobs.get());
  if (!grpc.ok()) {
    spdlog::error("kilnd: {}", std::string(grpc.status().message()));
    return 1;
  }
  spdlog::info("kilnd: serving KServe v2 gRPC{} on {}:{} (model repository '{}')",
               grpc_options.tls.enabled ? (grpc_options.tls.mutual() ? " over mutual TLS" : " over TLS") : "",
               grpc_options.address, (*grpc)->port(), options.model_repository.string());
  if (metrics != nullptr && metrics->port() > 0) {
    spdlog::info("kilnd: serving Prometheus metrics on {}:{}/metrics", grpc_options.address,
                 metrics->port());
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty() && !WritePortFile(port_file, (*grpc)->port())) {
    spdlog::error("kilnd: cannot write --port-file");
    return 1;
  }

  std::unique_ptr<kiln::server::RestServer> rest = StartRest(core->get(), jobs.get(), *security);

  int signal_number = 0;
  for (;;) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    if (absl::Status s = security->auth->Reload(); s.ok()) {
      spdlog::info("kilnd: SIGHUP: reloaded --api-keys-file ({} keys)", security->auth->key_count());
    } else {
      spdlog::error("kilnd: SIGHUP: {}; keeping the previous keys", std::string(s.message()));
    }
  }
  spdlog::info("kilnd: signal {}: draining (exit within {} s)", signal_number, exit_timeout_secs);
  const auto start = std::chrono::system_clock::now();
  std::thread([exit_timeout_secs] {
    std::this_thread::sleep_for(std::chrono::seconds(exit_timeout_secs));
    std::fprintf(stderr, "kilnd: exit timeout reached; forcing exit\n");
    std::_Exit(2);
  }).detach();

  (*core)->BeginShutdown();
  if (*poller != nullptr) (*poller)->Stop();
  (*grpc)->SetNotServing();
  if (rest != nullptr) rest->Stop();
  // The running training job checkpoints at its next step boundary and becomes INTERRUPTED.
  if (jobs != nullptr) jobs->Shutdown();
  // A short grace before gRPC's own shutdown: calls that already reached the transport but were
  // not yet dispatched (a loaded machine delays dispatch) still get their UNAVAILABLE answer from
  // server/core instead of being cancelled by grpc::Server::Shutdown.
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(500, exit_timeout_secs * 50)));
  // Leave a margin inside the timeout for teardown after the drain.
  const auto margin = std::chrono::milliseconds(std::min(1000, exit_timeout_secs * 200));
  (*grpc)->Shutdown(start + std::chrono::seconds(exit_timeout_secs) - margin);
  grpc->reset();
  jobs.reset();
  spdlog::info("kilnd: stopped");
  return 0;
}
