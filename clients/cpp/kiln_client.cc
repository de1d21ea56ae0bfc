#include "clients/cpp/kiln_client.h"

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace kiln::client {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

KilnClient::KilnClient(const std::string& address, std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetMaxSendMessageSize(INT_MAX);
  channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  inference_ = inference::GRPCInferenceService::NewStub(channel_);
  engine_ = kiln::v1::Engine::NewStub(channel_);
  training_ = kiln::v1::Training::NewStub(channel_);
}

std::unique_ptr<grpc::ClientContext> KilnClient::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout_);
  return ctx;
}

absl::StatusOr<bool> KilnClient::ServerLive() {
  inference::ServerLiveResponse response;
  auto ctx = Context();
  if (auto s = FromGrpc(inference_->ServerLive(ctx.get(), {}, &response)); !s.ok()) return s;
  return response.live();
}

absl::StatusOr<bool> KilnClient::ServerReady() {
  inference::ServerReadyResponse response;
  auto ctx = Context();
  if (auto s = FromGrpc(inference_->ServerReady(ctx.get(), {}, &response)); !s.ok()) return s;
  return response.ready();
}

absl::StatusOr<inference::ServerMetadataResponse> KilnClient::ServerMetadata() {
  inference::ServerMetadataResponse response;
  auto ctx = Context();
  if (auto s = FromGrpc(inference_->ServerMetadata(ctx.get(), {}, &response)); !s.ok()) return s;
  return response;
}

absl::StatusOr<inference::RepositoryIndexResponse> KilnClient::RepositoryIndex() {
  inference::RepositoryIndexResponse response;
  auto ctx = Context();
  if (auto s = FromGrpc(inference_->RepositoryIndex(ctx.get(), {}, &response)); !s.ok()) return s;
  return response;
}

absl::Status KilnClient::Load(const std::string& model) {
  inference::RepositoryModelLoadRequest request;
  request.set_model_name(model);
  inference::RepositoryModelLoadResponse response;
  auto ctx = Context();
  return FromGrpc(inference_->RepositoryModelLoad(ctx.get(), request, &response));
}

absl::Status KilnClient::Unload(const std::string& model) {
  inference::RepositoryModelUnloadRequest request;
  request.set_model_name(model);
  inference::RepositoryModelUnloadResponse response;
  auto ctx = Context();
  return FromGrpc(inference_->RepositoryModelUnload(ctx.get(), request, &response));
}

absl::StatusOr<inference::ModelStatisticsResponse> KilnClient::Statistics(
    const std::string& model) {
  inference::ModelStatisticsRequest request;
  request.set_name(model);
  inference::ModelStatisticsResponse response;
  auto ctx = Context();
  if (auto s = FromGrpc(inference_->ModelStatistics(ctx.get(), request, &response)); !s.ok()) {
    return s;
  }
  return response;
}

absl::StatusOr<std::vector<NamedTensor>> KilnClient::Infer(
    const std::string& model, const std::vector<NamedTensor>& inputs,
    const std::vector<std::string>& outputs) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  for (const NamedTensor& in : inputs) {
    const std::string datatype = DtypeToKServe(in.array.dtype);
    if (datatype.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", in.name, ": dtype ", in.array.dtype, " has no KServe datatype"));
    }
    auto* t = request.add_inputs();
    t->set_name(in.name);
    t->set_datatype(datatype);
    for (int64_t d : in.array.shape) t->add_shape(d);
    request.add_raw_input_contents(in.array.data);
  }
  for (const std::string& name : outputs) request.add_outputs()->set_name(name);
  inference::ModelInferResponse response;
  auto ctx = Context();
  if (auto s = FromGrpc(inference_->ModelInfer(ctx.get(), request, &response)); !s.ok()) return s;
  std::vector<NamedTensor> result;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& o = response.outputs(i);
    NamedTensor t;
    t.name = o.name();
    t.array.dtype = KServeToDtype(o.datatype());
    t.array.shape.assign(o.shape().begin(), o.shape().end());
    if (i < response.raw_output_contents_size()) t.array.data = response.raw_output_contents(i);
    result.push_back(std::move(t));
  }
  return result;
}

