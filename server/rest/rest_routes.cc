#include "server/rest/rest_routes.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "kiln/v1/engine.pb.h"
#include "server/core/graph_spec_codec.h"
#include "server/rest/http_status.h"
#include "server/rest/infer_json.h"
#include "server/rest/json_parse.h"
#include "server/rest/profile_json.h"
#include "server/rest/rest_json.h"
#include "server/rest/viz_routes.h"

namespace kiln::server {
namespace {

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
  kShmStatusAll,
  kShmStatusRegion,
  kShmRegister,
  kShmUnregisterAll,
  kShmUnregisterRegion,
  kLogging,  // GET reads, POST updates
  kTrace,       // GET reads, POST updates the global trace settings
  kModelTrace,  // ... a model's
  kProfile,     // GET /v2/profile?model=M&seconds=N: a kernel profile (Chrome trace JSON)
  kViz,         // GET /viz[/...]: the VIZ page and its documents (viz_routes.h)
};

struct Match {
  Route route = Route::kNone;
  std::string model;
  std::string version;
  std::string region;  // system shared memory routes
  std::string viz;     // kViz: the document (viz_routes.h)
};

bool IsPost(Route r) {
  return r == Route::kInfer || r == Route::kIndex || r == Route::kLoad || r == Route::kUnload ||
         r == Route::kGraphExecute || r == Route::kShmRegister || r == Route::kShmUnregisterAll ||
         r == Route::kShmUnregisterRegion;
}

// Splits the (already percent-decoded) path into segments; no route has empty segments.
Match MatchPath(std::string_view path) {
  Match m;
  if (MatchVizPath(path, &m.viz)) {
    m.route = Route::kViz;
    return m;
  }
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
  if (s[1] == "logging" && n == 2) {
    m.route = Route::kLogging;
    return m;
  }
  if (s[1] == "profile" && n == 2) {
    m.route = Route::kProfile;
    return m;
  }
  if (s[1] == "trace" && n == 3 && s[2] == "setting") {
    m.route = Route::kTrace;
    return m;
  }
  if (s[1] == "systemsharedmemory") {
    if (n == 3 && s[2] == "status") m.route = Route::kShmStatusAll;
    if (n == 3 && s[2] == "unregister") m.route = Route::kShmUnregisterAll;
    if (n == 5 && s[2] == "region") {
      m.region = std::string(s[3]);
      if (s[4] == "status") m.route = Route::kShmStatusRegion;
      if (s[4] == "register") m.route = Route::kShmRegister;
      if (s[4] == "unregister") m.route = Route::kShmUnregisterRegion;
    }
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
  if (next == 3 && n == 5 && s[3] == "trace" && s[4] == "setting") {
    m.route = Route::kModelTrace;
  } else if (next == n) {
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

std::string_view EndpointOf(Route route) {
  switch (route) {
    case Route::kNone: return "";
    case Route::kServerMetadata: return "GET /v2";
    case Route::kLive: return "GET /v2/health/live";
    case Route::kReady: return "GET /v2/health/ready";
    case Route::kModelMetadata: return "GET /v2/models/{m}";
    case Route::kModelReady: return "GET /v2/models/{m}/ready";
    case Route::kModelConfig: return "GET /v2/models/{m}/config";
    case Route::kModelStats: return "GET /v2/models/{m}/stats";
    case Route::kAllStats: return "GET /v2/models/stats";
    case Route::kInfer: return "POST /v2/models/{m}/infer";
    case Route::kIndex: return "POST /v2/repository/index";
    case Route::kLoad: return "POST /v2/repository/models/{m}/load";
    case Route::kUnload: return "POST /v2/repository/models/{m}/unload";
    case Route::kGraphExecute: return "POST /v1/graphs:execute";
    case Route::kShmStatusAll: return "GET /v2/systemsharedmemory/status";
    case Route::kShmStatusRegion: return "GET /v2/systemsharedmemory/region/{r}/status";
    case Route::kShmRegister: return "POST /v2/systemsharedmemory/region/{r}/register";
    case Route::kShmUnregisterAll: return "POST /v2/systemsharedmemory/unregister";
    case Route::kShmUnregisterRegion: return "POST /v2/systemsharedmemory/region/{r}/unregister";
    case Route::kLogging: return "* /v2/logging";
    case Route::kTrace: return "* /v2/trace/setting";
    case Route::kModelTrace: return "* /v2/models/{m}/trace/setting";
    case Route::kProfile: return "GET /v2/profile";
    case Route::kViz: return "GET /viz/api/{doc}";  // KserveRoutes::EndpointName names each document
  }
  return "";
}

// Inference-Header-Content-Length: -1 when absent.
absl::StatusOr<int64_t> HeaderLength(const HttpRequest& req) {
  if (!req.HasHeader("Inference-Header-Content-Length")) return -1;
  if (const int n = req.HeaderCount("Inference-Header-Content-Length"); n > 1) {
    // Two values would split the body two ways (as two Content-Lengths would).
    return absl::InvalidArgumentError(
        absl::StrCat("Inference-Header-Content-Length: sent ", n, " times"));
  }
  const std::string text(req.Header("Inference-Header-Content-Length"));
  int64_t n = 0;
  if (text.empty() || text[0] == '+' || !absl::SimpleAtoi(text, &n) || n < 0) {
    return absl::InvalidArgumentError(
        "Inference-Header-Content-Length: not a non-negative integer");
  }
  return n;
}

void Infer(InferenceServer* core, const Authenticator* auth, const Match& m, const HttpRequest& req,
           std::string& body, HttpResponse* res) {
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
                 DecodeInferRequest(&body, *header_length, m.model, m.version, &request,
                                    &core->shared_memory());
             !s.ok()) {
    return SetStatus(res, s);
  }
  if (request.request.viz && auth != nullptr) {  // admin only (auth.h)
    absl::Status s = auth->Authorize(
        Transport::kHttp, "POST /v2/models/{m}/infer parameters.kiln_viz", &req,
        +[](const void* r, std::string_view name) {
          return static_cast<const HttpRequest*>(r)->Header(name);
        });
    if (!s.ok()) return SetStatus(res, s);
  }
  absl::StatusOr<InferResponse> response = core->Infer(request.request);
  if (!response.ok()) return SetStatus(res, response.status());
  HttpInferResponse encoded = EncodeInferResponse(*response, request);
  res->status = 200;
  res->body = std::move(encoded.body);
  if (encoded.has_binary) {
    res->headers.emplace_back("Inference-Header-Content-Length",
                              std::to_string(encoded.json_length));
    res->content_type = "application/octet-stream";
  } else {
    res->content_type = kJsonType;
  }
}

void GraphExecute(InferenceServer* core, const std::string& body, HttpResponse* res) {
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

void Handle(InferenceServer* core, const Authenticator* auth, const Match& m,
            const HttpRequest& req, std::string& body, HttpResponse* res) {
  switch (m.route) {
    case Route::kServerMetadata:
      return SetJson(res, ServerMetadataJson(core->Metadata()));
    case Route::kLive:
      res->status = core->Live() ? 200 : 400;
      return;
    case Route::kReady:
      res->status = core->ServerReady() ? 200 : 400;
      return;
    case Route::kModelReady: {
      absl::StatusOr<bool> ready = core->ModelReady(m.model, m.version);
      if (!ready.ok()) return SetStatus(res, ready.status());
      res->status = *ready ? 200 : 400;
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
      return Infer(core, auth, m, req, body, res);
    case Route::kIndex: {
      absl::StatusOr<bool> ready_only = DecodeIndexBody(body);
      if (!ready_only.ok()) return SetStatus(res, ready_only.status());
      return SetJson(res, RepositoryIndexJson(core->RepositoryIndex(*ready_only)));
    }
    case Route::kLoad: {
      absl::StatusOr<LoadOptions> options = DecodeLoadBody(body);
      if (!options.ok()) return SetStatus(res, options.status());
      if (absl::Status s = core->LoadModel(m.model, *options); !s.ok()) return SetStatus(res, s);
      res->status = 200;
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
      res->status = 200;
      return;
    }
    case Route::kGraphExecute:
      return GraphExecute(core, body, res);
    case Route::kShmStatusAll:
    case Route::kShmStatusRegion: {
      auto regions = core->shared_memory().Status(m.region);
      if (!regions.ok()) return SetStatus(res, regions.status());
      return SetJson(res, SharedMemoryStatusJson(*regions));
    }
    case Route::kShmRegister: {
      absl::StatusOr<SharedMemoryRegistration> r = DecodeSharedMemoryRegisterBody(body);
      if (!r.ok()) return SetStatus(res, r.status());
      if (absl::Status s = core->shared_memory().Register(m.region, r->key, r->offset, r->byte_size);
          !s.ok()) {
        return SetStatus(res, s);
      }
      res->status = 200;
      return;
    }
    case Route::kShmUnregisterAll:
    case Route::kShmUnregisterRegion:
      if (absl::Status s = core->shared_memory().Unregister(m.region); !s.ok()) return SetStatus(res, s);
      res->status = 200;
      return;
    case Route::kLogging: {
      LogSettingList updates;
      if (req.method == "POST") {
        absl::StatusOr<LogSettingList> decoded = DecodeLogSettingsBody(body);
        if (!decoded.ok()) return SetStatus(res, decoded.status());
        updates = *std::move(decoded);
      }
      absl::StatusOr<LogSettingList> current = UpdateLogSettings(updates);
      if (!current.ok()) return SetStatus(res, current.status());
      return SetJson(res, LogSettingsJson(*current));
    }
    case Route::kTrace:
    case Route::kModelTrace: {
      if (m.route == Route::kModelTrace) {  // a model's settings: the model must be served
        if (auto md = core->GetModelMetadata(m.model, ""); !md.ok()) return SetStatus(res, md.status());
      }
      TraceSettingUpdate updates;
      if (req.method == "POST") {
        absl::StatusOr<TraceSettingUpdate> decoded = DecodeTraceSettingsBody(body);
        if (!decoded.ok()) return SetStatus(res, decoded.status());
        updates = *std::move(decoded);
      }
      absl::StatusOr<TraceSettingMap> current = core->trace().Update(m.model, updates);
      if (!current.ok()) return SetStatus(res, current.status());
      return SetJson(res, TraceSettingsJson(*current));
    }
    case Route::kProfile: {
      absl::StatusOr<double> seconds = ParseProfileSeconds(req.Param("seconds"));
      if (!seconds.ok()) return SetStatus(res, seconds.status());
      const std::string model(req.Param("model"));
      if (model.size() > 256) return SetStatus(res, absl::InvalidArgumentError("model: longer than 256 bytes"));
      absl::StatusOr<Profile> profile = core->CaptureProfile(model, *seconds);
      if (!profile.ok()) return SetStatus(res, profile.status());
      return SetJson(res, ProfileJson(*profile));
    }
    case Route::kViz:
      return HandleViz(m.viz, res);
    case Route::kNone:
      break;
  }
  SetError(res, 404, "no route");
}

}  // namespace

std::string_view KserveRoutes::EndpointName(std::string_view path) {
  const Match m = MatchPath(path);
  return m.route == Route::kViz ? VizEndpoint(m.viz) : EndpointOf(m.route);
}

RoutePlan KserveRoutes::Plan(const HttpRequest& req) const {
  RoutePlan plan;
  plan.max_body_bytes = limits_.max_body_bytes;
  plan.max_chunks = limits_.max_chunks;
  Match m = MatchPath(req.path);
  if (m.route == Route::kNone) {
    plan.answer =
        Answer(404, absl::StrCat("no route for ", req.method, " ", req.path.substr(0, 256)));
    return plan;
  }
  const bool post = IsPost(m.route);
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool both = m.route == Route::kLogging || m.route == Route::kTrace || m.route == Route::kModelTrace;
  const bool allowed = both ? get || req.method == "POST" : post ? req.method == "POST" : get;
  if (!allowed) {
    plan.answer = MethodNotAllowed(req, both ? "GET, POST" : post ? "POST" : "GET");
    return plan;
  }
  if (req.has_body() && req.IsMultipart()) {
    plan.answer = MultipartNotHere();
    return plan;
  }
  // Liveness and readiness are atomic reads in the core: answered on the I/O thread.
  plan.nonblocking = m.route == Route::kLive || m.route == Route::kReady;
  plan.handle = [core = core_, auth = auth_, m = std::move(m)](
                    const HttpRequest& r, std::string& body, HttpResponse* res) {
    Handle(core, auth, m, r, body, res);
  };
  return plan;
}

}  // namespace kiln::server
