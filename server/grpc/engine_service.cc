#include "server/grpc/engine_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/graph_spec_codec.h"
#include "server/grpc/status_map.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

// Views into `wire` (which outlives the call).
std::vector<GraphTensorIn> DecodeInputs(
    const google::protobuf::RepeatedPtrField<kiln::v1::Tensor>& wire) {
  std::vector<GraphTensorIn> inputs;
  inputs.reserve(wire.size());
  for (const kiln::v1::Tensor& t : wire) {
    inputs.push_back({t.name(), t.dtype(), {t.shape().begin(), t.shape().end()}, t.raw()});
  }
  return inputs;
}

void EncodeResult(api::RunResult& run, kiln::v1::ExecuteResponse* response) {
  for (api::HostTensor& out : run.outputs) {
    kiln::v1::Tensor* t = response->add_outputs();
    t->set_name(out.name);
    t->set_dtype(out.dtype);
    for (int64_t d : out.shape) t->add_shape(d);
    t->set_raw(std::move(out.data));
  }
  for (const api::KernelTiming& k : run.kernels) {
    kiln::v1::KernelTiming* t = response->add_kernels();
    t->set_name(k.name);
    t->set_device(k.device);
    t->set_duration_ns(k.duration_ns);
  }
  response->set_jit_cache_hit(run.kernels_compiled == 0);
  response->set_compile_ns(run.compile_ns);
  response->set_kernels_compiled(static_cast<uint32_t>(run.kernels_compiled));
}

absl::Status CheckServing(const InferenceServer& server) {
  if (!server.Ready()) return absl::UnavailableError("the server is shutting down");
  return absl::OkStatus();
}

GraphCall CallOf(grpc::CallbackServerContext* ctx, const std::string& device) {
  GraphCall call;
  call.device = device;
  call.deadline = CallDeadline(*ctx);
  call.cancellation = CallCancellation(ctx);
  return call;
}

}  // namespace

grpc::ServerUnaryReactor* EngineService::Execute(grpc::CallbackServerContext* ctx,
                                                 const kiln::v1::ExecuteRequest* request,
                                                 kiln::v1::ExecuteResponse* response) {
  return Unary(ctx, gate_, "Execute", [&]() -> absl::Status {
    if (absl::Status s = CheckServing(*server_); !s.ok()) return s;
    if (!request->has_graph()) return absl::InvalidArgumentError("graph: missing");
    if (absl::Status s = CheckGraphSize(request->graph()); !s.ok()) return s;
    std::vector<GraphTensorIn> inputs = DecodeInputs(request->inputs());
    absl::StatusOr<api::RunResult> run = server_->graphs().Execute(
        GraphSpecFromProto(request->graph()), inputs, CallOf(ctx, request->device()));
    if (!run.ok()) return run.status();
    EncodeResult(*run, response);
    if (absl::Status s = CheckResponseSize(*response, kMaxProtoResponseBytes); !s.ok()) {
      response->Clear();
      return s;
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EngineService::RegisterGraph(
    grpc::CallbackServerContext* ctx, const kiln::v1::RegisterGraphRequest* request,
    kiln::v1::RegisterGraphResponse* response) {
  return Unary(ctx, gate_, "RegisterGraph", [&]() -> absl::Status {
    if (absl::Status s = CheckServing(*server_); !s.ok()) return s;
    if (!request->has_graph()) return absl::InvalidArgumentError("graph: missing");
    if (absl::Status s = CheckGraphSize(request->graph()); !s.ok()) return s;
    absl::StatusOr<RegisteredGraphInfo> info = server_->graphs().Register(
        GraphSpecFromProto(request->graph()), CallOf(ctx, request->device()));
    if (!info.ok()) return info.status();
    response->set_graph_id(info->id);
    response->set_kernel_count(info->kernel_count);
    response->set_kernels_compiled(info->kernels_compiled);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EngineService::ExecuteRegistered(
    grpc::CallbackServerContext* ctx, const kiln::v1::ExecuteRegisteredRequest* request,
    kiln::v1::ExecuteResponse* response) {
  return Unary(ctx, gate_, "ExecuteRegistered", [&]() -> absl::Status {
    if (absl::Status s = CheckServing(*server_); !s.ok()) return s;
    std::vector<GraphTensorIn> inputs = DecodeInputs(request->inputs());
    absl::StatusOr<api::RunResult> run =
        server_->graphs().ExecuteRegistered(request->graph_id(), inputs, CallOf(ctx, ""));
    if (!run.ok()) return run.status();
    EncodeResult(*run, response);
    if (absl::Status s = CheckResponseSize(*response, kMaxProtoResponseBytes); !s.ok()) {
      response->Clear();
      return s;
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* EngineService::ListKernels(grpc::CallbackServerContext* ctx,
                                                     const kiln::v1::ListKernelsRequest* request,
                                                     kiln::v1::ListKernelsResponse* response) {
  return Unary(ctx, gate_, "ListKernels", [&]() -> absl::Status {
    absl::StatusOr<std::vector<GraphService::KernelRow>> rows =
        server_->graphs().Kernels(request->graph_id());
    if (!rows.ok()) return rows.status();
    for (const GraphService::KernelRow& row : *rows) {
      kiln::v1::KernelInfo* k = response->add_kernels();
      k->set_name(row.stats.name);
      k->set_device(row.stats.device);
      k->set_graph_id(row.stats.graph_key);
      k->set_launches(row.stats.launches);
      k->set_total_ns(row.stats.total_ns);
      k->set_compiles(row.stats.compiles);
      k->set_graph_runs(row.graph_runs);
    }
    return absl::OkStatus();
  });
}

}  // namespace kiln::server
