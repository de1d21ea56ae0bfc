// LlmRoutes (llm_routes.h).
#include "server/rest/llm_routes.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "server/core/llm_generation.h"
#include "server/core/llm_sampling.h"
#include "server/rest/http_status.h"
#include "server/rest/json_parse.h"

// Returns the status of `expr` when it is not OK.
#define KILN_SERVER_RETURN_IF_ERROR(expr)                 \
  do {                                                    \
    if (absl::Status _st = (expr); !_st.ok()) return _st; \
  } while (0)

namespace kiln::server {
namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

enum class Kind { kNone, kModels, kCompletions, kChat, kGenerate, kGenerateStream };

struct Match {
  Kind kind = Kind::kNone;
  std::string model, version;  // generate routes
};

Match MatchPath(std::string_view path) {
  Match m;
  if (path == "/v1/models") m.kind = Kind::kModels;
  if (path == "/v1/completions") m.kind = Kind::kCompletions;
  if (path == "/v1/chat/completions") m.kind = Kind::kChat;
  if (m.kind != Kind::kNone || path.substr(0, 11) != "/v2/models/") return m;
  std::vector<std::string_view> s;
  for (size_t start = 11;;) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    if (end == start) return m;
    s.push_back(path.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  std::string_view action;
  if (s.size() == 2) {
    action = s[1];
  } else if (s.size() == 4 && s[1] == "versions") {
    m.version = std::string(s[2]);
    action = s[3];
  } else {
    return m;
  }
  if (action == "generate") m.kind = Kind::kGenerate;
  if (action == "generate_stream") m.kind = Kind::kGenerateStream;
  if (m.kind != Kind::kNone) m.model = std::string(s[0]);
  return m;
}

// ---- request fields ----

struct Request {
  std::string model;
  std::string prompt;                   // completions / generate
  std::vector<api::ChatTurn> messages;  // chat
  SamplingFields sampling;
  bool stream = false;
};

absl::Status Bad(std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(problem)));
}

absl::Status ReadString(const rapidjson::Value& v, std::string_view field, std::string* out) {
  if (!v.IsString()) return Bad(field, "not a string");
  *out = std::string(v.GetString(), v.GetStringLength());
  return absl::OkStatus();
}

