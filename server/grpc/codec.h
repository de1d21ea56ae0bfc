// Wire <-> core conversions for the KServe v2 gRPC service. Decoding never copies tensor bytes:
// the decoded InferRequest points into the ModelInferRequest, which must outlive it.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "inference/grpc_service.pb.h"
#include "server/core/infer_request.h"
#include "server/core/inference_server.h"

namespace kiln::server {

// Inputs with shared memory parameters are marked (InferInput::shared_memory) and take no
// raw_input_contents entry; ApplyRequestParameters resolves them.
InferRequest DecodeInferRequest(const inference::ModelInferRequest& wire);
// The request parameters kilnd acts on: `timeout` (int64_param or uint64_param, microseconds, as
// Triton's) tightens request->deadline (ApplyTimeoutParameter); `priority`; kiln's `kiln_viz`
// (bool_param) sets request->viz, whose admin check is the caller's (CallGate::Authorize). Every
// parameter with a value is also copied into request->parameters (kiln_llm models read their
// sampling fields there); other models ignore the rest, as Triton does.
// Tensor parameters: shared_memory_region / _offset / _byte_size of inputs and requested outputs
// are resolved against `shared_memory` (shared_memory.h; null: INVALID_ARGUMENT), inputs viewing
// the mapped bytes, the request holding the mappings; `classification` of outputs.
absl::Status ApplyRequestParameters(const inference::ModelInferRequest& wire, InferRequest* request,
                                    const SharedMemoryManager* shared_memory = nullptr);
// The outputs (raw_output_contents) and the response's parameters.
void EncodeInferResponse(const InferResponse& response, inference::ModelInferResponse* wire);

// `config` (string: JSON ModelConfig) and `file:*` parameters of RepositoryModelLoad.
// INVALID_ARGUMENT if `config` is not a string parameter.
absl::StatusOr<LoadOptions> DecodeLoadParameters(
    const google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& params);

void EncodeServerMetadata(const ServerMetadata& metadata, inference::ServerMetadataResponse* wire);
void EncodeModelMetadata(const ModelMetadata& metadata, inference::ModelMetadataResponse* wire);
void EncodeRepositoryIndex(const std::vector<RepositoryIndexEntry>& index,
                           inference::RepositoryIndexResponse* wire);
void EncodeSharedMemoryStatus(const std::vector<SharedMemoryRegionStatus>& regions,
                              inference::SystemSharedMemoryStatusResponse* wire);
void EncodeStatistics(const std::vector<ModelStatsEntry>& stats,
                      inference::ModelStatisticsResponse* wire);

}  // namespace kiln::server
