// Scheduler cost: CreateSchedule alone (fusion decisions, kernel lowering, ordering, memory plan) on the
// Fashion-MNIST CNN's whole training step (forward, backward, Adam update; batch 512), the graph the first training
// step schedules. Nothing is compiled or run. Reports ms per schedule and the kernel count.
#include <benchmark/benchmark.h>

#include <vector>

#include "backends/register_all.h"
#include "engine/nn/losses.h"
#include "engine/nn/models.h"
#include "engine/nn/module.h"
#include "engine/nn/optim.h"
#include "engine/schedule/schedule.h"

namespace kiln {
namespace {

void BM_ScheduleMnistTrainStep(benchmark::State& state) {
  backends::RegisterAllBackends();
  Tensor::ManualSeed(1);
  nn::MnistCnn net;
  nn::Adam opt(nn::Parameters(net), 0.001);
  Tensor x = Tensor::Rand({512, 1, 28, 28});
  Tensor y = Tensor::RandInt(0, 10, {512});
  if (!Tensor::Realize({&x, &y}).ok()) {
    state.SkipWithError("inputs did not realize");
    return;
  }
  nn::TrainingScope train(true);
  opt.ZeroGrad();
  Tensor loss = nn::SparseCategoricalCrossEntropy(net(x), y);
  absl::StatusOr<std::vector<Tensor*>> updates;
  if (!loss.Backward().ok() || !(updates = opt.ScheduleStep()).ok()) {
    state.SkipWithError("the training graph did not build");
    return;
  }
  std::vector<UOpPtr> roots{loss.uop()};
  for (const Tensor* t : *updates) roots.push_back(t->uop());
  int64_t kernels = 0;
  for (auto _ : state) {
    absl::StatusOr<Schedule> s = CreateSchedule(roots);
    if (!s.ok()) {
      state.SkipWithError("CreateSchedule failed");
      return;
    }
    kernels = static_cast<int64_t>(s->items.size());
  }
  state.counters["items"] = static_cast<double>(kernels);
}
BENCHMARK(BM_ScheduleMnistTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kiln
