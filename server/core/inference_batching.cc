// InferenceServer's dynamic batching (issue #20): the pull that forms a version's batches on its
// device lane and runs each as one execution. Policy and queue: dynamic_batcher.h; the path of a
// single request: inference_server.cc / inference_execute.cc.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/api/model.h"
#include "engine/api/status.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/failpoint.h"
#include "server/core/guard.h"
#include "server/core/inference_binder.h"
#include "server/core/model_config.h"
#include "server/core/inference_server.h"

namespace kiln::server {

void InferenceServer::Enqueue(Task task) {
  const std::shared_ptr<const ModelVersion> version = task.model;
  auto owned = std::make_unique<Task>(std::move(task));
  owned->admitted = std::chrono::steady_clock::now();
  absl::StatusOr<bool> pushed = version->batcher->Push(&owned, owned->admitted);
  if (!pushed.ok()) {  // the level's queue is full: the task is still ours
    version->pending->fetch_sub(1);
    if (observer_ != nullptr) observer_->ObservePending(owned->obs.model, owned->obs.version, -1);
    owned->obs.rejected = true;
    Finish(*owned, pushed.status());
    return;
  }
  if (*pushed) {  // a new pull, on the least busy instance
    DeviceLane* lane = PickLane(*version);
    lane->Submit([this, version, lane] { RunBatches(version, lane); }, /*may_inline=*/false);
  }
}

void InferenceServer::RunBatches(const std::shared_ptr<const ModelVersion>& version, DeviceLane* lane) {
  DynamicBatcher& batcher = *version->batcher;
  DynamicBatcher::Step step = batcher.Next(shutting_down_);
  std::vector<absl::StatusOr<InferResponse>> answers;
  if (step.batch.size() == 1) {
    answers.push_back(Guard("ModelInfer", [&] { return ExecuteTask(*step.batch.front()); }));
  } else if (!step.batch.empty()) {
    answers = ExecuteBatch(*lane, *version, step.batch);
  }
  // Before answering: the next pull queued behind whatever else waits for the device, and the
  // device released, so the next batch forms while these requests are answered.
  if (batcher.ContinueOrStop()) {
    lane->Submit([this, version, lane] { RunBatches(version, lane); }, /*may_inline=*/false);
  }
  lane->Release();
  for (auto& [task, status] : step.refused) {
    version->pending->fetch_sub(1);
    if (observer_ != nullptr) observer_->ObservePending(task->obs.model, task->obs.version, -1);
    task->obs.dropped = true;
    task->obs.rejected = absl::IsUnavailable(status);  // queue timeout under REJECT
    task->obs.queue_ns = NanosSince(task->admitted);
    Finish(*task, std::move(status));
  }
  for (size_t i = 0; i < step.batch.size(); ++i) Finish(*step.batch[i], std::move(answers[i]));
}

std::vector<absl::StatusOr<InferResponse>> InferenceServer::ExecuteBatch(
    DeviceLane& lane, const ModelVersion& version, std::vector<std::unique_ptr<Task>>& tasks) {
  const size_t n = tasks.size();
  std::vector<absl::StatusOr<InferResponse>> answers(n, absl::UnknownError("not executed"));
  std::vector<CacheProbe> cached(n);
  std::vector<ExecutionTimes> times(n);
  std::vector<size_t> run;  // tasks to execute (not answered by BeginTask)
  for (size_t i = 0; i < n; ++i) {
    if (auto answer = BeginTask(*tasks[i], &cached[i], &times[i]); answer.has_value()) {
      answers[i] = *std::move(answer);
    } else {
      run.push_back(i);
    }
  }
  if (run.empty()) return answers;
  const absl::Status batch_status = Guard("ModelInfer", [&]() -> absl::Status {
    KILN_FAILPOINT("infer.execute");
    const inference::ModelConfig& config = *version.config;
    std::shared_ptr<api::Model> model = ModelFor(lane, version);
    if (model == nullptr) {
      return absl::InternalError(absl::StrCat("model '", version.name, "' has no engine model"));
    }
    // Inputs: each request's tensors bound as for a single run, then concatenated along dim 0
    // in the first request's input order (equal signatures: the same inputs, dtypes and
    // non-batch dims).
    const auto input_start = std::chrono::steady_clock::now();
    std::vector<BoundInputs> bound(run.size());
    int64_t rows = 0;
    for (size_t k = 0; k < run.size(); ++k) {
      const Task& t = *tasks[run[k]];
      KILN_RETURN_IF_ERROR(BindInputs(config, t.request, t.valid, model->kind(), &bound[k]));
      rows += t.valid.batch_size;
    }
    const std::vector<api::NamedHostTensorView>& first = bound.front().views;
    std::vector<std::string> merged(first.size());
    std::vector<api::NamedHostTensorView> views(first.size());
    for (size_t j = 0; j < first.size(); ++j) {
      size_t bytes = 0;
      std::vector<const api::NamedHostTensorView*> parts;
      for (const BoundInputs& b : bound) {
        auto it = std::find_if(b.views.begin(), b.views.end(),
                               [&](const api::NamedHostTensorView& v) { return v.name == first[j].name; });
        if (it == b.views.end() || it->view.dtype != first[j].view.dtype) {
          return absl::InternalError(absl::StrCat("dynamic batch: input '", first[j].name,
                                                  "' differs between the batched requests"));
        }
        parts.push_back(&*it);
        bytes += it->view.data.size();
      }
      merged[j].reserve(bytes);
      for (const api::NamedHostTensorView* p : parts) merged[j].append(p->view.data);
      views[j].name = first[j].name;
      views[j].view.dtype = first[j].view.dtype;
      views[j].view.shape = first[j].view.shape;
      if (!views[j].view.shape.empty()) views[j].view.shape[0] = rows;
      views[j].view.data = merged[j];
    }
    const uint64_t input_ns = NanosSince(input_start);

    // One run for the batch: it ends at the latest deadline of its requests (the others were
    // refused before it started if theirs had passed); no single client can cancel it.
    absl::Time deadline = absl::InfinitePast();
    int64_t max_response_bytes = 0;
    for (size_t i : run) {
      deadline = std::max(deadline, tasks[i]->request.deadline);
      const int64_t cap = tasks[i]->request.max_response_bytes;
      max_response_bytes = (max_response_bytes < 0 || cap <= 0) ? -1 : max_response_bytes + cap;
    }
    api::RunOptions run_options = policy_.For(deadline, nullptr, std::max<int64_t>(0, max_response_bytes));
    run_options.label = version.name;
    run_options.max_batch = SymbolicBatchRows(config);
    // One request asks to be recorded: the batched run is.
    for (size_t i : run) run_options.viz = run_options.viz || tasks[i]->request.viz;
    ExecutionTimes batch_times;
    batch_times.batch_size = static_cast<uint64_t>(rows);
    batch_times.compute_input_ns = input_ns;
    InferObservation& lead = tasks[run.front()]->obs;
    absl::StatusOr<api::RunResult> result =
        TimedRun(lane, [&] { return model->Run(views, run_options); }, &batch_times, &lead);
    if (!result.ok()) {
      for (size_t i : run) tasks[i]->obs.engine_failure = lead.engine_failure;
      return result.status();
    }
    ObserveModelGrowth(version, *model, *result);

    // Outputs: every output's first dim is the batch; each request gets its own rows.
    const auto output_start = std::chrono::steady_clock::now();
    for (const api::HostTensor& out : result->outputs) {
      if (out.shape.empty() || out.shape[0] != rows ||
          out.data.size() % static_cast<size_t>(std::max<int64_t>(1, rows)) != 0) {
        return absl::InternalError(absl::StrCat(
            "dynamic batch: output '", out.name, "' has shape [", absl::StrJoin(out.shape, ","),
            "], whose first dim is not the batch of ", rows,
            " rows (a batching model's outputs must start with the batch dim)"));
      }
    }
    int64_t row = 0;
    for (size_t k = 0; k < run.size(); ++k) {
      Task& t = *tasks[run[k]];
      const int64_t own = t.valid.batch_size;
      api::RunResult mine;
      for (const api::HostTensor& out : result->outputs) {
        const size_t row_bytes = out.data.size() / static_cast<size_t>(rows);
        api::HostTensor slice;
        slice.name = out.name;
        slice.dtype = out.dtype;
        slice.shape = out.shape;
        slice.shape[0] = own;
        slice.data = out.data.substr(static_cast<size_t>(row) * row_bytes,
                                     static_cast<size_t>(own) * row_bytes);
        mine.outputs.push_back(std::move(slice));
      }
      row += own;
      InferResponse response = ResponseFor(version, t.request);
      absl::Status bound_out = BindOutputs(config, t.valid, /*strict_dtypes=*/model->kind() == "kiln_graph",
                                           mine, &response);
      answers[run[k]] = bound_out.ok() ? absl::StatusOr<InferResponse>(std::move(response))
                                       : absl::StatusOr<InferResponse>(bound_out);
    }
    batch_times.compute_output_ns = NanosSince(output_start);
    // Statistics: each request records itself with the batch's compute times; the batch records
    // one execution of `rows` rows.
    for (size_t k = 0; k < run.size(); ++k) {
      const size_t i = run[k];
      ExecutionTimes& ti = times[i];
      ti.compute_input_ns = batch_times.compute_input_ns;
      ti.compute_infer_ns = batch_times.compute_infer_ns;
      ti.compute_output_ns = batch_times.compute_output_ns;
      tasks[i]->obs.executed_rows = k == 0 ? batch_times.batch_size : 0;
      EndTask(*tasks[i], cached[i], ti, /*count_execution=*/false, answers[i]);
    }
    version.stats->RecordExecution(batch_times);
    version.last_compute_ns_per_item->store(
        std::max<uint64_t>(1, batch_times.compute_infer_ns / std::max<uint64_t>(1, batch_times.batch_size)),
        std::memory_order_relaxed);
    return absl::OkStatus();
  });
  if (!batch_status.ok()) {
    for (size_t i : run) answers[i] = batch_status;
  }
  return answers;
}

}  // namespace kiln::server
