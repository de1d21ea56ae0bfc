#include "server/main/triton_flags.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model_control_mode, "",
          "Triton's model control: none (every model loaded at start; the load/unload API "
          "refused), poll (as none, and the repository re-scanned every --repository-poll-secs: "
          "new models loaded, changed ones reloaded, removed ones unloaded), explicit (only the "
          "--load-model models loaded at start; the load/unload API allowed); unset = every model "
          "at start and the load/unload API allowed");
ABSL_FLAG(std::vector<std::string>, load_model, {},
          "explicit mode: a model to load at start (repeatable or comma-separated; '*' = every "
          "model); implies --model-control-mode=explicit when that flag is unset");
ABSL_FLAG(int32_t, repository_poll_secs, 15,
          "poll mode: seconds between re-scans of the model repository (>= 1)");
ABSL_FLAG(bool, strict_model_config, false,
          "every model needs a complete config.pbtxt (no completion of ONNX models' configs from "
          "model.onnx), as Triton's flag");
ABSL_FLAG(bool, strict_readiness, true,
          "/v2/health/ready and gRPC ServerReady answer not-ready while any model that should be "
          "loaded is not READY (failed to load, loading); false = ready whenever kilnd serves");
ABSL_FLAG(bool, exit_on_error, false,
          "exit (code 1) when a model fails to load at start (Triton's default is true; kilnd "
          "serves the other models unless this is set)");
ABSL_FLAG(int32_t, log_verbose, 0,
          "Triton's verbose logging level: > 0 logs at debug level (as --debug)");
ABSL_FLAG(bool, allow_client_shm, false,
          "Triton's flag: clients may register system shared memory regions (any POSIX shared "
          "memory object kilnd can open, read and written with kilnd's permissions) and pass "
          "tensors through them; off = the register/unregister calls are refused");
ABSL_FLAG(std::string, trace_file, "",
          "Triton's trace extension: the file the sampled requests' timestamps are written to "
          "(JSON, Triton's format; log_frequency N writes <file>.<index>); tracing is turned on "
          "through TraceSetting / /v2/trace/setting; empty = tracing cannot be turned on");
ABSL_FLAG(std::string, cache_config, "",
          "Triton's response cache: local,size=<bytes> gives models with response_cache { enable: "
          "true } an LRU cache of that many bytes (identical requests answered without running); "
          "empty = no cache (such models then fail to load)");
ABSL_FLAG(std::string, http_address, "",
          "host/IP the REST gateway (--http-port) listens on; empty = the --grpc-address host");

namespace kiln::server {

absl::StatusOr<ModelControlPlan> ApplyModelControlFlags(ServerOptions* options) {
  ModelControlPlan plan;
  absl::StatusOr<ModelControlMode> mode =
      ParseModelControlMode(absl::GetFlag(FLAGS_model_control_mode));
  if (!mode.ok()) return mode.status();
  plan.mode = *mode;
  for (const std::string& m : absl::GetFlag(FLAGS_load_model)) {
    if (!m.empty()) plan.load_models.push_back(m);
  }
  if (!plan.load_models.empty()) {
    if (plan.mode == ModelControlMode::kDefault) plan.mode = ModelControlMode::kExplicit;
    if (plan.mode != ModelControlMode::kExplicit) {
      return absl::InvalidArgumentError(
          "--load-model: needs --model-control-mode=explicit (none and poll load every model)");
    }
  }
  plan.poll_secs = absl::GetFlag(FLAGS_repository_poll_secs);
  if (plan.mode == ModelControlMode::kPoll && plan.poll_secs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--repository-poll-secs: ", plan.poll_secs,
                                                   " is not a positive number of seconds"));
  }
  plan.exit_on_error = absl::GetFlag(FLAGS_exit_on_error);
  // Models load in StartModelControl, after the metrics observer is set (warm-up compiles and
  // start-up loads are observed).
  options->load_all_at_start = false;
  options->model_control_api =
      plan.mode == ModelControlMode::kDefault || plan.mode == ModelControlMode::kExplicit;
  options->strict_readiness = absl::GetFlag(FLAGS_strict_readiness);
  options->strict_model_config = absl::GetFlag(FLAGS_strict_model_config);
  absl::StatusOr<int64_t> cache = ParseCacheConfig({absl::GetFlag(FLAGS_cache_config)});
  if (!cache.ok()) return cache.status();
  options->response_cache_bytes = *cache;
  return plan;
}

absl::StatusOr<std::unique_ptr<RepositoryPoller>> StartModelControl(const ModelControlPlan& plan,
                                                                    InferenceServer& server) {
  const std::filesystem::path& root = server.options().model_repository;
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) {
    return absl::NotFoundError(
        absl::StrCat("model repository '", root.string(), "' is not a readable folder"));
  }
  absl::Status loaded = LoadStartupModels(
      server, plan.mode == ModelControlMode::kExplicit ? plan.load_models
                                                       : std::vector<std::string>{"*"});
  if (!loaded.ok() && plan.exit_on_error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--exit-on-error: ", std::string(loaded.message())));
  }
  if (plan.mode != ModelControlMode::kPoll) return nullptr;
  auto poller = std::make_unique<RepositoryPoller>(&server, server.options().model_repository,
                                                   server.options().repository_follow_links);
  poller->Start(std::chrono::seconds(plan.poll_secs));
  spdlog::info("kilnd: polling the model repository every {} s", plan.poll_secs);
  return poller;
}

void MergeRepeatedListFlag(const std::string& name, std::vector<std::string>* args) {
  const std::string bare = "--" + name;
  const std::string with_value = bare + "=";
  std::vector<std::string> values;
  std::vector<std::string> kept;
  int first = -1;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& arg = (*args)[i];
    if (i > 0 && arg == "--") {  // the rest are positional
      kept.insert(kept.end(), args->begin() + i, args->end());
      break;
    }
    if (i > 0 && (arg.rfind(with_value, 0) == 0 || (arg == bare && i + 1 < args->size()))) {
      values.push_back(arg == bare ? (*args)[++i] : arg.substr(with_value.size()));
      if (first < 0) {
        first = static_cast<int>(kept.size());
        kept.emplace_back();
      }
      continue;
    }
    kept.push_back(arg);
  }
  if (first < 0) return;
  kept[first] = with_value + absl::StrJoin(values, ",");
  *args = std::move(kept);
}

bool VerboseLogging() { return absl::GetFlag(FLAGS_log_verbose) > 0; }

int VerboseLevel() { return std::max(0, absl::GetFlag(FLAGS_log_verbose)); }

bool AllowClientShm() { return absl::GetFlag(FLAGS_allow_client_shm); }

std::string TraceFile() { return absl::GetFlag(FLAGS_trace_file); }

std::string HttpAddress() { return absl::GetFlag(FLAGS_http_address); }

}  // namespace kiln::server