// The sampling fields (server/core/llm_sampling.h) and the OpenAI ones, from `obj` (the body for
// OpenAI routes, `parameters` or the body for generate). Other keys are ignored.
absl::Status ReadSampling(const rapidjson::Value& obj, const std::string& prefix, Request* r) {
  for (auto it = obj.MemberBegin(); it != obj.MemberEnd(); ++it) {
    const std::string key(it->name.GetString(), it->name.GetStringLength());
    const std::string field = prefix + key;
    const rapidjson::Value& v = it->value;
    if (key == "stream") {
      if (v.IsNull()) continue;
      if (!v.IsBool()) return Bad(field, "not a boolean");
      r->stream = v.GetBool();
    } else if (key == "logprobs" || key == "top_logprobs" || key == "echo" || key == "logit_bias" ||
               key == "suffix" || key == "tools" || key == "tool_choice" ||
               key == "response_format") {
      const bool unset =
          v.IsNull() || (v.IsBool() && !v.GetBool()) || (v.IsObject() && v.MemberCount() == 0) ||
          (key == "response_format" && v.IsObject() && v.HasMember("type") &&
           v["type"].IsString() && std::string_view(v["type"].GetString()) == "text");
      if (!unset) return Bad(field, "not supported");
    } else if (absl::StatusOr<bool> read = ReadSamplingField(key, v, field, &r->sampling);
               !read.ok()) {
      return read.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Request> ParseRequest(Kind kind, const std::string& body, const Match& m) {
  rapidjson::Document doc;
  KILN_SERVER_RETURN_IF_ERROR(ParseJson(body, "request body", &doc));
  if (!doc.IsObject()) return Bad("request body", "not a JSON object");
  Request r;
  if (kind == Kind::kGenerate || kind == Kind::kGenerateStream) {
    r.model = m.model;
    r.stream = kind == Kind::kGenerateStream;
    if (!doc.HasMember("text_input")) return Bad("text_input", "missing");
    KILN_SERVER_RETURN_IF_ERROR(ReadString(doc["text_input"], "text_input", &r.prompt));
    KILN_SERVER_RETURN_IF_ERROR(ReadSampling(doc, "", &r));
    if (doc.HasMember("parameters")) {
      if (!doc["parameters"].IsObject()) return Bad("parameters", "not a JSON object");
      KILN_SERVER_RETURN_IF_ERROR(ReadSampling(doc["parameters"], "parameters.", &r));
    }
    r.stream = kind == Kind::kGenerateStream;  // the route decides, not a field
    return r;
  }
  if (!doc.HasMember("model")) return Bad("model", "missing");
  KILN_SERVER_RETURN_IF_ERROR(ReadString(doc["model"], "model", &r.model));
  if (kind == Kind::kCompletions) {
    if (!doc.HasMember("prompt")) return Bad("prompt", "missing");
    const rapidjson::Value& p = doc["prompt"];
    if (p.IsArray()) {  // one prompt in an array, as the openai client sends it
      if (p.Size() != 1 || !p[0].IsString())
        return Bad("prompt", "an array of prompts must hold exactly one string");
      KILN_SERVER_RETURN_IF_ERROR(ReadString(p[0], "prompt[0]", &r.prompt));
    } else {
      KILN_SERVER_RETURN_IF_ERROR(ReadString(p, "prompt", &r.prompt));
    }
  } else {
    if (!doc.HasMember("messages")) return Bad("messages", "missing");
    const rapidjson::Value& msgs = doc["messages"];
    if (!msgs.IsArray() || msgs.Empty()) return Bad("messages", "not a non-empty array");
    for (rapidjson::SizeType i = 0; i < msgs.Size(); ++i) {
      const std::string at = absl::StrCat("messages[", i, "]");
      if (!msgs[i].IsObject()) return Bad(at, "not an object");
      api::ChatTurn turn;
      if (!msgs[i].HasMember("role")) return Bad(at + ".role", "missing");
      KILN_SERVER_RETURN_IF_ERROR(ReadString(msgs[i]["role"], at + ".role", &turn.role));
      if (turn.role != "system" && turn.role != "user" && turn.role != "assistant" &&
          turn.role != "developer")
        return Bad(at + ".role", absl::StrCat("'", ValidUtf8(turn.role.substr(0, 64)),
                                              "' is not system, developer, user or assistant"));
      if (turn.role == "developer") turn.role = "system";
      if (!msgs[i].HasMember("content")) return Bad(at + ".content", "missing");
      const rapidjson::Value& c = msgs[i]["content"];
      if (c.IsArray()) {  // content parts: text parts only
        for (rapidjson::SizeType j = 0; j < c.Size(); ++j) {
          const std::string part = absl::StrCat(at, ".content[", j, "]");
          if (!c[j].IsObject() || !c[j].HasMember("type") || !c[j]["type"].IsString() ||
              std::string_view(c[j]["type"].GetString()) != "text" || !c[j].HasMember("text") ||
              !c[j]["text"].IsString())
            return Bad(part, "only {\"type\": \"text\", \"text\": ...} parts are supported");
          turn.content.append(c[j]["text"].GetString(), c[j]["text"].GetStringLength());
        }
      } else {
        KILN_SERVER_RETURN_IF_ERROR(ReadString(c, at + ".content", &turn.content));
      }
      r.messages.push_back(std::move(turn));
    }
  }
  KILN_SERVER_RETURN_IF_ERROR(ReadSampling(doc, "", &r));
  return r;
}

// ---- responses ----

std::atomic<uint64_t> g_next_id{1};

std::string NewId(Kind kind) {
  return absl::StrFormat("%s-%016x", kind == Kind::kChat ? "chatcmpl" : "cmpl",
                         g_next_id.fetch_add(1) * 0x9E3779B97F4A7C15ull);
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Str(JsonWriter& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

// What every piece of one generation's answer shares.
struct Context {
  Kind kind;
  std::string id, model, version;
  int64_t created = 0;
};

// The OpenAI head: id, object, created, model, and choices[0] opened (its "index" written).
void WriteHead(JsonWriter& w, const Context& c, bool chunk) {
  Str(w, "id");
  Str(w, c.id);
  Str(w, "object");
  Str(w, c.kind == Kind::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                               : "text_completion");
  Str(w, "created");
  w.Int64(c.created);
  Str(w, "model");
  Str(w, c.model);
  Str(w, "choices");  // the one choice is left open for the caller
  w.StartArray();
  w.StartObject();
  Str(w, "index");
  w.Int(0);
}

// Triton's generate answer: the model, its version and the text.
void WriteGenerateText(JsonWriter& w, const Context& c, std::string_view text) {
  Str(w, "model_name");
  Str(w, c.model);
  Str(w, "model_version");
  Str(w, c.version);
  Str(w, "text_output");
  Str(w, text);
}

void WriteUsage(JsonWriter& w, const api::GenerateEvent& ev) {
  Str(w, "usage");
  w.StartObject();
  Str(w, "prompt_tokens");
  w.Int64(ev.prompt_tokens);
  Str(w, "completion_tokens");
  w.Int64(ev.completion_tokens);
  Str(w, "total_tokens");
  w.Int64(ev.prompt_tokens + ev.completion_tokens);
  w.EndObject();
}

// OpenAI's finish_reason: "stop" / "length"; a cancelled generation never reaches a client.
const char* OpenAiFinish(const std::string& reason) {
  return reason == "length" ? "length" : "stop";
}

// The whole (non-streamed) answer.
std::string FullAnswer(const Context& c, const std::string& text, const api::GenerateEvent& last) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  if (c.kind == Kind::kGenerate) {
    WriteGenerateText(w, c, text);
    Str(w, "finish_reason");
    Str(w, last.finish_reason);
    WriteUsage(w, last);
    w.EndObject();
    return buf.GetString();
  }
  WriteHead(w, c, false);
  if (c.kind == Kind::kChat) {
    Str(w, "message");
    w.StartObject();
    Str(w, "role");
    Str(w, "assistant");
    Str(w, "content");
    Str(w, text);
    w.EndObject();
  } else {
    Str(w, "text");
    Str(w, text);
    Str(w, "logprobs");
    w.Null();
  }
  Str(w, "finish_reason");
  Str(w, OpenAiFinish(last.finish_reason));
  w.EndObject();
  w.EndArray();
  WriteUsage(w, last);
  w.EndObject();
  return buf.GetString();
}

// One streamed event's JSON (a chunk of new text; the finish reason and usage on the last).
std::string Chunk(const Context& c, const api::GenerateEvent& ev, bool first) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  if (c.kind == Kind::kGenerateStream) {
    WriteGenerateText(w, c, ev.text);
    if (ev.done) {
      Str(w, "finish_reason");
      Str(w, ev.finish_reason);
    }
    w.EndObject();
    return buf.GetString();
  }
  WriteHead(w, c, true);
  if (c.kind == Kind::kChat) {
    Str(w, "delta");
    w.StartObject();
    if (first) {
      Str(w, "role");
      Str(w, "assistant");
    }
    if (!ev.text.empty() || first) {
      Str(w, "content");
      Str(w, ev.text);
    }
    w.EndObject();
  } else {
    Str(w, "text");
    Str(w, ev.text);
    Str(w, "logprobs");
    w.Null();
  }
  Str(w, "finish_reason");
  if (ev.done) {
    Str(w, OpenAiFinish(ev.finish_reason));
  } else {
    w.Null();
  }
  w.EndObject();
  w.EndArray();
  if (ev.done) WriteUsage(w, ev);
  w.EndObject();
  return buf.GetString();
}

std::string ErrorEvent(std::string_view message) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  Str(w, "error");
  Str(w, ValidUtf8(message));
  w.EndObject();
  return absl::StrCat("data: ", buf.GetString(), "\n\n");
}

// ---- one generation: its answer's context, its meter, and where its events go ----

struct Generation {
  Generation(InferenceServer* core, std::shared_ptr<const ModelVersion> version, Context context,
             std::string route)
      : ctx(std::move(context)), meter(core->observer(), std::move(version), std::move(route)) {}
  const Context ctx;
  GenerationMeter meter;  // llm_generation.h
};

// The server-sent events of a streamed generation, between the generator's thread (Push) and the
// connection (Take). Close (client gone, server stopping) cancels the generation.
class GenerationStream : public ResponseStream {
 public:
  explicit GenerationStream(std::shared_ptr<Generation> gen) : gen_(std::move(gen)) {}

  void Start(uint64_t id) {
    bool cancel = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      id_ = id;
      started_ = true;
      cancel = closed_;
    }
    if (cancel) gen_->meter.llm().Cancel(id);
  }
  void Push(const api::GenerateEvent& ev) {
    gen_->meter.Time(ev);
    std::string framed;
    if (ev.done && ev.finish_reason == "error") {
      framed = ErrorEvent(std::string(ev.status.message()));
    } else if (!ev.text.empty() || ev.done || first_) {
      framed = absl::StrCat("data: ", Chunk(gen_->ctx, ev, first_), "\n\n");
      first_ = false;
    }
    if (ev.done && gen_->ctx.kind != Kind::kGenerateStream) framed += "data: [DONE]\n\n";
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return;
      pending_ += framed;
      end_ = ev.done;
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
    *end = end_;
    return out;
  }
  std::string KeepAlive() const override { return ": keep-alive\n\n"; }
  std::chrono::milliseconds KeepAliveInterval() const override { return std::chrono::seconds(15); }
  std::string StopMessage() const override { return ErrorEvent("kilnd is shutting down"); }
  void Close() override {
    uint64_t id = 0;
    bool cancel = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return;
      closed_ = true;
      wake_ = nullptr;
      cancel = started_ && !end_;
      id = id_;
    }
    if (cancel) gen_->meter.llm().Cancel(id);  // the slot is free before the next step
  }

 private:
  const std::shared_ptr<Generation> gen_;
  bool first_ = true;  // generator thread only
  std::mutex mu_;
  std::string pending_;         // guarded by mu_
  bool end_ = false;            // guarded by mu_
  bool closed_ = false;         // guarded by mu_
  bool started_ = false;        // guarded by mu_
  uint64_t id_ = 0;             // guarded by mu_
  std::function<void()> wake_;  // guarded by mu_
};

