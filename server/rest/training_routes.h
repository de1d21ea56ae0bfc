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
//                                          "event: error") at once.
//   GET  /v1/training/jobs/{id}/checkpoint the newest valid checkpoint (GetCheckpoint) as
//                                          application/octet-stream (safetensors), with
//                                          X-Kiln-Checkpoint-Step and X-Kiln-Checkpoint-Sha256;
//                                          404 when the job has none yet
//   POST /v1/training/datasets[?name=N]    UploadDataset: multipart/form-data with file parts
//                                          train_images, train_labels[, test_images,
//                                          test_labels] (IDX, raw or gzip) and an optional text
//                                          part "name" before them; Content-Length or chunked.
//                                          Written to disk as it arrives (about 2 MiB held per
//                                          request: one body piece, one part buffer)
//                                          -> UploadDatasetResponse.
// Errors: {"error": "..."} with the status of http_status.h, messages naming the field and the
// limit; 503 when kilnd runs without --data-dir. Upload limits are the gRPC ones: --max-dataset-
// bytes in all (413 naming it, before reading when Content-Length says so), and the IDX checks;
// a full disk is 507 naming ENOSPC; a multipart body on any other route is 415;
// a chunked upload may have at most --http-max-chunks + max-dataset-bytes / 1 KiB pieces.
// Threads: Plan runs on an I/O thread and only routes; handlers and the upload run on worker
// threads; an event stream holds no thread between events (http_message.h's ResponseStream).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/core/job_manager.h"
#include "server/rest/http_message.h"
#include "server/rest/http_util.h"

namespace kiln::server {

class TrainingRoutes {
 public:
  // `jobs` may be null (no --data-dir); it must outlive this object.
  TrainingRoutes(JobManager* jobs, BodyLimits limits) : jobs_(jobs), limits_(limits) {}

  // True for paths under /v1/training/.
  static bool Matches(std::string_view path);
  // The largest Content-Length accepted for `path`: the dataset limit plus 1 MiB of multipart
  // framing for uploads (whatever max_body_bytes is), else max_body_bytes.
  int64_t MaxContentLength(std::string_view path) const;
  // Routes a request under /v1/training/ from its head (Router::Plan's contract).
  RoutePlan Plan(const HttpRequest& req) const;

 private:
  void Handle(const HttpRequest& req, const std::string& body, HttpResponse* res) const;
  void Events(const std::string& id, const HttpRequest& req, HttpResponse* res) const;
  void Checkpoint(const std::string& id, HttpResponse* res) const;

  JobManager* const jobs_;
  const BodyLimits limits_;
};

// The dataset upload's body sink (dataset_upload.cc): multipart parts streamed into a
// JobManager::Upload. `boundary` comes from the request's Content-Type.
std::unique_ptr<BodySink> MakeDatasetUploadSink(JobManager* jobs, const HttpRequest& req,
                                                std::string boundary);

}  // namespace kiln::server
