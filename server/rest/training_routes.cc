#include "server/rest/training_routes.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/api/status.h"
#include "google/protobuf/util/json_util.h"
#include "kiln/v1/training.pb.h"
#include "server/rest/http_status.h"
#include "server/rest/json_parse.h"

namespace kiln::server {
namespace {

using kiln::v1::JobEvent;

constexpr char kPrefix[] = "/v1/training/";
constexpr char kDatasetsPath[] = "/v1/training/datasets";
constexpr int64_t kMultipartSlack = 1 << 20;  // part headers and boundaries of an upload
constexpr size_t kUploadBuffer = 1 << 20;     // bytes held per upload before writing
constexpr size_t kMaxPendingEvents = 256;     // STEP events beyond this are dropped
constexpr auto kPoll = std::chrono::milliseconds(250);
constexpr auto kKeepAlive = std::chrono::seconds(15);

absl::Status NoJobs() { return absl::UnavailableError("training jobs need kilnd --data-dir"); }

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opt;
  opt.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(m, &out, opt).ok()) return "{}";
  return out;
}

void Reply(httplib::Response& res, const absl::StatusOr<kiln::v1::Job>& job) {
  if (!job.ok()) return SetStatus(res, job.status());
  SetJson(res, ToJson(*job));
}

std::string KindName(JobEvent::Kind kind) {
  switch (kind) {
    case JobEvent::STATE:
      return "state";
    case JobEvent::STEP:
      return "step";
    case JobEvent::EVAL:
      return "eval";
    case JobEvent::CHECKPOINT:
      return "checkpoint";
    default:
      return "event";
  }
}

bool EndsWatch(const JobEvent& e) {
  return e.kind() == JobEvent::STATE &&
         (JobManager::IsTerminal(e.job().state()) || e.job().state() == kiln::v1::INTERRUPTED);
}

// One watcher's events, framed, between the job's worker thread (Push) and the connection's
// thread (the content provider).
struct EventStream {
  bool sse = false;
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;        // framed bytes not yet written, guarded by mu
  size_t pending_events = 0;  // guarded by mu
  bool final_queued = false;  // the last event is in `pending` (or written), guarded by mu
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();

  std::string Frame(const JobEvent& e) const {
    const std::string json = ToJson(e);
    if (sse) return absl::StrCat("event: ", KindName(e.kind()), "\ndata: ", json, "\n\n");
    return absl::StrCat(json, "\n");
  }
  void Push(const JobEvent& e) {
    std::string framed = Frame(e);
    {
      std::lock_guard<std::mutex> l(mu);
      if (final_queued) return;
      if (pending_events >= kMaxPendingEvents && e.kind() == JobEvent::STEP) return;
      pending += framed;
      ++pending_events;
      final_queued = EndsWatch(e);
    }
    cv.notify_all();
  }
};

// The job id of "/v1/training/jobs/{id}..." paths: what lies between the prefix and `suffix`.
struct JobPath {
  enum Kind {
    kNone,
    kCollection,
    kJob,
    kCancel,
    kResume,
    kEvents,
    kCheckpoint,
    kDatasets
  } kind = kNone;
  std::string id;
};

JobPath ParseJobPath(std::string_view path) {
  JobPath p;
  if (path == kDatasetsPath) {
    p.kind = JobPath::kDatasets;
    return p;
  }
  constexpr std::string_view jobs = "/v1/training/jobs";
  if (path.substr(0, jobs.size()) != jobs) return p;
  std::string_view rest = path.substr(jobs.size());
  if (rest.empty()) {
    p.kind = JobPath::kCollection;
    return p;
  }
  if (rest[0] != '/' || rest.size() == 1) return p;
  rest.remove_prefix(1);
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    if (slash == 0) return p;
    if (rest.substr(slash) == "/events") {
      p.kind = JobPath::kEvents;
    } else if (rest.substr(slash) == "/checkpoint") {
      p.kind = JobPath::kCheckpoint;
    } else {
      return p;
    }
    p.id = std::string(rest.substr(0, slash));
    return p;
  }
  for (const auto& [verb, kind] : {std::pair{std::string_view(":cancel"), JobPath::kCancel},
                                   std::pair{std::string_view(":resume"), JobPath::kResume}}) {
    if (rest.size() > verb.size() && rest.substr(rest.size() - verb.size()) == verb) {
      p.id = std::string(rest.substr(0, rest.size() - verb.size()));
      p.kind = kind;
      return p;
    }
  }
  p.id = std::string(rest);
  p.kind = JobPath::kJob;
  return p;
}

