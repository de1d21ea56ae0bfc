#include "server/grpc/inference_service.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "server/grpc/codec.h"
#include "server/grpc/status_map.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* ctx,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  return Unary(ctx, "ServerLive", [&] {
    response->set_live(server_->Live());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* ctx,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  return Unary(ctx, "ServerReady", [&] {
    response->set_ready(server_->Ready());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  return Unary(ctx, "ModelReady", [&]() -> absl::Status {
    absl::StatusOr<bool> ready = server_->ModelReady(request->name(), request->version());
    if (!ready.ok()) return ready.status();
    response->set_ready(*ready);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  return Unary(ctx, "ServerMetadata", [&] {
    EncodeServerMetadata(server_->Metadata(), response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* ctx, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Unary(ctx, "ModelMetadata", [&]() -> absl::Status {
    auto metadata = server_->GetModelMetadata(request->name(), request->version());
    if (!metadata.ok()) return metadata.status();
    EncodeModelMetadata(*metadata, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // `request` and `response` live until Finish, so the decoded views stay valid.
  server_->InferAsync(DecodeInferRequest(*request),
                      [reactor, response](absl::StatusOr<InferResponse> result) {
                        if (!result.ok()) {
                          spdlog::debug("ModelInfer failed: {} {}",
                                        absl::StatusCodeToString(result.status().code()),
                                        std::string(result.status().message()));
                          reactor->Finish(ToGrpcStatus(result.status()));
                          return;
                        }
                        EncodeInferResponse(*result, response);
                        reactor->Finish(grpc::Status::OK);
                      });
  return reactor;
}

namespace {

// One ModelStreamInfer call. Reads requests one after another and hands each to the core; the
// answers are written in request order (an answer that completes early -- a refused request, or
// one on another device -- waits in `done_` for those before it), one write in flight at a time. The call finishes with OK once
// the client has half-closed (or cancelled), every request has been answered and every write
// has completed; OnDone then deletes the reactor.
class StreamInferReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  explicit StreamInferReactor(InferenceServer* server) : server_(server) { StartRead(&incoming_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      absl::MutexLock lock(&mu_);
      reading_done_ = true;
      MaybeFinishLocked();
      return;
    }
    auto message = std::make_shared<inference::ModelInferRequest>(std::move(incoming_));
    incoming_.Clear();
    uint64_t seq = 0;
    {
      absl::MutexLock lock(&mu_);
      ++outstanding_;
      seq = next_seq_++;
    }
    // The decoded views point into *message, which the callback keeps alive. InferAsync may run
    // the request (and this callback) before it returns; the next read starts after it.
    server_->InferAsync(DecodeInferRequest(*message),
                        [this, message, seq](absl::StatusOr<InferResponse> result) {
                          inference::ModelStreamInferResponse out;
                          if (result.ok()) {
                            EncodeInferResponse(*result, out.mutable_infer_response());
                          } else {
                            out.set_error_message(std::string(result.status().message()));
                            out.mutable_infer_response()->set_id(message->id());
                            out.mutable_infer_response()->set_model_name(message->model_name());
                            out.mutable_infer_response()->set_model_version(
                                message->model_version());
                          }
                          Enqueue(seq, std::move(out));
                        });
    StartRead(&incoming_);
  }

  void OnWriteDone(bool /*ok*/) override {
    absl::MutexLock lock(&mu_);
    writes_.pop_front();
    --outstanding_;
    if (!writes_.empty()) {
      StartWrite(&writes_.front());
    } else {
      writing_ = false;
    }
    MaybeFinishLocked();
  }

  void OnDone() override { delete this; }

 private:
  void Enqueue(uint64_t seq, inference::ModelStreamInferResponse response) {
    absl::MutexLock lock(&mu_);
    done_.emplace(seq, std::move(response));
    for (auto it = done_.begin(); it != done_.end() && it->first == next_write_;
         it = done_.erase(it)) {
      writes_.push_back(std::move(it->second));
      ++next_write_;
    }
    if (!writing_ && !writes_.empty()) {
      writing_ = true;
      StartWrite(&writes_.front());
    }
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reading_done_ && outstanding_ == 0 && !writing_ && !finished_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  InferenceServer* const server_;
  inference::ModelInferRequest incoming_;  // only touched by the read chain
  absl::Mutex mu_;
  std::deque<inference::ModelStreamInferResponse> writes_ ABSL_GUARDED_BY(mu_);  // front in flight
  // Answers that completed before an earlier request's, by request sequence number.
  std::map<uint64_t, inference::ModelStreamInferResponse> done_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;    // of the next request read
  uint64_t next_write_ ABSL_GUARDED_BY(mu_) = 0;  // of the next answer to write
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // requests read, answer not yet written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext*) {
  return new StreamInferReactor(server_);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Unary(ctx, "ModelConfig", [&]() -> absl::Status {
    auto config = server_->GetModelConfig(request->name(), request->version());
    if (!config.ok()) return config.status();
    *response->mutable_config() = **config;
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* ctx, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Unary(ctx, "ModelStatistics", [&]() -> absl::Status {
    auto stats = server_->Statistics(request->name(), request->version());
    if (!stats.ok()) return stats.status();
    EncodeStatistics(*stats, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* ctx, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return Unary(ctx, "RepositoryIndex", [&] {
    EncodeRepositoryIndex(server_->RepositoryIndex(request->ready()), response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  return Unary(ctx, "RepositoryModelLoad", [&]() -> absl::Status {
    absl::StatusOr<LoadOptions> options = DecodeLoadParameters(request->parameters());
    if (!options.ok()) return options.status();
    return server_->LoadModel(request->model_name(), *options);
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  return Unary(ctx, "RepositoryModelUnload",
               [&] { return server_->UnloadModel(request->model_name()); });
}

}  // namespace kiln::server
