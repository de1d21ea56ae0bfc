// Trains tinygrad's beautiful_mnist CNN (nn::MnistCnn, reference/tinygrad.md §11) on Fashion-MNIST with kiln's
// autograd, Adam and TinyJit, then reports test accuracy.
//
//   train_fashion_mnist [--steps 70] [--batch 512] [--seed 42] [--lr 0.001] [--data DIR]
//                       [--load FILE] [--save FILE] [--eval-only] [--test-images N] [--min-accuracy PCT]
//                       [--device D] [--expect-learning] [--pixel-divisor D]
//
// --device (default: $DEV, else CPU) places the model and the batches: CPU, CL, CUDA, ...; --expect-learning exits 1
// unless the last step's loss is below the first's (the CTest fashion_mnist_cl).
// Data: the four IDX files of Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), read with
// engine/nn/state's IDX loader; raw 0-255 pixels as tinygrad's beautiful_mnist feeds them (--pixel-divisor 255 scales
// them to [0, 1]: ~2 points lower after 70 steps). Each step samples a batch on the host (uniform with
// replacement, seeded by --seed) and passes it to the jitted step as new input tensors; the weights, BatchNorm running
// statistics and Adam state are implicit inputs that the step updates in place (Assign). JIT=0 runs the step without
// TinyJit. --load starts from a safetensors state dict (nn::LoadModel); --eval-only skips training; --save writes the
// state dict as safetensors (tinygrad names). --test-images N evaluates on the first N test images only (0: none);
// --min-accuracy makes the exit status 1 when the test accuracy is lower (or there was no evaluation).
//
// Output, one line each (tests/examples and tests/bench parse these):
//   step <i> loss <x> <ms> ms <k> kernels ...
//   time to first step: <ms> ms        (model construction to the first step's loss on the host)
//   ms/step (steps 2..n-1): <ms>       (steady state: the first two steps run and capture the JIT)
//   kernels/step: <k>
//   test accuracy: <pct>% on <n> images
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/jit/tiny_jit.h"
#include "engine/nn/losses.h"
#include "engine/nn/models.h"
#include "engine/nn/module.h"
#include "engine/nn/optim.h"
#include "engine/nn/state/idx.h"
#include "engine/realize/realize.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"

namespace {

using kiln::Tensor;
namespace nn = kiln::nn;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int Fail(const absl::Status& st, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, std::string(st.ToString()).c_str());
  return 1;
}

struct Flags {
  int steps = 70, batch = 512;
  uint64_t seed = 42;
  double lr = 1e-3, min_accuracy = -1;
  int64_t test_images = -1;  // -1: all
  std::string data_dir = "/usr/share/datasets/fashion-mnist", save, load;
  std::string device = kiln::DefaultDevice();  // --device (default $DEV, else CPU): CPU, CL, CUDA, ...
  bool eval_only = false;
  bool expect_learning = false;  // exit 1 unless the last step's loss is below the first's
  float pixel_divisor = 1.0f;     // --pixel-divisor: 1 = raw 0-255 pixels as tinygrad's beautiful_mnist; 255 = [0, 1]
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--eval-only") {
      f->eval_only = true;
      continue;
    }
    if (a == "--expect-learning") {
      f->expect_learning = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    std::string v = argv[++i];
    if (a == "--steps")
      f->steps = std::atoi(v.c_str());
    else if (a == "--batch")
      f->batch = std::atoi(v.c_str());
    else if (a == "--seed")
      f->seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--lr")
      f->lr = std::atof(v.c_str());
    else if (a == "--data")
      f->data_dir = v;
    else if (a == "--save")
      f->save = v;
    else if (a == "--load")
      f->load = v;
    else if (a == "--test-images")
      f->test_images = std::atoll(v.c_str());
    else if (a == "--min-accuracy")
      f->min_accuracy = std::atof(v.c_str());
    else if (a == "--device")
      f->device = v;
    else if (a == "--pixel-divisor")
      f->pixel_divisor = static_cast<float>(std::atof(v.c_str()));
    else
      return false;
  }
  return f->steps >= 0 && f->batch > 0 && f->pixel_divisor > 0;
}

