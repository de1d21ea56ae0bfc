// Triton's trace extension (kserve-v2-protocol.md "Trace and log settings"; gRPC TraceSetting,
// REST GET/POST /v2[/models/{m}]/trace/setting): samples inference requests and writes their
// timestamps in Triton's JSON trace file format.
//
// Settings (every value a string, trace_level a list), global or per model (a model's setting
// overrides the global one; an update with no value -- REST null, gRPC an empty list -- clears the
// model's own so the global one applies again):
//   trace_level    ["OFF"] or ["TIMESTAMPS"] (TENSORS: INVALID_ARGUMENT, not implemented)
//   trace_rate     one request in N is traced (>= 1)
//   trace_count    traces left to take (-1 = unlimited); counts down, 0 stops tracing
//   log_frequency  0 = the traces are written at shutdown; N = every N traces go to
//                  "<trace_file>.<index>" (index from 0). When trace_count reaches 0 the traces
//                  collected go to the next indexed file once every sampled one is recorded. At shutdown what is left goes
//                  to <trace_file> if no indexed file was written, else to the next indexed one.
//   trace_file     read-only (--trace-file): as in current Triton, no API sets a path kilnd writes
//   trace_mode     read-only: "triton"
// Turning tracing on without --trace-file is INVALID_ARGUMENT.
//
// A traced request records REQUEST_START (arrival), QUEUE_START (admitted), COMPUTE_START,
// COMPUTE_END (the run; absent for an answer from the response cache or a request refused before
// it ran) and REQUEST_END (answered), in nanoseconds of the steady clock. The file is a JSON array
// of Triton's trace objects: {"id", "model_name", "model_version", "request_id"} then one
// {"id", "timestamps": [{"name", "ns"}]} per timestamp.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kiln::server {

using TraceSettingMap = std::map<std::string, std::vector<std::string>>;
// One update: the setting and its new value (nullopt = clear the model's own value).
using TraceSettingUpdate = std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>>;

struct TraceRecord {
  uint64_t id = 0;
  std::string model_name;
  std::string model_version;
  std::string request_id;
  std::vector<std::pair<std::string, uint64_t>> timestamps;  // name, ns
};

class TraceManager {
 public:
  // `trace_file` "" = none (tracing cannot be turned on).
  explicit TraceManager(std::string trace_file) : trace_file_(std::move(trace_file)) {}
  ~TraceManager();  // writes what is collected

  // Applies `updates` to the model's settings ("" = the global ones) -- checked whole first,
  // INVALID_ARGUMENT naming the setting -- and returns the settings in effect for it.
  absl::StatusOr<TraceSettingMap> Update(const std::string& model, const TraceSettingUpdate& updates);

  // Whether the next request of `model` is traced: its id, or 0. Cheap when tracing is off.
  uint64_t Sample(const std::string& model);
  // A finished trace (id from Sample).
  void Record(TraceRecord record);
  // Writes the collected traces now (to trace_file, or to the next indexed file).
  void Flush();

 private:
  struct Setting {
    std::optional<bool> on;  // TIMESTAMPS
    std::optional<int64_t> rate;
    std::optional<int64_t> count;
    std::optional<int64_t> log_frequency;
  };
  struct Effective {
    bool on = false;
    int64_t rate = 1000;
    int64_t count = -1;
    int64_t log_frequency = 0;
  };
  Effective EffectiveLocked(const std::string& model) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TraceSettingMap AsMapLocked(const std::string& model) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteLocked(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string trace_file_;
  mutable absl::Mutex mu_;
  Setting global_ ABSL_GUARDED_BY(mu_) = {false, 1000, -1, 0};
  std::map<std::string, Setting> models_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> seen_ ABSL_GUARDED_BY(mu_);  // requests per setting owner
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<TraceRecord> collected_ ABSL_GUARDED_BY(mu_);
  int64_t file_index_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // sampled, not yet recorded
  std::atomic<bool> any_on_{false};  // some setting traces: Sample takes the lock only then
};

}  // namespace kiln::server
