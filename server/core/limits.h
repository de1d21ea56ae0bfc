// Hard limits the server core enforces before any allocation. Requests over a limit fail with
// INVALID_ARGUMENT (shape/rank) or RESOURCE_EXHAUSTED (bytes); the message names the field and
// the limit. Runtime-tunable limits (request bytes) come from kilnd flags via ServerOptions.
#pragma once

#include <cstdint>

namespace kiln::server {

inline constexpr int kMaxTensorRank = 64;                // dims per tensor, batch dim included
inline constexpr int64_t kMaxBatchSize = 1 << 20;        // config max_batch_size
inline constexpr int kMaxTensorsPerModel = 1024;         // config inputs / outputs
inline constexpr int kMaxModelVersions = 1024;           // version folders read per model
inline constexpr int64_t kMaxConfigBytes = 1 << 20;      // config.pbtxt size
inline constexpr int64_t kMaxArtifactBytes = 1LL << 30;  // one model file read at load
inline constexpr int kMaxNameLength = 256;               // model / tensor names
inline constexpr int64_t kDefaultMaxRequestBytes = 64LL << 20;  // --max-request-bytes default
inline constexpr int64_t kDefaultMaxQueueSize = 64;  // --max-queue-size default (per model version)

// Per-run engine limits (README "Limits"); every engine run kilnd makes for a request (an Infer,
// a kiln.v1 Execute, a RegisterGraph warm-up) obeys them, checked before anything is allocated.
inline constexpr int64_t kDefaultMaxRunFlops = int64_t{1} << 38;        // --max-run-flops
inline constexpr int64_t kDefaultMaxRunBytesMoved = int64_t{1} << 38;   // --max-run-bytes-moved
inline constexpr int64_t kDefaultMaxRunMemoryBytes = int64_t{2} << 30;  // --max-run-memory-bytes
inline constexpr int64_t kDefaultMaxResponseBytes = int64_t{1} << 30;   // --max-response-bytes
// Protobuf cannot serialize a message of 2 GiB or more (gRPC asserts): the response cap never
// goes above this, whatever the flag says.
inline constexpr int64_t kMaxProtoResponseBytes = (int64_t{2} << 30) - (int64_t{1} << 20);
inline constexpr int64_t kDefaultMaxRunSeconds = 300;                   // --max-run-seconds

}  // namespace kiln::server
