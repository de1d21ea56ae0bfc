#include "server/grpc/inference_service.h"

#include <string>
#include <utility>

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
  return Unary(ctx, "ModelInfer", [&]() -> absl::Status {
    const InferRequest decoded = DecodeInferRequest(*request);
    absl::StatusOr<InferResponse> result = server_->Infer(decoded);
    if (!result.ok()) return result.status();
    EncodeInferResponse(*result, response);
    return absl::OkStatus();
  });
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
