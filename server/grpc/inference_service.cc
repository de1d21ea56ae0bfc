#include "server/grpc/inference_service.h"

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <memory>
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

// One ModelStreamInfer call. Reads requests one after another and hands each to the core; the
// answers are written in request order (an answer that completes early -- a refused request, or
// one on another device -- waits in `done` for those before it), one write in flight at a time.
// The call finishes with OK once the client has half-closed (or cancelled), every request has been
// answered and every write has completed.
//
// Backpressure: answers waiting to be written (queued behind the write in flight, or out of order)
// are bounded by StreamLimits; a client that sends but does not read past the bound gets its
// stream finished with RESOURCE_EXHAUSTED naming the bound, the waiting answers are freed at once,
// its running requests are cancelled (they stop between kernels) and nothing more is read.
//
// Lifetime: the state lives in a shared object that the core's callbacks hold, so an answer that
// completes after the stream ended (cancelled, or finished for backpressure) is dropped safely;
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
    }
    auto message = std::make_shared<inference::ModelInferRequest>(std::move(incoming_));
    incoming_.Clear();
    // The decoded views point into *message, which the callback keeps alive. InferAsync may run
    // the request (and this callback) before it returns; the next read starts after it.
    std::shared_ptr<Shared> shared = shared_;
    auto answer = [shared, message, seq](absl::StatusOr<InferResponse> result) {
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
      Enqueue(shared, seq, std::move(out));
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
      server_->InferAsync(*decoded, answer);
    } else {
      answer(decoded.status());
    }
    StartRead(&incoming_);
  }

  void OnWriteDone(bool /*ok*/) override {
    absl::MutexLock lock(&shared_->mu);
    Shared& s = *shared_;
    s.pending_bytes -= s.writes.front().second;
    s.writes.pop_front();
    --s.outstanding;
    if (!s.writes.empty() && !s.finished) {
      StartWrite(&s.writes.front().first);
    } else {
      s.writing = false;
    }
    MaybeFinishLocked(s);
  }

  void OnCancel() override { shared_->cancellation->Cancel(); }

  void OnDone() override {
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->reactor = nullptr;  // answers completing later are dropped
      shared_->writes.clear();
      shared_->done.clear();
    }
    delete this;
  }

 private:
  struct Shared {
    absl::Mutex mu;
    StreamInferReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;  // null after OnDone
    StreamLimits limits;
    std::shared_ptr<api::CancellationToken> cancellation = std::make_shared<api::CancellationToken>();
    // Answers to write, front in flight when `writing`, each with its size.
    std::deque<std::pair<inference::ModelStreamInferResponse, int64_t>> writes ABSL_GUARDED_BY(mu);
    // Answers that completed before an earlier request's, by request sequence number.
    std::map<uint64_t, std::pair<inference::ModelStreamInferResponse, int64_t>> done ABSL_GUARDED_BY(mu);
    int64_t pending_bytes ABSL_GUARDED_BY(mu) = 0;  // over `writes` and `done`
    uint64_t next_seq ABSL_GUARDED_BY(mu) = 0;      // of the next request read
    uint64_t next_write ABSL_GUARDED_BY(mu) = 0;    // of the next answer to write
    int64_t outstanding ABSL_GUARDED_BY(mu) = 0;    // requests read, answer not yet written
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool reading_done ABSL_GUARDED_BY(mu) = false;
    bool finished ABSL_GUARDED_BY(mu) = false;
  };

  static void Enqueue(const std::shared_ptr<Shared>& shared, uint64_t seq,
                      inference::ModelStreamInferResponse response) {
    Shared& s = *shared;
    absl::MutexLock lock(&s.mu);
    if (s.reactor == nullptr || s.finished) return;
    const int64_t bytes = static_cast<int64_t>(response.ByteSizeLong());
    s.pending_bytes += bytes;
    s.done.emplace(seq, std::make_pair(std::move(response), bytes));
    for (auto it = s.done.begin(); it != s.done.end() && it->first == s.next_write;
         it = s.done.erase(it)) {
      s.writes.push_back(std::move(it->second));
      ++s.next_write;
    }
    const int64_t waiting =
        static_cast<int64_t>(s.writes.size() + s.done.size()) - (s.writing ? 1 : 0);
    if (waiting > s.limits.max_pending_responses || s.pending_bytes > s.limits.max_pending_bytes) {
      FinishForBackpressureLocked(s, waiting);
      return;
    }
    if (!s.writing && !s.writes.empty()) {
      s.writing = true;
      s.reactor->StartWrite(&s.writes.front().first);
    }
  }

  // The client is not reading: free what waits, stop the stream's work, finish with the reason.
  static void FinishForBackpressureLocked(Shared& s, int64_t waiting)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    const int64_t bytes = s.pending_bytes;
    s.finished = true;
    s.cancellation->Cancel();
    // Keep only the write in flight (gRPC owns its buffer until OnWriteDone).
    while (s.writes.size() > (s.writing ? 1u : 0u)) {
      s.pending_bytes -= s.writes.back().second;
      s.writes.pop_back();
    }
    for (auto& [seq, answer] : s.done) s.pending_bytes -= answer.second;
    s.done.clear();
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
