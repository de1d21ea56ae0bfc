#include "server/rest/training_routes.h"

#include <algorithm>
#include <chrono>
#include <functional>
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
#include "server/rest/multipart.h"

namespace kiln::server {
namespace {

using kiln::v1::JobEvent;

constexpr char kPrefix[] = "/v1/training/";
constexpr char kDatasetsPath[] = "/v1/training/datasets";
constexpr int64_t kMultipartSlack = 1 << 20;  // part headers and boundaries of an upload
constexpr size_t kMaxPendingEvents = 256;     // STEP events beyond this are dropped
constexpr auto kKeepAlive = std::chrono::seconds(15);

absl::Status NoJobs() { return absl::UnavailableError("training jobs need kilnd --data-dir"); }

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opt;
  opt.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(m, &out, opt).ok()) return "{}";
  return out;
}

void Reply(HttpResponse* res, const absl::StatusOr<kiln::v1::Job>& job) {
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

// One watcher's events, framed, between the job's worker thread (Push) and the connection that
// writes them (Take, on its loop). Holds no thread: Push wakes the connection.
class EventStream : public ResponseStream {
 public:
  EventStream(bool sse, JobManager* jobs) : sse_(sse), jobs_(jobs) {}

  std::string Frame(const JobEvent& e) const {
    const std::string json = ToJson(e);
    if (sse_) return absl::StrCat("event: ", KindName(e.kind()), "\ndata: ", json, "\n\n");
    return absl::StrCat(json, "\n");
  }
  // The job as it is now goes first; events that raced in behind the subscription follow it.
  void First(const JobEvent& e, uint64_t token) {
    const std::string framed = Frame(e);
    std::lock_guard<std::mutex> l(mu_);
    token_ = token;
    if (EndsWatch(e)) {
      pending_ = framed;
      final_queued_ = true;
    } else {
      pending_.insert(0, framed);
    }
    ++pending_events_;
  }
  void Push(const JobEvent& e) {
    std::string framed = Frame(e);
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (final_queued_ || closed_) return;
      if (pending_events_ >= kMaxPendingEvents && e.kind() == JobEvent::STEP) return;
      pending_ += framed;
      ++pending_events_;
      final_queued_ = EndsWatch(e);
      wake = wake_;
    }
    if (wake) wake();
  }

  void SetWake(std::function<void()> wake) override {
    std::lock_guard<std::mutex> l(mu_);
    wake_ = std::move(wake);
  }
  std::string Take(bool* end) override {
    std::lock_guard<std::mutex> l(mu_);
    std::string out;
    out.swap(pending_);
    pending_events_ = 0;
    *end = final_queued_;
    return out;
  }
  std::string KeepAlive() const override { return sse_ ? ": keep-alive\n\n" : "\n"; }
  std::chrono::milliseconds KeepAliveInterval() const override { return kKeepAlive; }
  std::string StopMessage() const override {
    return sse_ ? "event: error\ndata: {\"error\":\"kilnd is shutting down\"}\n\n"
                : absl::StrCat(ErrorBody("kilnd is shutting down"), "\n");
  }
  void Close() override {
    uint64_t token = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return;
      closed_ = true;
      token = token_;
      wake_ = nullptr;
    }
    // Never called from inside a listener (the connection calls it), so this cannot deadlock.
    if (token != 0) jobs_->Unsubscribe(token);
  }

 private:
  const bool sse_;
  JobManager* const jobs_;
  std::mutex mu_;
  std::string pending_;         // framed bytes not yet taken, guarded by mu_
  size_t pending_events_ = 0;   // guarded by mu_
  bool final_queued_ = false;   // the last event is in `pending_` (or taken), guarded by mu_
  bool closed_ = false;         // guarded by mu_
  uint64_t token_ = 0;          // guarded by mu_
  std::function<void()> wake_;  // guarded by mu_
};

// A checkpoint file sent as a chunked body, one piece per Take (the connection asks for the next
// piece when the previous one is written, so at most one piece is in memory).
class FileStream : public ResponseStream {
 public:
  explicit FileStream(std::shared_ptr<const JobManager::CheckpointFile> file)
      : file_(std::move(file)) {}
  void SetWake(std::function<void()>) override {}
  std::string Take(bool* end) override {
    std::string piece;
    absl::StatusOr<size_t> got = file_->Read(offset_, kPieceBytes, &piece);
    // A read error ends the body short: the client sees fewer bytes than the Sha256 header covers.
    if (!got.ok()) piece.clear();
    offset_ += piece.size();
    *end = piece.empty() || offset_ >= file_->bytes();
    return piece;
  }
  std::string KeepAlive() const override { return ""; }
  std::chrono::milliseconds KeepAliveInterval() const override { return kKeepAlive; }
  std::string StopMessage() const override { return ""; }
  void Close() override {}

