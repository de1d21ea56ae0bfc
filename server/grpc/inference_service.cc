#include "server/grpc/inference_service.h"

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/core/guard.h"
#include "server/core/log_settings.h"
#include "server/grpc/codec.h"
#include "server/grpc/status_map.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* ctx,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  return Unary(ctx, gate_, "ServerLive", [&] {
    response->set_live(server_->Live());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* ctx,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  return Unary(ctx, gate_, "ServerReady", [&] {
    response->set_ready(server_->ServerReady());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  return Unary(ctx, gate_, "ModelReady", [&]() -> absl::Status {
    absl::StatusOr<bool> ready = server_->ModelReady(request->name(), request->version());
    if (!ready.ok()) return ready.status();
    response->set_ready(*ready);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  return Unary(ctx, gate_, "ServerMetadata", [&] {
    EncodeServerMetadata(server_->Metadata(), response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* ctx, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Unary(ctx, gate_, "ModelMetadata", [&]() -> absl::Status {
    auto metadata = server_->GetModelMetadata(request->name(), request->version());
    if (!metadata.ok()) return metadata.status();
    EncodeModelMetadata(*metadata, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  absl::StatusOr<Authenticator::Permit> permit = gate_.Admit(*ctx, "ModelInfer");
  if (!permit.ok()) {
    spdlog::debug("ModelInfer refused: {}", std::string(permit.status().message()));
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(permit.status()));
    return reactor;
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // `request` and `response` live until Finish, so the decoded views stay valid. Whatever
  // happens -- an exception in decoding, execution or encoding -- Finish runs exactly once.
  // The key's permit (call_gate.h) is held until the answer is sent.
  auto finish = [reactor, response, permit = *std::move(permit)](absl::StatusOr<InferResponse> result) {
    absl::Status st = result.status();
    if (st.ok()) {
      st = Guard("ModelInfer (encode)", [&]() -> absl::Status {
        EncodeInferResponse(*result, response);
        return CheckResponseSize(*response, kMaxProtoResponseBytes);
      });
      if (!st.ok()) response->Clear();
    }
    if (!st.ok()) {
      spdlog::debug("ModelInfer failed: {} {}", absl::StatusCodeToString(st.code()),
                    std::string(st.message()));
    }
    reactor->Finish(ToGrpcStatus(st));
  };
  absl::StatusOr<InferRequest> decoded = Guard("ModelInfer (decode)", [&]() -> absl::StatusOr<InferRequest> {
    InferRequest r = DecodeInferRequest(*request);
    r.deadline = CallDeadline(*ctx);
    r.cancellation = CallCancellation(ctx);
    if (absl::Status s = ApplyRequestParameters(*request, &r, &server_->shared_memory()); !s.ok()) return s;
    if (r.viz) {
      absl::Status s = gate_.Authorize(*ctx, "ModelInfer parameters.kiln_viz");
      if (!s.ok()) return s;
    }
    return r;
  });
  if (!decoded.ok()) {
    finish(decoded.status());
    return reactor;
  }
  server_->InferAsync(*decoded, finish);
  return reactor;
}

namespace {

// Appends the text of delta `from` to delta `into` (each one BYTES element of text_output, raw).
// False, nothing changed, when either is not such a response.
bool AppendDelta(inference::ModelStreamInferResponse* into,
                 const inference::ModelStreamInferResponse& from) {
  if (into->infer_response().raw_output_contents_size() != 1 ||
      from.infer_response().raw_output_contents_size() != 1) {
    return false;
  }
  std::string* a = into->mutable_infer_response()->mutable_raw_output_contents(0);
  const std::string& b = from.infer_response().raw_output_contents(0);
  if (a->size() < 4 || b.size() < 4 || a->size() + b.size() - 8 > UINT32_MAX) return false;
  a->append(b, 4, std::string::npos);
  const uint32_t length = static_cast<uint32_t>(a->size() - 4);
  std::memcpy(a->data(), &length, 4);  // little-endian, as the wire is
  return true;
}

// One ModelStreamInfer call. Reads requests one after another and hands each to the core
// (InferStreamAsync). A request answers once (tensor models), or is decoupled (a kiln_llm
// generation) and answers with one or more responses, the last one final. One write is in flight
// at a time; the order of the writes:
//   - single answers in request order: one that completes early (a refused request, or one on
//     another device) waits in `done` for those before it;
//   - a decoupled request's responses as they come, in their own order; its place in the order
//     above is released (nothing is written there) once the core says it is decoupled or its
//     first non-final response comes, so it neither waits for nor holds up the others. Several
//     may run at once (they share the model's continuous batching). A text delta that comes while
//     the previous delta of the same request still waits to be written is appended to it (a
//     client that reads slowly gets fewer, longer deltas, never more waiting responses).
// The call finishes with OK once the client has half-closed (or cancelled) and every request's
// final response has been written.
//
// Backpressure: responses waiting to be written (queued behind the write in flight, or out of
// order) are bounded by StreamLimits; a client that sends but does not read past the bound gets
// its stream finished with RESOURCE_EXHAUSTED naming the bound, the waiting responses are freed
// at once, its running requests are cancelled (they stop between kernels, generations before
// their next step) and nothing more is read.
//
// Cancellation: when the client cancels the call (or goes away), the stream's token cancels its
// queued and running tensor requests, and every decoupled request still running is cancelled
// (StreamHandle::cancel: a generation's KV-cache slot is free before the next step).
//
// Lifetime: the state lives in a shared object that the core's callbacks hold, so a response that
// comes after the stream ended (cancelled, or finished for backpressure) is dropped safely;
// OnDone deletes the reactor.
class StreamInferReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamInferReactor(InferenceServer* server, grpc::CallbackServerContext* ctx, StreamLimits limits,
                     CallGate gate)
      : server_(server), ctx_(ctx), gate_(gate), shared_(std::make_shared<Shared>()) {
    shared_->reactor = this;
    shared_->limits = limits;
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      absl::MutexLock lock(&shared_->mu);
      shared_->reading_done = true;
      MaybeFinishLocked(*shared_);
      return;
    }
    uint64_t seq = 0;
    {
      absl::MutexLock lock(&shared_->mu);
      if (shared_->finished) return;  // finished for backpressure: read no more
      ++shared_->outstanding;
      seq = shared_->next_seq++;
      shared_->running.emplace(seq, Running{});
    }
    auto message = std::make_shared<inference::ModelInferRequest>(std::move(incoming_));
    incoming_.Clear();
    // The decoded views point into *message, which the callback keeps alive. The core may answer
    // (and run this callback) before InferStreamAsync returns; the next read starts after it.
    std::shared_ptr<Shared> shared = shared_;
    auto answer = [shared, message, seq](absl::StatusOr<InferResponse> result, bool final) {
      inference::ModelStreamInferResponse out;
      absl::Status st = result.status();
      if (st.ok()) {
        st = Guard("ModelStreamInfer (encode)", [&]() -> absl::Status {
          EncodeInferResponse(*result, out.mutable_infer_response());
          return CheckResponseSize(out, kMaxProtoResponseBytes);
        });
      }
      if (!st.ok()) {
        out.Clear();
        out.set_error_message(std::string(st.message()));
        out.mutable_infer_response()->set_id(message->id());
        out.mutable_infer_response()->set_model_name(message->model_name());
        out.mutable_infer_response()->set_model_version(message->model_version());
      }
      Respond(shared, seq, std::move(out), final, /*delta=*/st.ok() && !final);
    };
    absl::StatusOr<InferRequest> decoded =
        Guard("ModelStreamInfer (decode)", [&]() -> absl::StatusOr<InferRequest> {
          InferRequest r = DecodeInferRequest(*message);
          r.deadline = CallDeadline(*ctx_);
          r.cancellation = shared_->cancellation;
          if (absl::Status s = ApplyRequestParameters(*message, &r, &server_->shared_memory()); !s.ok()) return s;
          if (r.viz) {
            absl::Status s = gate_.Authorize(*ctx_, "ModelStreamInfer parameters.kiln_viz");
            if (!s.ok()) return s;
          }
          return r;
        });
    if (decoded.ok()) {
      InferenceServer::StreamHandle handle = server_->InferStreamAsync(*decoded, answer);
      if (handle.decoupled) Decoupled(shared_, seq, std::move(handle.cancel));
    } else {
      answer(decoded.status(), /*final=*/true);
    }
    StartRead(&incoming_);
  }

  void OnWriteDone(bool /*ok*/) override {
    absl::MutexLock lock(&shared_->mu);
    Shared& s = *shared_;
    s.pending_bytes -= s.writes.front().bytes;
    if (s.writes.front().final) --s.outstanding;
    s.writes.pop_front();
    if (!s.writes.empty() && !s.finished) {
      StartWrite(&s.writes.front().response);
    } else {
      s.writing = false;
    }
    MaybeFinishLocked(s);
  }

  void OnCancel() override {
    shared_->cancellation->Cancel();
    std::vector<std::function<void()>> cancels;
    {
      absl::MutexLock lock(&shared_->mu);
      cancels = RunningCancelsLocked(*shared_);
    }
    for (const auto& cancel : cancels) cancel();
  }

  void OnDone() override {
    std::vector<std::function<void()>> cancels;
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->reactor = nullptr;  // responses coming later are dropped
      shared_->writes.clear();
      shared_->done.clear();
      cancels = RunningCancelsLocked(*shared_);
      shared_->running.clear();
    }
    for (const auto& cancel : cancels) cancel();
    delete this;
  }

 private:
  // A response waiting to be written.
  struct Pending {
    inference::ModelStreamInferResponse response;
    int64_t bytes = 0;
    uint64_t seq = 0;    // of its request
    bool final = false;  // its request's last response: writing it ends the request
    bool delta = false;  // a text delta that a later one of the same request may extend
  };
  // A request read whose final response has not come yet.
  struct Running {
    bool released = false;         // decoupled: its place in the order of single answers is free
    std::function<void()> cancel;  // decoupled: StreamHandle::cancel (null until known)
  };
  struct Shared {
    absl::Mutex mu;
    StreamInferReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;  // null after OnDone
    StreamLimits limits;
    std::shared_ptr<api::CancellationToken> cancellation = std::make_shared<api::CancellationToken>();
    // Responses to write, front in flight when `writing`.
    std::deque<Pending> writes ABSL_GUARDED_BY(mu);
    // Single answers that completed before an earlier request's, by request sequence number;
    // nullopt marks a released place (a decoupled request's).
    std::map<uint64_t, std::optional<Pending>> done ABSL_GUARDED_BY(mu);
    std::map<uint64_t, Running> running ABSL_GUARDED_BY(mu);
    int64_t held ABSL_GUARDED_BY(mu) = 0;           // responses in `done`
    int64_t pending_bytes ABSL_GUARDED_BY(mu) = 0;  // over `writes` and `done`
    uint64_t next_seq ABSL_GUARDED_BY(mu) = 0;      // of the next request read
    uint64_t next_write ABSL_GUARDED_BY(mu) = 0;    // the next place in the order of single answers
    int64_t outstanding ABSL_GUARDED_BY(mu) = 0;    // requests read, final response not yet written
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool reading_done ABSL_GUARDED_BY(mu) = false;
    bool finished ABSL_GUARDED_BY(mu) = false;
  };
  using Cancels = std::vector<std::function<void()>>;

  // The core says request `seq` is decoupled: its place is released, `cancel` kept for the end
  // of the stream (run at once when the stream has already ended).
  static void Decoupled(const std::shared_ptr<Shared>& shared, uint64_t seq,
                        std::function<void()> cancel) {
    Shared& s = *shared;
    Cancels cancels;
    {
      absl::MutexLock lock(&s.mu);
      auto it = s.running.find(seq);
      if (it == s.running.end()) return;  // its final response came already
      if (s.reactor == nullptr || s.finished || s.cancellation->cancelled()) {
        cancels.push_back(std::move(cancel));
      } else {
        it->second.cancel = std::move(cancel);
        if (!it->second.released) ReleaseLocked(s, seq, &it->second);
        cancels = PumpLocked(s);
      }
    }
    for (const auto& c : cancels) c();
  }

  // One response of request `seq` (`delta`: a text delta that may be appended to).
  static void Respond(const std::shared_ptr<Shared>& shared, uint64_t seq,
                      inference::ModelStreamInferResponse response, bool final, bool delta) {
    Shared& s = *shared;
    Cancels cancels;
    {
      absl::MutexLock lock(&s.mu);
      if (s.reactor == nullptr || s.finished) return;
      bool released = false;
      if (auto it = s.running.find(seq); it != s.running.end()) {
        if (!final && !it->second.released) ReleaseLocked(s, seq, &it->second);
        released = it->second.released;
        if (final) s.running.erase(it);
      }
      QueueLocked(s, seq, std::move(response), final, delta, released);
      cancels = PumpLocked(s);
    }
    for (const auto& c : cancels) c();
  }

  // Request `seq` is decoupled: nothing is written at its place in the order of single answers.
  static void ReleaseLocked(Shared& s, uint64_t seq, Running* running)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    running->released = true;
    s.done.emplace(seq, std::nullopt);
  }

  // A single answer waits in `done` for its place; a released request's response goes to the end
  // of `writes`, or is appended to the previous delta of its request when that still waits there.
  static void QueueLocked(Shared& s, uint64_t seq, inference::ModelStreamInferResponse response,
                          bool final, bool delta, bool released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    if (!released) {
      Pending p{std::move(response), 0, seq, final, false};
      p.bytes = static_cast<int64_t>(p.response.ByteSizeLong());
      s.pending_bytes += p.bytes;
      ++s.held;
      s.done.emplace(seq, std::move(p));
      return;
    }
    Pending* last = s.writes.size() > (s.writing ? 1u : 0u) ? &s.writes.back() : nullptr;
    if (delta && last != nullptr && last->seq == seq && last->delta &&
        AppendDelta(&last->response, response)) {
      const int64_t before = last->bytes;
      last->bytes = static_cast<int64_t>(last->response.ByteSizeLong());
      s.pending_bytes += last->bytes - before;
      return;
    }
    Pending p{std::move(response), 0, seq, final, delta};
    p.bytes = static_cast<int64_t>(p.response.ByteSizeLong());
    s.pending_bytes += p.bytes;
    s.writes.push_back(std::move(p));
  }

  // Moves the single answers whose turn has come to `writes`, enforces the bounds and starts a
  // write when none is in flight. Returns what to cancel (outside the lock) when the stream is
  // finished for backpressure.
  static Cancels PumpLocked(Shared& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    for (auto it = s.done.begin(); it != s.done.end() && it->first == s.next_write;
         it = s.done.erase(it)) {
      if (it->second.has_value()) {
        s.writes.push_back(std::move(*it->second));
        --s.held;
      }
      ++s.next_write;
    }
    const int64_t waiting = static_cast<int64_t>(s.writes.size()) - (s.writing ? 1 : 0) + s.held;
    if (waiting > s.limits.max_pending_responses || s.pending_bytes > s.limits.max_pending_bytes) {
      return FinishForBackpressureLocked(s, waiting);
    }
    if (!s.writing && !s.writes.empty()) {
      s.writing = true;
      s.reactor->StartWrite(&s.writes.front().response);
    }
    return {};
  }

  static Cancels RunningCancelsLocked(Shared& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    Cancels out;
    for (const auto& [seq, running] : s.running) {
      if (running.cancel) out.push_back(running.cancel);
    }
    return out;
  }

  // The client is not reading: free what waits, stop the stream's work, finish with the reason.
  static Cancels FinishForBackpressureLocked(Shared& s, int64_t waiting)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    const int64_t bytes = s.pending_bytes;
    s.finished = true;
    s.cancellation->Cancel();
    // Keep only the write in flight (gRPC owns its buffer until OnWriteDone).
    while (s.writes.size() > (s.writing ? 1u : 0u)) {
      s.pending_bytes -= s.writes.back().bytes;
      s.writes.pop_back();
    }
    for (auto& [seq, answer] : s.done) {
      if (answer.has_value()) s.pending_bytes -= answer->bytes;
    }
    s.done.clear();
    s.held = 0;
    spdlog::warn("ModelStreamInfer: {} answers ({} bytes) wait for a client that does not read; "
                 "stream finished",
                 waiting, bytes);
    s.reactor->Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("ModelStreamInfer: ", waiting, " responses (", bytes,
                     " bytes) are waiting for the client to read them, over the limit of ",
                     s.limits.max_pending_responses, " responses or ", s.limits.max_pending_bytes,
                     " bytes per stream (--stream-max-pending-responses, "
                     "--stream-max-pending-bytes); the stream is closed and its remaining "
                     "requests cancelled")));
    return RunningCancelsLocked(s);
  }

  static void MaybeFinishLocked(Shared& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    if (s.reading_done && s.outstanding == 0 && !s.writing && !s.finished) {
      s.finished = true;
      s.reactor->Finish(grpc::Status::OK);
    }
  }

  InferenceServer* const server_;
  grpc::CallbackServerContext* const ctx_;
  const CallGate gate_;
  inference::ModelInferRequest incoming_;  // only touched by the read chain
  std::shared_ptr<Shared> shared_;
};

}  // namespace

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* ctx) {
  if (absl::Status denied = gate_.Check(*ctx, "ModelStreamInfer"); !denied.ok()) {
    return new RefusedBidi<inference::ModelInferRequest, inference::ModelStreamInferResponse>(denied);
  }
  return new StreamInferReactor(server_, ctx, stream_limits_, gate_);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Unary(ctx, gate_, "ModelConfig", [&]() -> absl::Status {
    auto config = server_->GetModelConfig(request->name(), request->version());
    if (!config.ok()) return config.status();
    *response->mutable_config() = **config;
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* ctx, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Unary(ctx, gate_, "ModelStatistics", [&]() -> absl::Status {
    auto stats = server_->Statistics(request->name(), request->version());
    if (!stats.ok()) return stats.status();
    EncodeStatistics(*stats, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* ctx, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return Unary(ctx, gate_, "RepositoryIndex", [&] {
    EncodeRepositoryIndex(server_->RepositoryIndex(request->ready()), response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  return Unary(ctx, gate_, "RepositoryModelLoad", [&]() -> absl::Status {
    absl::StatusOr<LoadOptions> options = DecodeLoadParameters(request->parameters());
    if (!options.ok()) return options.status();
    return server_->LoadModel(request->model_name(), *options);
  });
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  return Unary(ctx, gate_, "SystemSharedMemoryStatus", [&]() -> absl::Status {
    auto regions = server_->shared_memory().Status(request->name());
    if (!regions.ok()) return regions.status();
    EncodeSharedMemoryStatus(*regions, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  return Unary(ctx, gate_, "SystemSharedMemoryRegister", [&] {
    return server_->shared_memory().Register(request->name(), request->key(), request->offset(),
                                             request->byte_size());
  });
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return Unary(ctx, gate_, "SystemSharedMemoryUnregister",
               [&] { return server_->shared_memory().Unregister(request->name()); });
}

grpc::ServerUnaryReactor* InferenceService::TraceSetting(grpc::CallbackServerContext* ctx,
                                                         const inference::TraceSettingRequest* request,
                                                         inference::TraceSettingResponse* response) {
  return Unary(ctx, gate_, "TraceSetting", [&]() -> absl::Status {
    if (!request->model_name().empty()) {  // a model's settings: the model must be served
      if (auto m = server_->GetModelMetadata(request->model_name(), ""); !m.ok()) return m.status();
    }
    TraceSettingUpdate updates;
    for (const auto& [key, value] : request->settings()) {
      if (value.value_size() == 0) {
        updates.emplace_back(key, std::nullopt);  // no value: clear (the global one applies)
      } else {
        updates.emplace_back(key, std::vector<std::string>(value.value().begin(), value.value().end()));
      }
    }
    absl::StatusOr<TraceSettingMap> current = server_->trace().Update(request->model_name(), updates);
    if (!current.ok()) return current.status();
    for (const auto& [key, values] : *current) {
      auto& out = (*response->mutable_settings())[key];
      for (const std::string& v : values) out.add_value(v);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::LogSettings(grpc::CallbackServerContext* ctx,
                                                        const inference::LogSettingsRequest* request,
                                                        inference::LogSettingsResponse* response) {
  return Unary(ctx, gate_, "LogSettings", [&]() -> absl::Status {
    std::vector<std::pair<std::string, LogSettingValue>> updates;
    for (const auto& [key, value] : request->settings()) {
      switch (value.parameter_choice_case()) {
        case inference::LogSettingsRequest::SettingValue::kBoolParam:
          updates.emplace_back(key, value.bool_param());
          break;
        case inference::LogSettingsRequest::SettingValue::kUint32Param:
          updates.emplace_back(key, static_cast<int64_t>(value.uint32_param()));
          break;
        case inference::LogSettingsRequest::SettingValue::kStringParam:
          updates.emplace_back(key, value.string_param());
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat("settings[", key.substr(0, 64), "]: no value (bool_param, uint32_param or string_param)"));
      }
    }
    absl::StatusOr<std::vector<std::pair<std::string, LogSettingValue>>> current = UpdateLogSettings(updates);
    if (!current.ok()) return current.status();
    for (const auto& [key, value] : *current) {
      auto& out = (*response->mutable_settings())[key];
      if (const bool* b = std::get_if<bool>(&value)) {
        out.set_bool_param(*b);
      } else if (const int64_t* n = std::get_if<int64_t>(&value)) {
        out.set_uint32_param(static_cast<uint32_t>(*n));
      } else {
        out.set_string_param(std::get<std::string>(value));
      }
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  return Unary(ctx, gate_, "RepositoryModelUnload",
               [&] { return server_->UnloadModel(request->model_name()); });
}

}  // namespace kiln::server