void Models(InferenceServer* core, HttpResponse* res) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  Str(w, "object");
  Str(w, "list");
  Str(w, "data");
  w.StartArray();
  for (const std::shared_ptr<const ModelVersion>& v : core->LlmVersions()) {
    const api::LlmInfo& info = v->llm->info();
    w.StartObject();
    Str(w, "id");
    Str(w, v->name);
    Str(w, "object");
    Str(w, "model");
    Str(w, "created");
    w.Int64(0);
    Str(w, "owned_by");
    Str(w, "kiln");
    Str(w, "context_length");
    w.Int64(info.max_ctx);
    Str(w, "slots");
    w.Int64(info.slots);
    Str(w, "quantized_activations");
    w.Bool(info.quantized_activations);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  SetJson(res, buf.GetString());
}

void Generate(InferenceServer* core, const Match& m, std::string& body, HttpResponse* res) {
  absl::StatusOr<Request> req = ParseRequest(m.kind, body, m);
  if (!req.ok()) return SetStatus(res, req.status());
  absl::StatusOr<std::shared_ptr<const ModelVersion>> version = core->LlmVersion(
      req->model, m.kind == Kind::kGenerate || m.kind == Kind::kGenerateStream ? m.version : "");
  if (!version.ok()) {
    const absl::Status& s = version.status();
    return SetStatus(
        res, absl::Status(s.code(),
                          absl::StrCat(m.kind == Kind::kGenerate || m.kind == Kind::kGenerateStream
                                           ? "model_name: "
                                           : "model: ",
                                       s.message())));
  }
  api::LlmModel& llm = *(*version)->llm;
  std::string text = req->prompt;
  if (m.kind == Kind::kChat) {
    absl::StatusOr<std::string> rendered =
        llm.ApplyChatTemplate(req->messages, /*add_generation_prompt=*/true);
    if (!rendered.ok())
      return SetStatus(res, absl::Status(rendered.status().code(),
                                         absl::StrCat("messages: ", rendered.status().message())));
    text = *std::move(rendered);
  }
  // OpenAI: completions default to 16 tokens, chat to the rest of the context.
  absl::StatusOr<PreparedGeneration> prepared = PrepareGeneration(
      llm, text,
      m.kind == Kind::kChat          ? "messages"
      : m.kind == Kind::kCompletions ? "prompt"
                                     : "text_input",
      req->sampling.max_tokens, req->sampling.params, m.kind == Kind::kChat ? 0 : 16);
  if (!prepared.ok()) return SetStatus(res, prepared.status());

  Context ctx{m.kind, NewId(m.kind), (*version)->name, std::to_string((*version)->version),
              UnixSeconds()};
  const char* route = m.kind == Kind::kChat          ? "chat"
                      : m.kind == Kind::kCompletions ? "completions"
                                                     : "generate";
  auto gen = std::make_shared<Generation>(core, *version, ctx, route);

  if (req->stream) {
    auto stream = std::make_shared<GenerationStream>(gen);
    absl::StatusOr<uint64_t> id =
        llm.Submit(std::move(prepared->prompt), prepared->params,
                   [stream](const api::GenerateEvent& ev) { stream->Push(ev); });
    if (!id.ok()) return SetStatus(res, id.status());
    stream->Start(*id);
    gen->meter.Occupancy();
    res->status = 200;
    res->content_type = "text/event-stream";
    res->headers.emplace_back("Cache-Control", "no-cache");
    res->stream = std::move(stream);
    return;
  }
  // Not streamed: wait for the end on this worker thread.
  struct Result {
    std::mutex mu;
    std::condition_variable cv;
    std::string text;
    api::GenerateEvent last;
    bool done = false;
  };
  auto result = std::make_shared<Result>();
  absl::StatusOr<uint64_t> id = llm.Submit(
      std::move(prepared->prompt), prepared->params, [gen, result](const api::GenerateEvent& ev) {
        gen->meter.Time(ev);
        std::lock_guard<std::mutex> l(result->mu);
        result->text += ev.text;
        if (ev.done) {
          result->last = ev;
          result->done = true;
          result->cv.notify_all();
        }
      });
  if (!id.ok()) return SetStatus(res, id.status());
  gen->meter.Occupancy();
  std::unique_lock<std::mutex> l(result->mu);
  result->cv.wait(l, [&] { return result->done; });
  if (result->last.finish_reason == "error") return SetStatus(res, result->last.status);
  if (result->last.finish_reason == "cancelled")
    return SetStatus(res,
                     absl::UnavailableError(
                         "the generation was cancelled: kilnd is stopping or unloading the model"));
  SetJson(res, FullAnswer(ctx, result->text, result->last));
}

