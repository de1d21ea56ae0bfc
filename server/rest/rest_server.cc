#include "server/rest/rest_server.h"

#include <chrono>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "httplib.h"
#include "kiln/v1/engine.pb.h"
#include "server/core/graph_spec_codec.h"
#include "server/rest/http_status.h"
#include "server/rest/http_util.h"
#include "server/rest/infer_json.h"
#include "server/rest/json_parse.h"
#include "server/rest/rest_json.h"
#include "server/rest/training_routes.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

constexpr const char* kJson = kJsonType;

enum class Route {
  kNone,
  kServerMetadata,
  kLive,
  kReady,
  kModelMetadata,
  kModelReady,
  kModelConfig,
  kModelStats,
  kAllStats,
  kInfer,
  kIndex,
  kLoad,
  kUnload,
  kGraphExecute,
};

struct Match {
  Route route = Route::kNone;
  std::string model;
  std::string version;
};

bool IsPost(Route r) {
  return r == Route::kInfer || r == Route::kIndex || r == Route::kLoad || r == Route::kUnload ||
         r == Route::kGraphExecute;
}

// Splits the (already percent-decoded) path into segments; no route has empty segments.
Match MatchPath(std::string_view path) {
  Match m;
  if (path.empty() || path[0] != '/') return m;
  std::vector<std::string_view> s;
  for (size_t start = 1;;) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    if (end == start) return m;  // empty segment
    s.push_back(path.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  const size_t n = s.size();
  if (s[0] == "v1") {
    if (n == 2 && s[1] == "graphs:execute") m.route = Route::kGraphExecute;
    return m;
  }
  if (s[0] != "v2") return m;
  if (n == 1) {
    m.route = Route::kServerMetadata;
    return m;
  }
  if (s[1] == "health" && n == 3) {
    if (s[2] == "live") m.route = Route::kLive;
    if (s[2] == "ready") m.route = Route::kReady;
    return m;
  }
  if (s[1] == "repository") {
    if (n == 3 && s[2] == "index") m.route = Route::kIndex;
    if (n == 5 && s[2] == "models") {
      m.model = std::string(s[3]);
      if (s[4] == "load") m.route = Route::kLoad;
      if (s[4] == "unload") m.route = Route::kUnload;
    }
    return m;
  }
  if (s[1] != "models" || n < 3) return m;
  if (n == 3 && s[2] == "stats") {
    m.route = Route::kAllStats;
    return m;
  }
  m.model = std::string(s[2]);
  size_t next = 3;
  if (n >= 5 && s[3] == "versions") {
    m.version = std::string(s[4]);
    next = 5;
  }
  if (next == n) {
    m.route = Route::kModelMetadata;
  } else if (next + 1 == n) {
    const std::string_view action = s[next];
    if (action == "ready") m.route = Route::kModelReady;
    if (action == "config") m.route = Route::kModelConfig;
    if (action == "stats") m.route = Route::kModelStats;
    if (action == "infer") m.route = Route::kInfer;
  }
  return m;
}

// Inference-Header-Content-Length: -1 when absent.
absl::StatusOr<int64_t> HeaderLength(const httplib::Request& req) {
  if (!req.has_header("Inference-Header-Content-Length")) return -1;
  const std::string text = req.get_header_value("Inference-Header-Content-Length");
  int64_t n = 0;
  if (text.empty() || text[0] == '+' || !absl::SimpleAtoi(text, &n) || n < 0) {
    return absl::InvalidArgumentError(
        "Inference-Header-Content-Length: not a non-negative integer");
  }
  return n;
}

void Infer(InferenceServer* core, const Match& m, const httplib::Request& req, std::string& body,
           httplib::Response& res) {
  absl::StatusOr<int64_t> header_length = HeaderLength(req);
  if (!header_length.ok()) return SetStatus(res, header_length.status());
  HttpInferRequest request;
  if (*header_length == 0) {  // raw binary body for a single-input model
    absl::StatusOr<ModelMetadata> metadata = core->GetModelMetadata(m.model, m.version);
    if (!metadata.ok()) return SetStatus(res, metadata.status());
    if (absl::Status s = DecodeRawInferRequest(body, *metadata, m.version, &request); !s.ok()) {
      return SetStatus(res, s);
    }
  } else if (absl::Status s =
                 DecodeInferRequest(&body, *header_length, m.model, m.version, &request);
             !s.ok()) {
    return SetStatus(res, s);
  }
  absl::StatusOr<InferResponse> response = core->Infer(request.request);
  if (!response.ok()) return SetStatus(res, response.status());
  HttpInferResponse encoded = EncodeInferResponse(*response, request);
  res.status = 200;
  if (encoded.has_binary) {
    res.set_header("Inference-Header-Content-Length", std::to_string(encoded.json_length));
    res.set_content(std::move(encoded.body), "application/octet-stream");
  } else {
    res.set_content(std::move(encoded.body), kJson);
  }
}

void GraphExecute(InferenceServer* core, const std::string& body, httplib::Response& res) {
  if (!core->Ready()) {
    return SetStatus(res, absl::UnavailableError("the server is shutting down"));
  }
  if (absl::Status s = CheckJson(body, "request body"); !s.ok()) return SetStatus(res, s);
  kiln::v1::ExecuteRequest request;
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = false;
  if (auto s = google::protobuf::util::JsonStringToMessage(body, &request, parse); !s.ok()) {
    return SetStatus(res, absl::InvalidArgumentError(
                              absl::StrCat("request body: not a kiln.v1.ExecuteRequest: ",
                                           std::string(s.message().data(), s.message().size()))));
  }
  if (!request.has_graph()) return SetStatus(res, absl::InvalidArgumentError("graph: missing"));
  std::vector<GraphTensorIn> inputs;
  inputs.reserve(request.inputs_size());
  for (const kiln::v1::Tensor& t : request.inputs()) {
    inputs.push_back({t.name(), t.dtype(), {t.shape().begin(), t.shape().end()}, t.raw()});
  }
  absl::StatusOr<api::RunResult> run =
      core->graphs().Execute(GraphSpecFromProto(request.graph()), inputs);
  if (!run.ok()) return SetStatus(res, run.status());
  kiln::v1::ExecuteResponse response;
  for (api::HostTensor& out : run->outputs) {
    kiln::v1::Tensor* t = response.add_outputs();
    t->set_name(out.name);
    t->set_dtype(out.dtype);
    for (int64_t d : out.shape) t->add_shape(d);
    t->set_raw(std::move(out.data));
  }
  for (const api::KernelTiming& k : run->kernels) {
    kiln::v1::KernelTiming* t = response.add_kernels();
    t->set_name(k.name);
    t->set_device(k.device);
    t->set_duration_ns(k.duration_ns);
  }
  response.set_jit_cache_hit(run->kernels_compiled == 0);
  response.set_compile_ns(run->compile_ns);
  response.set_kernels_compiled(static_cast<uint32_t>(run->kernels_compiled));
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(response, &json).ok()) {
    return SetStatus(res, absl::InternalError("response: cannot be written as JSON"));
  }
  SetJson(res, std::move(json));
}

