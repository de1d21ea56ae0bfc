// JSON bodies of the KServe v2 REST routes other than inference (kserve-v2-protocol.md §9):
// server and model metadata, model config (Triton's form: protobuf JSON with proto field names
// and 64-bit integers as JSON numbers), repository index, statistics, system shared memory
// status/register, log settings. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/model_config.pb.h"
#include "server/core/inference_server.h"
#include "server/core/log_settings.h"
#include "server/core/shared_memory.h"
#include "server/core/trace.h"

namespace kiln::server {

std::string ServerMetadataJson(const ServerMetadata& metadata);
std::string ModelMetadataJson(const ModelMetadata& metadata);
absl::StatusOr<std::string> ModelConfigJson(const inference::ModelConfig& config);
std::string RepositoryIndexJson(const std::vector<RepositoryIndexEntry>& index);
std::string StatisticsJson(const std::vector<ModelStatsEntry>& stats);

// {"parameters": {"config": "<json>", "file:<v>/<name>": "..."}} of a load request (body may be
// empty). INVALID_ARGUMENT naming the field.
absl::StatusOr<LoadOptions> DecodeLoadBody(const std::string& body);
// {"ready": bool} of an index request (body may be empty).
absl::StatusOr<bool> DecodeIndexBody(const std::string& body);

// Triton's system shared memory status: [{"name","key","offset","byte_size"}, ...].
std::string SharedMemoryStatusJson(const std::vector<SharedMemoryRegionStatus>& regions);
struct SharedMemoryRegistration {
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};
// {"key": string, "offset": number (optional, 0), "byte_size": number} of a register request.
absl::StatusOr<SharedMemoryRegistration> DecodeSharedMemoryRegisterBody(const std::string& body);

// The logging extension (log_settings.h): a POST body {"log_info": true, ...} (empty = read) and
// the answer with every setting.
absl::StatusOr<LogSettingList> DecodeLogSettingsBody(const std::string& body);
std::string LogSettingsJson(const LogSettingList& settings);

// The trace extension (trace.h): a POST body {"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
// "trace_count": null, ...} (a string, a number, a list of them, or null = clear; empty = read)
// and the answer {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", ...}.
absl::StatusOr<TraceSettingUpdate> DecodeTraceSettingsBody(const std::string& body);
std::string TraceSettingsJson(const TraceSettingMap& settings);

}  // namespace kiln::server