// A POST body that carries nothing (cancel, resume): empty, or a JSON object.
absl::Status CheckEmptyOrJson(const std::string& body) {
  if (body.empty()) return absl::OkStatus();
  rapidjson::Document doc;
  KILN_RETURN_IF_ERROR(ParseJson(body, "request body", &doc));
  if (!doc.IsObject()) return absl::InvalidArgumentError("request body: must be a JSON object");
  return absl::OkStatus();
}

// Multipart part names of an upload -> DatasetChunk::File.
kiln::v1::DatasetChunk::File PartFile(const std::string& name) {
  if (name == "train_images" || name == "TRAIN_IMAGES") return kiln::v1::DatasetChunk::TRAIN_IMAGES;
  if (name == "train_labels" || name == "TRAIN_LABELS") return kiln::v1::DatasetChunk::TRAIN_LABELS;
  if (name == "test_images" || name == "TEST_IMAGES") return kiln::v1::DatasetChunk::TEST_IMAGES;
  if (name == "test_labels" || name == "TEST_LABELS") return kiln::v1::DatasetChunk::TEST_LABELS;
  return kiln::v1::DatasetChunk::FILE_UNSPECIFIED;
}

}  // namespace

bool TrainingRoutes::Matches(std::string_view path) {
  return path.substr(0, sizeof(kPrefix) - 1) == kPrefix;
}

int64_t TrainingRoutes::MaxContentLength(std::string_view path) const {
  if (path == kDatasetsPath && jobs_ != nullptr) {
    return jobs_->max_dataset_bytes() + kMultipartSlack;
  }
  return limits_.max_body_bytes;
}

void TrainingRoutes::Handle(const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader* reader) const {
  const JobPath p = ParseJobPath(req.path);
  const bool has_body = reader != nullptr && (req.has_header("Content-Length") || IsChunked(req));
  if (p.kind == JobPath::kNone) {
    SetError(res, 404, absl::StrCat("no route for ", req.method, " ", req.path.substr(0, 256)));
    if (has_body) CloseAfter(res);
    return;
  }
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";
  const bool get_only =
      p.kind == JobPath::kJob || p.kind == JobPath::kEvents || p.kind == JobPath::kCheckpoint;
  const char* allow = p.kind == JobPath::kCollection ? "GET, POST" : get_only ? "GET" : "POST";
  if (!((get && absl::StrContains(allow, "GET")) || (post && absl::StrContains(allow, "POST")))) {
    return MethodNotAllowed(res, req, allow, has_body);
  }
  if (jobs_ == nullptr) {
    SetStatus(res, NoJobs());
    if (has_body) CloseAfter(res);
    return;
  }
  if (p.kind == JobPath::kDatasets) return Upload(req, res, reader);
  if (req.is_multipart_form_data()) {
    SetError(res, 415, "Content-Type: multipart/form-data is only for POST /v1/training/datasets");
    if (has_body) CloseAfter(res);
    return;
  }
  std::string body;
  if (!ReadBody(limits_, req, reader, &body, res)) return;
  switch (p.kind) {
    case JobPath::kCollection: {
      if (get) {
        kiln::v1::ListJobsResponse list;
        for (kiln::v1::Job& j : jobs_->List()) *list.add_jobs() = std::move(j);
        return SetJson(res, ToJson(list));
      }
      if (absl::Status s = CheckJson(body, "request body"); !s.ok()) return SetStatus(res, s);
      kiln::v1::JobSpec spec;
      google::protobuf::util::JsonParseOptions parse;
      parse.ignore_unknown_fields = false;
      if (auto s = google::protobuf::util::JsonStringToMessage(body, &spec, parse); !s.ok()) {
        return SetStatus(res, absl::InvalidArgumentError(absl::StrCat(
                                  "request body: not a kiln.v1.JobSpec: ",
                                  std::string(s.message().data(), s.message().size()))));
      }
      return Reply(res, jobs_->Start(spec));
    }
    case JobPath::kJob: {
      const std::string losses = req.get_param_value("include_losses");
      if (!losses.empty() && losses != "true" && losses != "false" && losses != "1" &&
          losses != "0") {
        return SetStatus(res,
                         absl::InvalidArgumentError("include_losses: must be true, false, 1 or 0"));
      }
      return Reply(res, jobs_->Get(p.id, losses == "true" || losses == "1"));
    }
    case JobPath::kCancel:
    case JobPath::kResume: {
      if (absl::Status s = CheckEmptyOrJson(body); !s.ok()) return SetStatus(res, s);
      return Reply(res, p.kind == JobPath::kCancel ? jobs_->Cancel(p.id) : jobs_->Resume(p.id));
    }
    case JobPath::kEvents:
      return Events(p.id, req, res);
    case JobPath::kCheckpoint:
      return Checkpoint(p.id, res);
    default:
      break;
  }
  SetError(res, 404, "no route");
}

