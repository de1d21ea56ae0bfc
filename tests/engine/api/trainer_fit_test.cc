// engine/api: the architecture registry and Trainer::Fit. Fit is checked against a loop written
// here from its documented contract (seeded std::mt19937_64 data order, uniform item picks,
// pixels / 255 for the MLP, one Step per batch): the losses are bitwise equal; a run resumed from
// a mid-run checkpoint continues the uninterrupted run's losses bitwise; a stop request ends it at
// a step boundary after a checkpoint.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/api/architectures.h"
#include "engine/api/engine.h"
#include "engine/api/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::api {
namespace {

using ::testing::ElementsAre;

TEST(ArchitecturesTest, RegistryHoldsTheBuiltinArchitectures) {
  EXPECT_THAT(ArchitectureNames(), ElementsAre("mlp", "mnist_cnn"));
  EXPECT_EQ(BuiltinArchitectures(), ArchitectureNames());
  EXPECT_EQ(KnownArchitectures(), "mlp, mnist_cnn");
  const Architecture* cnn = FindArchitecture("mnist_cnn");
  ASSERT_NE(cnn, nullptr);
  EXPECT_FALSE(cnn->sized);
  EXPECT_EQ(cnn->InputShape({}), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(cnn->NumClasses({}), 10);
  EXPECT_EQ(cnn->pixel_divisor, 1.0f);
  const Architecture* mlp = FindArchitecture("mlp");
  ASSERT_NE(mlp, nullptr);
  EXPECT_TRUE(mlp->sized);
  EXPECT_EQ(mlp->InputShape({16, 8, 3}), (std::vector<int64_t>{16}));
  EXPECT_EQ(mlp->NumClasses({16, 8, 3}), 3);
  EXPECT_EQ(mlp->pixel_divisor, 255.0f);
  EXPECT_EQ(FindArchitecture("resnet"), nullptr);
  EXPECT_EQ(FindArchitecture(""), nullptr);
}

constexpr int64_t kItems = 40;
constexpr int64_t kBatch = 8;

ImageDataset Synthetic() {
  ImageDataset d;
  d.count = kItems;
  d.item_shape = {4, 4};
  std::mt19937 gen(7);
  for (int64_t i = 0; i < kItems * 16; ++i) d.pixels.push_back(static_cast<char>(gen() & 0xff));
  for (int64_t i = 0; i < kItems; ++i) d.labels.push_back(static_cast<int32_t>(i % 3));
  return d;
}

class TrainerFitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = Engine::Create();
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }
  std::unique_ptr<Trainer> NewTrainer() {
    TrainerSpec spec;
    spec.architecture = "mlp";
    spec.mlp_sizes = {16, 8, 3};
    spec.optimizer.name = "sgd";
    spec.optimizer.lr = 0.05;
    spec.seed = 3;
    auto t = engine_->CreateTrainer(spec);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(TrainerFitTest, LossesEqualAHandWrittenLoopAndAResumeContinuesThem) {
  const ImageDataset data = Synthetic();
  constexpr uint64_t kSeed = 11;
  constexpr int64_t kSteps = 6;

  // The reference: the contract's loop over Step.
  std::vector<float> expected;
  {
    std::unique_ptr<Trainer> t = NewTrainer();
    ASSERT_NE(t, nullptr);
    std::mt19937_64 rng(kSeed);
    std::uniform_int_distribution<int64_t> pick(0, kItems - 1);
    for (int64_t s = 0; s < kSteps; ++s) {
      std::vector<float> x;
      std::vector<int32_t> y;
      for (int64_t b = 0; b < kBatch; ++b) {
        const int64_t k = pick(rng);
        for (int p = 0; p < 16; ++p) {
          x.push_back(static_cast<float>(static_cast<uint8_t>(data.pixels[k * 16 + p])) / 255.0f);
        }
        y.push_back(data.labels[k]);
      }
      auto loss = t->Step(
          {"float32", {kBatch, 16}, {reinterpret_cast<const char*>(x.data()), x.size() * 4}},
          {"int32", {kBatch}, {reinterpret_cast<const char*>(y.data()), y.size() * 4}});
      ASSERT_TRUE(loss.ok()) << loss.status();
      expected.push_back(*loss);
    }
  }

  // Fit, checkpointing every 3 steps into a file this test keeps.
  const std::string ckpt = ::testing::TempDir() + "/trainer_fit_test.safetensors";
  std::vector<float> got;
  std::string order_at_3;
  int evals = 0;
  {
    std::unique_ptr<Trainer> t = NewTrainer();
    ASSERT_NE(t, nullptr);
    FitSpec spec;
    spec.batch_size = kBatch;
    spec.steps = kSteps;
    spec.checkpoint_interval = 3;
    spec.seed = kSeed;
    FitCallbacks cb;
    cb.on_step = [&](const FitProgress& p) {
      EXPECT_EQ(p.step, static_cast<int64_t>(got.size()) + 1);
      got.push_back(p.loss);
      return absl::OkStatus();
    };
    cb.on_checkpoint = [&](int64_t step, const std::string& order) {
      if (step == 3) {
        order_at_3 = order;
        return t->SaveCheckpoint(ckpt, {});
      }
      return absl::OkStatus();
    };
    cb.on_eval = [&](double accuracy) {
      ++evals;
      EXPECT_GE(accuracy, 0.0);
      EXPECT_LE(accuracy, 1.0);
      return absl::OkStatus();
    };
    auto r = t->Fit(data, &data, spec, cb);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step, kSteps);
    EXPECT_EQ(r->stopped, FitStop::kNone);
  }
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "step " << i + 1;
  EXPECT_EQ(evals, 1);  // eval_interval 0: at the end only
  ASSERT_FALSE(order_at_3.empty());
  EXPECT_TRUE(Trainer::CheckDataOrder(order_at_3).ok());
  EXPECT_EQ(Trainer::CheckDataOrder("not a state").code(), absl::StatusCode::kDataLoss);

  // A fresh trainer restored from the step-3 checkpoint continues with steps 4..6's losses.
  {
    std::unique_ptr<Trainer> t = NewTrainer();
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->LoadCheckpoint(ckpt).ok());
    FitSpec spec;
    spec.batch_size = kBatch;
    spec.steps = kSteps;
    spec.seed = kSeed;
    spec.start_step = 3;
    spec.data_order = order_at_3;
    spec.checkpoint_step = 3;
    std::vector<float> resumed;
    FitCallbacks cb;
    cb.on_step = [&](const FitProgress& p) {
      resumed.push_back(p.loss);
      return absl::OkStatus();
    };
    auto r = t->Fit(data, nullptr, spec, cb);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(resumed.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], expected[3 + i]) << "step " << i + 4;
  }
  std::remove(ckpt.c_str());
}