// images (N, H, W) bytes -> float32 pixels / divisor of the rows `idx`
void Gather(const nn::IdxData& images, const nn::IdxData& labels, const std::vector<int64_t>& idx, float divisor,
            std::vector<float>* x, std::vector<int32_t>* y) {
  const int64_t px = images.dims[1] * images.dims[2];
  x->resize(idx.size() * px);
  y->resize(idx.size());
  for (size_t b = 0; b < idx.size(); ++b) {
    const uint8_t* src = images.data.data() + idx[b] * px;
    for (int64_t p = 0; p < px; ++p) (*x)[b * px + p] = src[p] / divisor;
    (*y)[b] = labels.data[idx[b]];
  }
}

// Accuracy (%) of `model` in eval mode on the whole test set, in jitted chunks of 1000 (the last chunk may be
// smaller and runs without the JIT's capture: a new shape is a different signature).
absl::StatusOr<double> Evaluate(nn::MnistCnn& model, const nn::IdxData& images,
                                const nn::IdxData& labels, int64_t n, const std::string& device, float divisor) {
  nn::TrainingScope eval(false);
  kiln::jit::TinyJit predict(
      [&model](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>{model(in[0]).Argmax(1)};
      });
  const int64_t chunk = 1000;
  int64_t correct = 0;
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t m = std::min(chunk, n - s);
    std::vector<int64_t> idx(m);
    for (int64_t i = 0; i < m; ++i) idx[i] = s + i;
    Gather(images, labels, idx, divisor, &x, &y);
    Tensor xt = Tensor::FromVector(x, {m, 1, images.dims[1], images.dims[2]}, device);
    absl::StatusOr<std::vector<Tensor>> out;
    if (m == chunk) {
      out = predict({xt});
    } else {
      out = std::vector<Tensor>{model(xt).Argmax(1)};
    }
    if (!out.ok()) return out.status();
    KILN_ASSIGN_OR_RETURN(std::vector<int32_t> pred, (*out)[0].ToVector<int32_t>());
    for (int64_t i = 0; i < m; ++i) correct += pred[i] == y[i];
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: %s [--steps N] [--batch N] [--seed N] [--lr X] [--data DIR] [--load FILE] "
                 "[--save FILE] [--eval-only] [--test-images N] [--min-accuracy PCT] [--device D] "
                 "[--expect-learning] [--pixel-divisor D]\n",
                 argv[0]);
    return 2;
  }
  kiln::backends::RegisterAllBackends();
  auto t_load = Clock::now();
  const std::string& d = flags.data_dir;
  absl::StatusOr<nn::IdxData> xtr = nn::ReadIdx(d + "/train-images-idx3-ubyte.gz", 3);
  absl::StatusOr<nn::IdxData> ytr = nn::ReadIdx(d + "/train-labels-idx1-ubyte.gz", 1);
  absl::StatusOr<nn::IdxData> xte = nn::ReadIdx(d + "/t10k-images-idx3-ubyte.gz", 3);
  absl::StatusOr<nn::IdxData> yte = nn::ReadIdx(d + "/t10k-labels-idx1-ubyte.gz", 1);
  for (const auto* r : {&xtr, &ytr, &xte, &yte}) {
    if (!r->ok()) {
      std::fprintf(stderr, "cannot read the Fashion-MNIST IDX files in %s: %s\n", d.c_str(),
                   std::string(r->status().ToString()).c_str());
      return 77;
    }
  }
  const int64_t n_train = ytr->dims[0], n_test = yte->dims[0];
  std::printf("train %lld, test %lld images (%.0f ms to read)\n", static_cast<long long>(n_train),
              static_cast<long long>(n_test), Ms(t_load, Clock::now()));

  Tensor::ManualSeed(flags.seed);
  auto t_start = Clock::now();
  nn::MnistCnn model(flags.device);
  if (!flags.load.empty()) {
    if (absl::Status st = nn::LoadModel(model, flags.load); !st.ok()) return Fail(st, "load");
    std::printf("loaded %s\n", flags.load.c_str());
  }
  const bool jit_on = kiln::GetKnob(kiln::Knob::kJit) != 0;
  if (!flags.eval_only && flags.steps > 0) {
    nn::Adam opt(nn::Parameters(model), flags.lr);
    // The step: inputs x (B, 1, 28, 28) float32 and y (B,) int32; weights, running statistics and Adam state are
    // implicit inputs assigned in place. Returns the loss.
    kiln::RealizeStats last;  // of the step's Realize when it ran (not replayed)
    kiln::jit::TinyJit step(
        [&](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
          nn::TrainingScope train(true);
          opt.ZeroGrad();
          Tensor loss = nn::SparseCategoricalCrossEntropy(model(in[0]), in[1]);
          KILN_RETURN_IF_ERROR(loss.Backward());
          KILN_ASSIGN_OR_RETURN(std::vector<Tensor*> updates, opt.ScheduleStep());
          updates.push_back(&loss);
          KILN_RETURN_IF_ERROR(Tensor::Realize(updates));
          last = kiln::LastRealizeStats();
          return std::vector<Tensor>{loss};
        });
    std::mt19937_64 rng(flags.seed);
    std::uniform_int_distribution<int64_t> pick(0, n_train - 1);
    std::vector<int64_t> idx(flags.batch);
    std::vector<float> xb;
    std::vector<int32_t> yb;
    double first_step_ms = 0, steady_ms = 0;
    float first_loss = 0, last_loss = 0;
    int steady = 0, kernels_per_step = 0;
    for (int s = 0; s < flags.steps; ++s) {
      auto t0 = Clock::now();
      for (int64_t& k : idx) k = pick(rng);
      Gather(*xtr, *ytr, idx, flags.pixel_divisor, &xb, &yb);
      Tensor x = Tensor::FromVector(xb, {flags.batch, 1, xtr->dims[1], xtr->dims[2]}, flags.device);
      Tensor y = Tensor::FromVector(yb, {flags.batch}, flags.device);
      absl::StatusOr<std::vector<Tensor>> out = step({x, y});
      if (!out.ok()) return Fail(out.status(), "step");
      absl::StatusOr<float> l = (*out)[0].Item<float>();
      if (!l.ok()) return Fail(l.status(), "loss");
      if (s == 0) first_loss = *l;
      last_loss = *l;
      auto t1 = Clock::now();
      const double ms = Ms(t0, t1);
      // a capture or replay launches the captured plan; otherwise the step's one Realize launched everything
      const bool replayed = jit_on && step.cnt() > 2;
      const kiln::RealizeStats& rs = last;
      const int kernels = step.captured() ? step.num_kernels() : rs.kernels;
      if (s == 0) first_step_ms = Ms(t_start, t1);
      if (s >= 2) {
        steady_ms += ms;
        ++steady;
        kernels_per_step = kernels;
      }
      if (replayed || (jit_on && step.cnt() == 2)) {
        std::printf("step %3d loss %.7f %8.1f ms %4d kernels (%s)\n", s, *l, ms, kernels,
                    replayed ? "replay" : "capture");
      } else {
        std::printf("step %3d loss %.7f %8.1f ms %4d kernels (%d compiled, %.1f ms compiling)\n", s,
                    *l, ms, kernels, rs.compiled, rs.compile_seconds * 1e3);
      }
      std::fflush(stdout);
    }
    std::printf("JIT=%d\n", jit_on ? 1 : 0);
    if (flags.expect_learning && !(flags.steps > 1 && last_loss < first_loss)) {
      std::fprintf(stderr, "--expect-learning: loss went from %.5f to %.5f\n", first_loss, last_loss);
      return 1;
    }
    std::printf("time to first step: %.1f ms\n", first_step_ms);
    if (steady > 0) {
      std::printf("ms/step (steps 2..%d): %.1f\n", flags.steps - 1, steady_ms / steady);
      std::printf("kernels/step: %d\n", kernels_per_step);
    }
  }

  absl::StatusOr<double> acc = 0.0;
  const int64_t n_eval = flags.test_images < 0 ? n_test : std::min(flags.test_images, n_test);
  if (n_eval > 0) {
    auto t_eval = Clock::now();
    acc = Evaluate(model, *xte, *yte, n_eval, flags.device, flags.pixel_divisor);
    if (!acc.ok()) return Fail(acc.status(), "eval");
    std::printf("test accuracy: %.2f%% on %lld images (%.0f ms)\n", *acc,
                static_cast<long long>(n_eval), Ms(t_eval, Clock::now()));
  }

  if (!flags.save.empty()) {
    if (absl::Status st = nn::SaveModel(model, flags.save); !st.ok()) return Fail(st, "save");
    std::printf("saved %s\n", flags.save.c_str());
  }
  if (flags.min_accuracy >= 0 && (n_eval == 0 || *acc < flags.min_accuracy)) {
    std::fprintf(stderr, "test accuracy %.2f%% is below --min-accuracy %.2f%%\n", *acc,
                 flags.min_accuracy);
    return 1;
  }
  return 0;
}
