// Triton's server flags with Triton's meaning (README "Flags"): --model-control-mode,
// --load-model, --repository-poll-secs, --strict-model-config, --strict-readiness,
// --exit-on-error, --log-verbose, --http-address, --allow-client-shm. The model-control machinery itself is
// server/core/model_control.h; this file only reads the flags and starts it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/inference_server.h"
#include "server/core/model_control.h"

namespace kiln::server {

struct ModelControlPlan {
  ModelControlMode mode = ModelControlMode::kDefault;
  std::vector<std::string> load_models;  // explicit mode's --load-model list
  int poll_secs = 15;
  bool exit_on_error = false;
};

// Reads the model-control flags into `options` (load at start, load/unload API, strict readiness,
// strict model config). INVALID_ARGUMENT naming the flag for a bad value or combination.
absl::StatusOr<ModelControlPlan> ApplyModelControlFlags(ServerOptions* options);

// After InferenceServer::Create and its observer: loads the models (explicit mode: --load-model;
// else all); with --exit-on-error a model that failed to load is an error (naming it); poll mode
// returns the started poller (else null). NOT_FOUND for an unreadable repository folder.
absl::StatusOr<std::unique_ptr<RepositoryPoller>> StartModelControl(const ModelControlPlan& plan,
                                                                    InferenceServer& server);

// Merges every "--NAME=V" / "--NAME V" in `args` (names already with '_') into one
// "--NAME=V1,V2" at the first's place, so a repeatable list flag keeps every value.
void MergeRepeatedListFlag(const std::string& name, std::vector<std::string>* args);

// --log-verbose > 0 (Triton's verbose logging): debug-level logs.
bool VerboseLogging();
// --log-verbose, clamped to >= 0 (the logging extension's starting log_verbose_level).
int VerboseLevel();
// --allow-client-shm (Triton's): clients may register system shared memory regions.
bool AllowClientShm();
// --trace-file (Triton's): where the trace extension writes the traces ("" = none).
std::string TraceFile();

// The REST gateway's host: --http-address, or "" when it is unset (then --grpc-address serves).
std::string HttpAddress();

}  // namespace kiln::server