TEST_F(TrainerFitTest, AStopRequestEndsAtAStepBoundaryAfterACheckpoint) {
  const ImageDataset data = Synthetic();
  std::unique_ptr<Trainer> t = NewTrainer();
  ASSERT_NE(t, nullptr);
  FitSpec spec;
  spec.batch_size = kBatch;
  spec.steps = 100;
  int64_t steps = 0;
  std::vector<int64_t> checkpoints;
  FitCallbacks cb;
  cb.should_stop = [&] { return steps == 2 ? FitStop::kCancel : FitStop::kNone; };
  cb.on_step = [&](const FitProgress& p) {
    steps = p.step;
    return absl::OkStatus();
  };
  cb.on_checkpoint = [&](int64_t step, const std::string&) {
    checkpoints.push_back(step);
    return absl::OkStatus();
  };
  auto r = t->Fit(data, nullptr, spec, cb);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 2);
  EXPECT_EQ(r->stopped, FitStop::kCancel);
  EXPECT_THAT(checkpoints, ElementsAre(2));

  // A callback's error ends Fit with it.
  cb.should_stop = nullptr;
  cb.on_step = [](const FitProgress&) { return absl::ResourceExhaustedError("disk full"); };
  auto failed = t->Fit(data, nullptr, spec, cb);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kiln::api