void Handle(InferenceServer* core, const Match& m, const httplib::Request& req, std::string& body,
            httplib::Response& res) {
  switch (m.route) {
    case Route::kServerMetadata:
      return SetJson(res, ServerMetadataJson(core->Metadata()));
    case Route::kLive:
      res.status = core->Live() ? 200 : 400;
      return;
    case Route::kReady:
      res.status = core->Ready() ? 200 : 400;
      return;
    case Route::kModelReady: {
      absl::StatusOr<bool> ready = core->ModelReady(m.model, m.version);
      if (!ready.ok()) return SetStatus(res, ready.status());
      res.status = *ready ? 200 : 400;
      return;
    }
    case Route::kModelMetadata: {
      auto metadata = core->GetModelMetadata(m.model, m.version);
      if (!metadata.ok()) return SetStatus(res, metadata.status());
      return SetJson(res, ModelMetadataJson(*metadata));
    }
    case Route::kModelConfig: {
      auto config = core->GetModelConfig(m.model, m.version);
      if (!config.ok()) return SetStatus(res, config.status());
      absl::StatusOr<std::string> json = ModelConfigJson(**config);
      if (!json.ok()) return SetStatus(res, json.status());
      return SetJson(res, *std::move(json));
    }
    case Route::kModelStats:
    case Route::kAllStats: {
      auto stats = core->Statistics(m.model, m.version);
      if (!stats.ok()) return SetStatus(res, stats.status());
      return SetJson(res, StatisticsJson(*stats));
    }
    case Route::kInfer:
      return Infer(core, m, req, body, res);
    case Route::kIndex: {
      absl::StatusOr<bool> ready_only = DecodeIndexBody(body);
      if (!ready_only.ok()) return SetStatus(res, ready_only.status());
      return SetJson(res, RepositoryIndexJson(core->RepositoryIndex(*ready_only)));
    }
    case Route::kLoad: {
      absl::StatusOr<LoadOptions> options = DecodeLoadBody(body);
      if (!options.ok()) return SetStatus(res, options.status());
      if (absl::Status s = core->LoadModel(m.model, *options); !s.ok()) return SetStatus(res, s);
      res.status = 200;
      return;
    }
    case Route::kUnload: {
      if (!body.empty()) {
        rapidjson::Document doc;
        if (absl::Status s = ParseJson(body, "request body", &doc); !s.ok()) {
          return SetStatus(res, s);
        }
      }
      if (absl::Status s = core->UnloadModel(m.model); !s.ok()) return SetStatus(res, s);
      res.status = 200;
      return;
    }
    case Route::kGraphExecute:
      return GraphExecute(core, body, res);
    case Route::kNone:
      break;
  }
  SetError(res, 404, "no route");
}

}  // namespace

RestServer::RestServer(const RestServerOptions& options, InferenceServer* core, JobManager* jobs)
    : options_(options),
      core_(core),
      training_(std::make_unique<TrainingRoutes>(
          jobs, BodyLimits{options.max_body_bytes, options.max_chunks}, &stopping_)),
      http_(std::make_unique<httplib::Server>()) {}

