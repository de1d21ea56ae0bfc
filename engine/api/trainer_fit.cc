// Trainer::Fit: the training loop of kilnd's jobs (trainer.h). It uses only Trainer's public
// calls (Step, Predict), so a loop and a hand-written one over Step give the same losses.
#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/api/architectures.h"
#include "engine/api/trainer.h"
#include "engine/base/status.h"

namespace kiln::api {
namespace {

constexpr int64_t kEvalChunk = 1000;

// Float pixels / `divisor` and int32 labels of the items `idx`.
void Gather(const ImageDataset& d, const std::vector<int64_t>& idx, float divisor, std::string* x,
            std::string* y) {
  int64_t px = 1;
  for (int64_t s : d.item_shape) px *= s;
  x->resize(idx.size() * px * 4);
  y->resize(idx.size() * 4);
  float* xf = reinterpret_cast<float*>(x->data());
  int32_t* yi = reinterpret_cast<int32_t*>(y->data());
  for (size_t b = 0; b < idx.size(); ++b) {
    const uint8_t* src = reinterpret_cast<const uint8_t*>(d.pixels.data()) + idx[b] * px;
    for (int64_t p = 0; p < px; ++p) xf[b * px + p] = static_cast<float>(src[p]) / divisor;
    yi[b] = d.labels[idx[b]];
  }
}

absl::StatusOr<std::mt19937_64> ParseDataOrder(const std::string& text) {
  std::istringstream in(text);
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail()) return absl::DataLossError("data_rng is malformed");
  return rng;
}

}  // namespace

absl::Status Trainer::CheckDataOrder(const std::string& text) {
  return ParseDataOrder(text).status();
}

absl::StatusOr<FitResult> Trainer::Fit(const ImageDataset& train, const ImageDataset* test,
                                       const FitSpec& spec, const FitCallbacks& cb) {
  const Architecture* arch = FindArchitecture(architecture());
  const float divisor = arch != nullptr ? arch->pixel_divisor : 255.0f;
  if (spec.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size: ", spec.batch_size, " is not >= 1"));
  }
  if (train.count < 1) return absl::InvalidArgumentError("train: the dataset has no items");
  std::mt19937_64 rng(spec.seed);
  if (!spec.data_order.empty()) {
    KILN_ASSIGN_OR_RETURN(rng, ParseDataOrder(spec.data_order));
  }
  int64_t step = spec.start_step;
  int64_t checkpoint_step = spec.checkpoint_step;
  std::vector<int64_t> xshape = {spec.batch_size};
  xshape.insert(xshape.end(), input_shape().begin(), input_shape().end());

  auto checkpoint = [&]() -> absl::Status {
    std::ostringstream rs;
    rs << rng;
    if (cb.on_checkpoint) KILN_RETURN_IF_ERROR(cb.on_checkpoint(step, rs.str()));
    checkpoint_step = step;
    return absl::OkStatus();
  };
  auto evaluate = [&]() -> absl::Status {
    if (test == nullptr) return absl::OkStatus();
    const int64_t n = spec.eval_images > 0 ? std::min(spec.eval_images, test->count) : test->count;
    int64_t correct = 0;
    std::string x, y;
    for (int64_t s0 = 0; s0 < n; s0 += kEvalChunk) {
      const int64_t m = std::min(kEvalChunk, n - s0);
      std::vector<int64_t> idx(m);
      for (int64_t i = 0; i < m; ++i) idx[i] = s0 + i;
      Gather(*test, idx, divisor, &x, &y);
      std::vector<int64_t> shape = {m};
      shape.insert(shape.end(), input_shape().begin(), input_shape().end());
      KILN_ASSIGN_OR_RETURN(std::vector<int32_t> pred, Predict({"float32", shape, x}));
      const int32_t* yi = reinterpret_cast<const int32_t*>(y.data());
      for (int64_t i = 0; i < m; ++i) correct += pred[i] == yi[i];
    }
    if (cb.on_eval) {
      KILN_RETURN_IF_ERROR(cb.on_eval(static_cast<double>(correct) / static_cast<double>(n)));
    }
    return absl::OkStatus();
  };

  std::uniform_int_distribution<int64_t> pick(0, train.count - 1);
  std::vector<int64_t> idx(spec.batch_size);
  std::string x, y;
  double ema_seconds = 0;
  while (step < spec.steps) {
    const FitStop stop = cb.should_stop ? cb.should_stop() : FitStop::kNone;
    if (stop != FitStop::kNone) {
      // Stopped between steps: keep the progress, so that a resume continues from here.
      if (step > checkpoint_step) KILN_RETURN_IF_ERROR(checkpoint());
      return FitResult{step, stop};
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t& k : idx) k = pick(rng);
    Gather(train, idx, divisor, &x, &y);
    KILN_ASSIGN_OR_RETURN(float loss, Step({"float32", xshape, x}, {"int32", {spec.batch_size}, y}));
    ++step;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ema_seconds = ema_seconds == 0 ? secs : 0.7 * ema_seconds + 0.3 * secs;
    FitProgress p;
    p.step = step;
    p.loss = loss;
    p.examples_per_second = static_cast<double>(spec.batch_size) / std::max(ema_seconds, 1e-9);
    p.eta_seconds = ema_seconds * static_cast<double>(spec.steps - step);
    if (cb.on_step) KILN_RETURN_IF_ERROR(cb.on_step(p));
    if (spec.eval_interval > 0 && step % spec.eval_interval == 0 && step < spec.steps) {
      KILN_RETURN_IF_ERROR(evaluate());
    }
    if (spec.checkpoint_interval > 0 && step % spec.checkpoint_interval == 0 && step < spec.steps) {
      KILN_RETURN_IF_ERROR(checkpoint());
    }
  }
  if (checkpoint_step < step) KILN_RETURN_IF_ERROR(checkpoint());
  KILN_RETURN_IF_ERROR(evaluate());
  return FitResult{step, FitStop::kNone};
}

}  // namespace kiln::api
