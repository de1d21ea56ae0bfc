// Model control and readiness with Triton's meanings (--model-control-mode, --load-model,
// --strict-readiness, --repository-poll-secs).
//
//   none      every model is loaded at start; the repository load/unload calls are refused
//             (UNAVAILABLE naming the mode); the folder is never looked at again.
//   poll      as none, and every --repository-poll-secs the repository is re-scanned: a new model
//             folder is loaded, a changed one (any file's size or mtime, a file added or removed)
//             reloaded, a removed one unloaded.
//   explicit  only the --load-model models are loaded at start ('*' = all); the load/unload calls
//             are allowed.
//   (unset)   kilnd's default: every model at start and the load/unload calls allowed, that is
//             Triton's explicit mode with --load-model='*'.
// kilnd itself (start-up, the poller, training jobs publishing a model) loads in every mode.
//
// Strict readiness (Triton's, default on): the server is ready only while no model that should be
// loaded is in another state than READY -- a version UNAVAILABLE for any reason but "unloaded",
// LOADING, or a model whose load failed outright. Models never asked for do not count.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/core/model_repository.h"

namespace kiln::server {

class InferenceServer;

enum class ModelControlMode { kDefault, kNone, kPoll, kExplicit };

// "" = kDefault; "none", "poll", "explicit" (case-insensitive). INVALID_ARGUMENT otherwise.
absl::StatusOr<ModelControlMode> ParseModelControlMode(std::string_view text);

// The answer of a repository load/unload call in none and poll modes (UNAVAILABLE, as Triton).
absl::Status ModelControlRefused();

// Strict readiness over a repository index (ModelRepository::Index(false)): false if any row is
// a model or version in a state other than READY whose reason is not "unloaded" (rows of
// folders never loaded, state "", do not count).
bool AllModelsReady(const std::vector<RepositoryIndexEntry>& rows);

// kilnd's start: loads each of `models` ('*' = every model folder). Failures are logged
// and returned joined ("model 'a': ...; model 'b': ..."); OK when all loaded.
absl::Status LoadStartupModels(InferenceServer& server, const std::vector<std::string>& models);

// Poll mode's re-scan. Start() runs PollOnce every `period` on a thread of its own until Stop()
// (or destruction). The first poll takes the repository as start-up loaded it as the baseline.
class RepositoryPoller {
 public:
  RepositoryPoller(InferenceServer* server, std::filesystem::path root, bool follow_links);
  ~RepositoryPoller();
  void Start(std::chrono::milliseconds period);
  void Stop();
  // One re-scan: loads new folders, reloads changed ones, unloads removed ones (logged).
  void PollOnce();

 private:
  // Per model folder: a signature of every file below it (relative path, size, mtime),
  // bounded in depth and count; "" for a folder that cannot be read.
  std::map<std::string, std::string> Scan() const;

  InferenceServer* const server_;
  const std::filesystem::path root_;
  const bool follow_links_;
  std::map<std::string, std::string> seen_;  // only touched by PollOnce's caller
  bool primed_ = false;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace kiln::server