RestServer::~RestServer() { Stop(); }

void RestServer::Stop() {
  stopping_ = true;  // event streams end at their next poll instead of holding a pool thread
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<std::unique_ptr<RestServer>> RestServer::Start(const RestServerOptions& options,
                                                              InferenceServer* core,
                                                              JobManager* jobs) {
  std::unique_ptr<RestServer> server(new RestServer(options, core, jobs));
  server->Install();
  httplib::Server& http = *server->http_;
  int port = options.port;
  if (port == 0) {
    port = http.bind_to_any_port(options.address);
    if (port < 0) port = -1;
  } else if (!http.bind_to_port(options.address, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot bind ", options.address, ":", options.port));
  }
  server->port_ = port;
  server->thread_ = std::thread([raw = server.get()] { raw->http_->listen_after_bind(); });
  return server;
}

void RestServer::Install() {
  httplib::Server& http = *http_;
  const RestServerOptions opt = options_;
  http.new_task_queue = [n = opt.thread_count] {
    return new httplib::ThreadPool(static_cast<size_t>(std::max(1, n)));
  };
  http.set_read_timeout(std::chrono::milliseconds(opt.read_timeout_ms));
  http.set_write_timeout(std::chrono::milliseconds(opt.write_timeout_ms));
  http.set_keep_alive_timeout(opt.keep_alive_timeout_s);
  http.set_keep_alive_max_count(static_cast<size_t>(opt.keep_alive_max_requests));
  // Backstop only: the handlers read bodies themselves and stop at max_body_bytes (dataset
  // uploads at their own, larger limit).
  const TrainingRoutes* training = training_.get();
  http.set_payload_max_length(static_cast<size_t>(
      std::max(opt.max_body_bytes, training->MaxContentLength("/v1/training/datasets"))));
  http.set_tcp_nodelay(true);

  // Before routing, with headers read and the body not: reject what must not be read at all.
  http.set_pre_routing_handler([opt, training](const httplib::Request& req,
                                               httplib::Response& res) {
    int64_t header_bytes = 0;
    for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
    if (header_bytes > opt.max_header_bytes ||
        req.headers.size() > static_cast<size_t>(opt.max_header_count)) {
      SetError(res, 431,
               absl::StrCat("request headers: ", req.headers.size(), " lines, ", header_bytes,
                            " bytes exceed the limit of ", opt.max_header_count, " lines, ",
                            opt.max_header_bytes, " bytes"));
      CloseAfter(res);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.has_header("Content-Length")) {
      const std::string text = req.get_header_value("Content-Length");
      uint64_t length = 0;
      if (!absl::SimpleAtoi(text, &length) || text.empty() || text[0] == '+' || text[0] == '-') {
        SetError(res, 400, "Content-Length: not a non-negative integer");
        CloseAfter(res);
        return httplib::Server::HandlerResponse::Handled;
      }
      const int64_t limit = TrainingRoutes::Matches(req.path) ? training->MaxContentLength(req.path)
                                                              : opt.max_body_bytes;
      if (length > static_cast<uint64_t>(limit)) {
        SetError(res, 413,
                 absl::StrCat("request body: Content-Length ", length, " exceeds the limit of ",
                              limit, " bytes"));
        CloseAfter(res);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (IsChunked(req) && req.get_header_value("Transfer-Encoding") != "chunked") {
      SetError(res, 501, "Transfer-Encoding: only chunked is supported");
      CloseAfter(res);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  auto dispatch = [this](const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader* reader) {
    if (TrainingRoutes::Matches(req.path)) return training_->Handle(req, res, reader);
    const Match m = MatchPath(req.path);
    if (m.route == Route::kNone) {
      SetError(res, 404, absl::StrCat("no route for ", req.method, " ", req.path.substr(0, 256)));
      if (reader != nullptr) CloseAfter(res);
      return;
    }
    const bool post = IsPost(m.route);
    const bool allowed =
        post ? req.method == "POST" : (req.method == "GET" || req.method == "HEAD");
    if (!allowed) return MethodNotAllowed(res, req, post ? "POST" : "GET", reader != nullptr);
    std::string body;
    if (!ReadBody({options_.max_body_bytes, options_.max_chunks}, req, reader, &body, res)) return;
    Handle(core_, m, req, body, res);
  };

  http.Get(".*", [dispatch](const httplib::Request& req, httplib::Response& res) {
    dispatch(req, res, nullptr);
  });
  http.Post(".*",
            [dispatch](const httplib::Request& req, httplib::Response& res,
                       const httplib::ContentReader& reader) { dispatch(req, res, &reader); });
  auto not_allowed = [dispatch](const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& reader) {
    dispatch(req, res, &reader);
  };
  http.Put(".*", not_allowed);
  http.Patch(".*", not_allowed);
  http.Delete(".*", not_allowed);
  http.Options(".*", [dispatch](const httplib::Request& req, httplib::Response& res) {
    dispatch(req, res, nullptr);
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        SetError(res, 500, "internal error while handling the request");
      });
}

}  // namespace kiln::server