void TrainingRoutes::Events(const std::string& id, const httplib::Request& req,
                            httplib::Response& res) const {
  auto stream = std::make_shared<EventStream>();
  stream->sse = absl::StrContains(req.get_header_value("Accept"), "text/event-stream");
  absl::StatusOr<uint64_t> token =
      jobs_->Subscribe(id, [stream](const JobEvent& e) { stream->Push(e); });
  if (!token.ok()) return SetStatus(res, token.status());
  absl::StatusOr<kiln::v1::Job> job = jobs_->Get(id);
  if (!job.ok()) {
    jobs_->Unsubscribe(*token);
    return SetStatus(res, job.status());
  }
  {
    // The job now goes first; events that raced in behind the subscription follow it.
    JobEvent first;
    first.set_kind(JobEvent::STATE);
    *first.mutable_job() = *job;
    const std::string framed = stream->Frame(first);
    std::lock_guard<std::mutex> l(stream->mu);
    if (EndsWatch(first)) {
      stream->pending = framed;
      stream->final_queued = true;
    } else {
      stream->pending.insert(0, framed);
    }
    ++stream->pending_events;
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  JobManager* jobs = jobs_;
  const std::atomic<bool>* stopping = stopping_;
  res.set_chunked_content_provider(
      stream->sse ? "text/event-stream" : "application/x-ndjson",
      [stream, stopping](size_t, httplib::DataSink& sink) {
        std::string out;
        bool end = false;
        const bool stop = stopping->load();
        {
          std::unique_lock<std::mutex> l(stream->mu);
          if (!stop) {
            stream->cv.wait_for(l, kPoll,
                                [&] { return !stream->pending.empty() || stopping->load(); });
          }
          out.swap(stream->pending);
          stream->pending_events = 0;
          end = stream->final_queued;
        }
        const auto now = std::chrono::steady_clock::now();
        if (!end && stopping->load()) {
          out += stream->sse ? "event: error\ndata: {\"error\":\"kilnd is shutting down\"}\n\n"
                             : absl::StrCat(ErrorBody("kilnd is shutting down"), "\n");
          end = true;
        }
        if (out.empty() && now - stream->last_write >= kKeepAlive) {
          out = stream->sse ? ": keep-alive\n\n" : "\n";
        }
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) return false;
          stream->last_write = now;
        }
        if (end) sink.done();
        return true;
      },
      [jobs, token = *token](bool) { jobs->Unsubscribe(token); });
}

void TrainingRoutes::Checkpoint(const std::string& id, httplib::Response& res) const {
  absl::StatusOr<std::unique_ptr<JobManager::CheckpointFile>> opened = jobs_->OpenCheckpoint(id);
  if (!opened.ok()) return SetStatus(res, opened.status());
  std::shared_ptr<const JobManager::CheckpointFile> file = *std::move(opened);
  res.status = 200;
  res.set_header("Content-Disposition", absl::StrCat("attachment; filename=\"", id, "-step",
                                                     file->step(), ".safetensors\""));
  res.set_header("X-Kiln-Checkpoint-Step", std::to_string(file->step()));
  res.set_header("X-Kiln-Checkpoint-Sha256", file->sha256());
  res.set_content_provider(file->bytes(), "application/octet-stream",
                           [file](size_t offset, size_t length, httplib::DataSink& sink) {
                             std::string piece;
                             absl::StatusOr<size_t> got = file->Read(
                                 offset, std::min<size_t>(length, kUploadBuffer), &piece);
                             if (!got.ok() || *got == 0)
                               return false;  // the connection is closed short
                             return sink.write(piece.data(), piece.size());
                           });
}