std::string_view EndpointOf(Kind kind) {
  switch (kind) {
    case Kind::kModels:
      return "GET /v1/models";
    case Kind::kCompletions:
      return "POST /v1/completions";
    case Kind::kChat:
      return "POST /v1/chat/completions";
    case Kind::kGenerate:
      return "POST /v2/models/{m}/generate";
    case Kind::kGenerateStream:
      return "POST /v2/models/{m}/generate_stream";
    case Kind::kNone:
      break;
  }
  return "";
}

}  // namespace

bool LlmRoutes::Matches(std::string_view path) { return MatchPath(path).kind != Kind::kNone; }

std::string_view LlmRoutes::EndpointName(std::string_view path) {
  return EndpointOf(MatchPath(path).kind);
}

RoutePlan LlmRoutes::Plan(const HttpRequest& req) const {
  RoutePlan plan;
  plan.max_body_bytes = limits_.max_body_bytes;
  plan.max_chunks = limits_.max_chunks;
  Match m = MatchPath(req.path);
  const bool get = m.kind == Kind::kModels;
  const bool allowed = get ? req.method == "GET" || req.method == "HEAD" : req.method == "POST";
  if (!allowed) {
    plan.answer = MethodNotAllowed(req, get ? "GET" : "POST");
    return plan;
  }
  if (req.has_body() && req.IsMultipart()) {
    plan.answer = MultipartNotHere();
    return plan;
  }
  plan.handle = [core = core_, m = std::move(m)](const HttpRequest&, std::string& body,
                                                 HttpResponse* res) {
    if (m.kind == Kind::kModels) return Models(core, res);
    Generate(core, m, body, res);
  };
  return plan;
}

}  // namespace kiln::server
