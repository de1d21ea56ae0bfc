// A training step under TinyJit (engine/jit) equals the same step run eagerly: a small model with BatchNorm (running
// statistics assigned in the forward pass) and Adam (moments and beta powers assigned by the step), new input tensors
// every call, implicit inputs (weights, statistics, optimizer state) updated in place. After several replays the
// losses and every state tensor match the eager run; the step replays the captured kernels (the function runs only on
// calls 1 and 2).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/jit/tiny_jit.h"
#include "engine/nn/layers.h"
#include "engine/nn/losses.h"
#include "engine/nn/module.h"
#include "engine/nn/optim.h"
#include "gtest/gtest.h"

namespace kiln::nn {
namespace {

class Net : public Module {
 public:
  Net() {
    layers.Emplace<Linear>(6, 8);
    layers.Emplace<BatchNorm>(8);
    layers.Add([](const Tensor& x) { return x.Relu(); });
    layers.Emplace<Linear>(8, 3);
  }
  Tensor Forward(const Tensor& x) override { return layers.Forward(x); }
  void CollectState(const std::string& prefix, std::vector<NamedTensor>* out) override {
    layers.CollectState(prefix + "layers.", out);
  }
  Sequential layers;
};

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};

std::vector<Batch> Batches(int n, int batch) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int32_t> label(0, 2);
  std::vector<Batch> out(n);
  for (Batch& b : out) {
    for (int i = 0; i < batch * 6; ++i) b.x.push_back(normal(rng));
    for (int i = 0; i < batch; ++i) b.y.push_back(label(rng));
  }
  return out;
}

std::vector<float> Values(const Tensor& t) {
  absl::StatusOr<std::vector<float>> v = t.ToVector<float>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>{};
}

// Trains a fresh Net (seeded init) for batches.size() steps; returns the losses and leaves the model in *state.
std::vector<float> Train(bool jit, const std::vector<Batch>& batches, int batch,
                         std::vector<std::vector<float>>* state, int* function_calls) {
  Tensor::ManualSeed(5);
  Net net;
  Adam opt(Parameters(net), 0.01);
  *function_calls = 0;
  auto step = [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    ++*function_calls;
    TrainingScope train(true);
    opt.ZeroGrad();
    Tensor loss = SparseCategoricalCrossEntropy(net(in[0]), in[1]);
    KILN_RETURN_IF_ERROR(loss.Backward());
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor*> updates, opt.ScheduleStep());
    updates.push_back(&loss);
    KILN_RETURN_IF_ERROR(Tensor::Realize(updates));
    return std::vector<Tensor>{loss};
  };
  jit::TinyJit jitted(step);
  std::vector<float> losses;
  for (const Batch& b : batches) {
    std::vector<Tensor> in = {Tensor::FromVector(b.x, {batch, 6}),
                              Tensor::FromVector(b.y, {batch})};
    absl::StatusOr<std::vector<Tensor>> out = jit ? jitted(in) : step(in);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    absl::StatusOr<float> l = (*out)[0].Item<float>();
    EXPECT_TRUE(l.ok()) << l.status();
    losses.push_back(l.ok() ? *l : NAN);
  }
  state->clear();
  for (const NamedTensor& nt : StateDict(net)) state->push_back(Values(*nt.tensor));
  return losses;
}

// JIT=1: plain replay; JIT=2: the replays run as device graphs (CPU's launch list; CUDA graphs on CUDA).
class JitTrainTest : public ::testing::TestWithParam<int> {};

TEST_P(JitTrainTest, JittedStepEqualsEagerStep) {
  backends::RegisterAllBackends();
  Context ctx({{Knob::kJit, GetParam()}});
  const int kSteps = 6, kBatch = 10;
  std::vector<Batch> batches = Batches(kSteps, kBatch);
  std::vector<std::vector<float>> eager_state, jit_state;
  int eager_calls = 0, jit_calls = 0;
  std::vector<float> eager = Train(false, batches, kBatch, &eager_state, &eager_calls);
  std::vector<float> jitted = Train(true, batches, kBatch, &jit_state, &jit_calls);
  ASSERT_EQ(eager.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(jitted.size(), eager.size());
  EXPECT_EQ(eager_calls, kSteps);
  EXPECT_EQ(jit_calls, 2);  // run, capture; then replays
  for (int i = 0; i < kSteps; ++i)
    EXPECT_NEAR(jitted[i], eager[i], 1e-5 * std::abs(eager[i])) << "step " << i;
  EXPECT_LT(eager.back(), eager.front());  // it trained
  ASSERT_EQ(jit_state.size(), eager_state.size());
  for (size_t t = 0; t < eager_state.size(); ++t) {
    ASSERT_EQ(jit_state[t].size(), eager_state[t].size());
    for (size_t j = 0; j < eager_state[t].size(); ++j) {
      EXPECT_NEAR(jit_state[t][j], eager_state[t][j], 1e-5 + 1e-5 * std::abs(eager_state[t][j]))
          << "state tensor " << t << " element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(JitModes, JitTrainTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) { return "JIT" + std::to_string(i.param); });

}  // namespace
}  // namespace kiln::nn