void TrainingRoutes::Upload(const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader* reader) const {
  const bool has_body = reader != nullptr && (req.has_header("Content-Length") || IsChunked(req));
  auto refuse = [&](int http, const std::string& message) {
    SetError(res, http, message);
    if (has_body) CloseAfter(res);
  };
  if (!req.is_multipart_form_data()) {
    return refuse(415,
                  "Content-Type: must be multipart/form-data with the parts train_images, "
                  "train_labels[, test_images, test_labels]");
  }
  if (!has_body) return refuse(411, "request body: send it with Content-Length or chunked");
  absl::StatusOr<std::unique_ptr<JobManager::Upload>> started = jobs_->BeginUpload();
  if (!started.ok())
    return refuse(HttpStatusFor(started.status().code()), std::string(started.status().message()));
  JobManager::Upload& upload = **started;
  const int64_t max_bytes = jobs_->max_dataset_bytes();
  absl::Status error;
  bool over_limit = false;
  auto append = [&](kiln::v1::DatasetChunk& chunk) {
    if (!error.ok()) return false;
    error = upload.Append(chunk);
    if (!error.ok() && upload.over_limit()) over_limit = true;
    return error.ok();
  };
  if (req.has_param("name")) {
    kiln::v1::DatasetChunk chunk;
    chunk.set_name(req.get_param_value("name"));
    if (!append(chunk)) return refuse(HttpStatusFor(error.code()), std::string(error.message()));
  }

  // Parse state: the current part, and up to kUploadBuffer of its bytes not yet written.
  kiln::v1::DatasetChunk chunk;
  std::string part_name;
  bool in_name_part = false, named = req.has_param("name"), any_file = false;
  std::string name_text;
  bool seen[5] = {false, false, false, false, false};
  int64_t pieces = 0;
  const int64_t max_pieces = limits_.max_chunks + max_bytes / 1024;
  const bool chunked = IsChunked(req);
  chunk.mutable_data()->reserve(kUploadBuffer);
  auto flush = [&]() {
    if (chunk.data().empty()) return true;
    const bool ok = append(chunk);
    chunk.mutable_data()->clear();
    return ok;
  };
  auto finish_part = [&]() {
    if (in_name_part) {
      kiln::v1::DatasetChunk first;
      first.set_name(name_text);
      in_name_part = false;
      return append(first);
    }
    return flush();
  };
  const bool ok = (*reader)(
      [&](const httplib::MultipartFormData& part) {
        if (!finish_part()) return false;
        part_name = part.name.substr(0, 64);
        if (part.name == "name") {
          if (named || any_file) {
            error = absl::InvalidArgumentError(
                "name: send it once, as the first part (or as ?name=), before the file parts");
            return false;
          }
          named = in_name_part = true;
          name_text.clear();
          return true;
        }
        const kiln::v1::DatasetChunk::File file = PartFile(part.name);
        if (file == kiln::v1::DatasetChunk::FILE_UNSPECIFIED) {
          error = absl::InvalidArgumentError(absl::StrCat(
              "part '", part_name,
              "': unknown (known: name, train_images, train_labels, test_images, test_labels)"));
          return false;
        }
        if (seen[file]) {
          error = absl::InvalidArgumentError(absl::StrCat("part '", part_name, "': sent twice"));
          return false;
        }
        seen[file] = any_file = true;
        chunk.set_file(file);
        return true;
      },
      [&](const char* data, size_t n) {
        if (chunked && ++pieces > max_pieces) {
          error = absl::ResourceExhaustedError(absl::StrCat("request body: more than ", max_pieces,
                                                            " pieces (the limit for an upload)"));
          over_limit = true;
          return false;
        }
        if (in_name_part) {
          if (name_text.size() + n > kMaxDatasetPath) {
            error = absl::InvalidArgumentError(
                absl::StrCat("name: longer than the limit of ", kMaxDatasetPath, " characters"));
            return false;
          }
          name_text.append(data, n);
          return true;
        }
        if (chunk.file() == kiln::v1::DatasetChunk::FILE_UNSPECIFIED) return true;
        // Over the limit: write now, so Append refuses it with the limit named.
        if (upload.bytes() + static_cast<int64_t>(chunk.data().size() + n) > max_bytes) {
          chunk.mutable_data()->append(data, n);
          return flush();
        }
        chunk.mutable_data()->append(data, n);
        return chunk.data().size() < kUploadBuffer || flush();
      });
  if (ok && !finish_part()) {
    // fall through to the error below
  } else if (ok && !any_file) {
    error = absl::InvalidArgumentError(
        "request body: no file parts (need train_images and train_labels)");
  }
  if (!ok || !error.ok()) {
    if (over_limit) {
      return refuse(413, std::string(error.message()));
    }
    if (!error.ok()) {
      // A full disk is 507 Insufficient Storage, not "too many requests".
      const int http = absl::IsResourceExhausted(error) ? 507 : HttpStatusFor(error.code());
      return refuse(http, std::string(error.message()));
    }
    return refuse(400,
                  "request body: incomplete or malformed multipart/form-data (framing, "
                  "boundary or timeout)");
  }
  absl::StatusOr<kiln::v1::UploadDatasetResponse> done = upload.Finish();
  if (!done.ok()) return SetStatus(res, done.status());
  SetJson(res, ToJson(*done));
}

}  // namespace kiln::server
