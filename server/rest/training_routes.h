// REST mapping of kiln.v1.Training (proto/kiln/v1/training.proto), calling the same server/core
// JobManager as the gRPC service (server/grpc/training_service.cc). Bodies are the messages in
// the proto3 JSON mapping (lowerCamelCase or the proto field names are both accepted; 64-bit
// integers are JSON strings in responses; enums by name; unknown fields are rejected).
//
//   POST /v1/training/jobs                 body JobSpec                     -> Job
//   GET  /v1/training/jobs                                                  -> ListJobsResponse
//   GET  /v1/training/jobs/{id}[?include_losses=true]                       -> Job
//   POST /v1/training/jobs/{id}:cancel     (empty body)                     -> Job
//   POST /v1/training/jobs/{id}:resume     (empty body)                     -> Job
//   GET  /v1/training/jobs/{id}/events     WatchJob: one JobEvent per line (application/x-ndjson,
//                                          chunked), or Server-Sent Events ("event: <kind>",
//                                          "data: <JobEvent>") with Accept: text/event-stream.
//                                          The first event is the job now; the stream ends after
//                                          a STATE event with SUCCEEDED, FAILED, CANCELLED or
//                                          INTERRUPTED. While idle, a keep-alive every 15 s (an
//                                          empty NDJSON line, an SSE comment). When kilnd stops,
//                                          the stream ends with {"error": "..."} (SSE:
//                                          "event: error") within 250 ms.
//   GET  /v1/training/jobs/{id}/checkpoint the newest valid checkpoint (GetCheckpoint) as
//                                          application/octet-stream (safetensors), with
//                                          X-Kiln-Checkpoint-Step and X-Kiln-Checkpoint-Sha256;
//                                          404 when the job has none yet
//   POST /v1/training/datasets[?name=N]    UploadDataset: multipart/form-data with file parts
//                                          train_images, train_labels[, test_images,
//                                          test_labels] (IDX, raw or gzip) and an optional text
//                                          part "name" before them; Content-Length or chunked.
//                                          Written to disk as it arrives (at most 1 MiB held per
//                                          request) -> UploadDatasetResponse.
// Errors: {"error": "..."} with the status of http_status.h, messages naming the field and the
// limit; 503 when kilnd runs without --data-dir. Upload limits are the gRPC ones: --max-dataset-
// bytes in all (413 naming it, before reading when Content-Length says so), and the IDX checks;
// a full disk is 507 naming ENOSPC; a multipart body on any other route is 415;
// a chunked upload may have at most --http-max-chunks + max-dataset-bytes / 1 KiB pieces.
// Thread safety: Handle may run on many threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "httplib.h"
#include "server/core/job_manager.h"
#include "server/rest/http_util.h"

namespace kiln::server {

class TrainingRoutes {
 public:
  // `jobs` may be null (no --data-dir). `stopping` turns true when the gateway stops; event
  // streams end then. Both must outlive this object.
  TrainingRoutes(JobManager* jobs, BodyLimits limits, const std::atomic<bool>* stopping)
      : jobs_(jobs), limits_(limits), stopping_(stopping) {}

  // True for paths under /v1/training/.
  static bool Matches(std::string_view path);
  // The largest Content-Length accepted for `path`: the dataset limit plus 1 MiB of multipart
  // framing for uploads (whatever max_body_bytes is), else max_body_bytes.
  int64_t MaxContentLength(std::string_view path) const;
  void Handle(const httplib::Request& req, httplib::Response& res,
              const httplib::ContentReader* reader) const;

 private:
  void Upload(const httplib::Request& req, httplib::Response& res,
              const httplib::ContentReader* reader) const;
  void Events(const std::string& id, const httplib::Request& req, httplib::Response& res) const;
  void Checkpoint(const std::string& id, httplib::Response& res) const;

  JobManager* const jobs_;
  const BodyLimits limits_;
  const std::atomic<bool>* const stopping_;
};

}  // namespace kiln::server