 private:
  static constexpr size_t kPieceBytes = 1 << 20;
  const std::shared_ptr<const JobManager::CheckpointFile> file_;
  uint64_t offset_ = 0;
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

RoutePlan TrainingRoutes::Plan(const HttpRequest& req) const {
  RoutePlan plan;
  plan.max_body_bytes = limits_.max_body_bytes;
  plan.max_chunks = limits_.max_chunks;
  const JobPath p = ParseJobPath(req.path);
  if (p.kind == JobPath::kNone) {
    plan.answer =
        Answer(404, absl::StrCat("no route for ", req.method, " ", req.path.substr(0, 256)));
    return plan;
  }
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";
  const bool get_only =
      p.kind == JobPath::kJob || p.kind == JobPath::kEvents || p.kind == JobPath::kCheckpoint;
  const char* allow = p.kind == JobPath::kCollection ? "GET, POST" : get_only ? "GET" : "POST";
  if (!((get && absl::StrContains(allow, "GET")) || (post && absl::StrContains(allow, "POST")))) {
    plan.answer = MethodNotAllowed(req, allow);
    return plan;
  }
  if (jobs_ == nullptr) {
    HttpResponse res;
    SetStatus(&res, NoJobs());
    plan.answer = std::move(res);
    return plan;
  }
  if (p.kind == JobPath::kDatasets) {
    std::string boundary;
    if (!req.IsMultipart()) {
      plan.answer = Answer(415,
                           "Content-Type: must be multipart/form-data with the parts "
                           "train_images, train_labels[, test_images, test_labels]");
    } else if (!MultipartReader::BoundaryOf(req.Header("Content-Type"), &boundary)) {
      plan.answer = Answer(400,
                           "Content-Type: multipart/form-data without a boundary (1-70 "
                           "characters)");
    } else if (!req.has_body()) {
      plan.answer = Answer(411,
                           "request body: missing (send the multipart body with Content-Length "
                           "or chunked)");
    } else {
      plan.max_body_bytes = MaxContentLength(req.path);
      plan.max_chunks = limits_.max_chunks + jobs_->max_dataset_bytes() / 1024;
      plan.sink = MakeDatasetUploadSink(jobs_, req, std::move(boundary));
    }
    return plan;
  }
  if (req.IsMultipart()) {
    plan.answer = MultipartNotHere();
    return plan;
  }
  plan.handle = [this, p](const HttpRequest& r, std::string& body, HttpResponse* res) {
    if (p.kind == JobPath::kEvents) return Events(p.id, r, res);
    Handle(r, body, res);
  };
  return plan;
}

void TrainingRoutes::Handle(const HttpRequest& req, const std::string& body,
                            HttpResponse* res) const {
  const JobPath p = ParseJobPath(req.path);
  const bool get = req.method == "GET" || req.method == "HEAD";
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
      const std::string_view losses = req.Param("include_losses");
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
    case JobPath::kCheckpoint:
      return Checkpoint(p.id, res);
    default:
      break;
  }
  SetError(res, 404, "no route");
}

void TrainingRoutes::Events(const std::string& id, const HttpRequest& req,
                            HttpResponse* res) const {
  const bool sse = req.Header("Accept").find("text/event-stream") != std::string_view::npos;
  auto stream = std::make_shared<EventStream>(sse, jobs_);
  absl::StatusOr<uint64_t> token =
      jobs_->Subscribe(id, [stream](const JobEvent& e) { stream->Push(e); });
  if (!token.ok()) return SetStatus(res, token.status());
  absl::StatusOr<kiln::v1::Job> job = jobs_->Get(id);
  if (!job.ok()) {
    jobs_->Unsubscribe(*token);
    return SetStatus(res, job.status());
  }
  JobEvent first;
  first.set_kind(JobEvent::STATE);
  *first.mutable_job() = *std::move(job);
  stream->First(first, *token);
  res->status = 200;
  res->content_type = sse ? "text/event-stream" : "application/x-ndjson";
  res->headers.emplace_back("Cache-Control", "no-cache");
  res->headers.emplace_back("X-Accel-Buffering", "no");
  res->stream = std::move(stream);
}

void TrainingRoutes::Checkpoint(const std::string& id, HttpResponse* res) const {
  absl::StatusOr<std::unique_ptr<JobManager::CheckpointFile>> opened = jobs_->OpenCheckpoint(id);
  if (!opened.ok()) return SetStatus(res, opened.status());
  std::shared_ptr<const JobManager::CheckpointFile> file = *std::move(opened);
  res->status = 200;
  res->content_type = "application/octet-stream";
  res->headers.emplace_back("Content-Disposition", absl::StrCat("attachment; filename=\"", id, "-step",
                                                                file->step(), ".safetensors\""));
  res->headers.emplace_back("X-Kiln-Checkpoint-Step", std::to_string(file->step()));
  res->headers.emplace_back("X-Kiln-Checkpoint-Sha256", file->sha256());
  res->stream = std::make_shared<FileStream>(std::move(file));
}

}  // namespace kiln::server