absl::StatusOr<kiln::v1::ExecuteResponse> KilnClient::Execute(
    const kiln::v1::ExecuteRequest& request) {
  kiln::v1::ExecuteResponse response;
  auto ctx = Context();
  if (auto s = FromGrpc(engine_->Execute(ctx.get(), request, &response)); !s.ok()) return s;
  return response;
}

absl::StatusOr<kiln::v1::Job> KilnClient::StartJob(const kiln::v1::JobSpec& spec) {
  kiln::v1::StartJobRequest request;
  *request.mutable_spec() = spec;
  kiln::v1::Job job;
  auto ctx = Context();
  if (auto s = FromGrpc(training_->StartJob(ctx.get(), request, &job)); !s.ok()) return s;
  return job;
}

absl::StatusOr<kiln::v1::Job> KilnClient::GetJob(const std::string& id, bool include_losses) {
  kiln::v1::GetJobRequest request;
  request.set_id(id);
  request.set_include_losses(include_losses);
  kiln::v1::Job job;
  auto ctx = Context();
  if (auto s = FromGrpc(training_->GetJob(ctx.get(), request, &job)); !s.ok()) return s;
  return job;
}

absl::StatusOr<kiln::v1::ListJobsResponse> KilnClient::ListJobs() {
  kiln::v1::ListJobsResponse response;
  auto ctx = Context();
  if (auto s = FromGrpc(training_->ListJobs(ctx.get(), {}, &response)); !s.ok()) return s;
  return response;
}

absl::StatusOr<kiln::v1::Job> KilnClient::CancelJob(const std::string& id) {
  kiln::v1::CancelJobRequest request;
  request.set_id(id);
  kiln::v1::Job job;
  auto ctx = Context();
  if (auto s = FromGrpc(training_->CancelJob(ctx.get(), request, &job)); !s.ok()) return s;
  return job;
}

absl::StatusOr<kiln::v1::Job> KilnClient::ResumeJob(const std::string& id) {
  kiln::v1::ResumeJobRequest request;
  request.set_id(id);
  kiln::v1::Job job;
  auto ctx = Context();
  if (auto s = FromGrpc(training_->ResumeJob(ctx.get(), request, &job)); !s.ok()) return s;
  return job;
}

absl::Status KilnClient::WatchJob(const std::string& id,
                                  const std::function<bool(const kiln::v1::JobEvent&)>& on_event) {
  kiln::v1::WatchJobRequest request;
  request.set_id(id);
  grpc::ClientContext ctx;  // no deadline: a job may run for hours
  std::unique_ptr<grpc::ClientReader<kiln::v1::JobEvent>> reader =
      training_->WatchJob(&ctx, request);
  kiln::v1::JobEvent event;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      ctx.TryCancel();
      (void)reader->Finish();
      return absl::OkStatus();
    }
  }
  return FromGrpc(reader->Finish());
}

absl::Status KilnClient::GetCheckpoint(
    const std::string& id,
    const std::function<absl::Status(const kiln::v1::CheckpointChunk&)>& on_chunk) {
  kiln::v1::GetCheckpointRequest request;
  request.set_id(id);
  std::unique_ptr<grpc::ClientContext> ctx = Context();
  std::unique_ptr<grpc::ClientReader<kiln::v1::CheckpointChunk>> reader =
      training_->GetCheckpoint(ctx.get(), request);
  kiln::v1::CheckpointChunk chunk;
  while (reader->Read(&chunk)) {
    if (absl::Status s = on_chunk(chunk); !s.ok()) {
      ctx->TryCancel();
      (void)reader->Finish();
      return s;
    }
  }
  return FromGrpc(reader->Finish());
}

}  // namespace kiln::client
