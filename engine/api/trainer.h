// kiln::api::Trainer: training a builtin architecture through the engine facade, for kilnd's
// training jobs (server/core JobManager). Plain structs in and out; no Tensor, Module or optimizer
// type crosses this header.
//
//   Engine::CreateTrainer  builds the architecture (random init from `seed`, or the weights of a
//                          safetensors file), the optimizer, and a TinyJit train step: the first
//                          Step runs it, the second captures it, later ones replay the kernels with
//                          the new batch (weights, BatchNorm statistics and optimizer state are
//                          implicit inputs assigned in place).
//   Trainer::Step          one optimizer step on a batch; returns the loss (mean cross-entropy).
//   Trainer::Predict       argmax class per item, eval mode (BatchNorm running statistics).
//   SaveCheckpoint         one safetensors file: "model.<state-dict name>" (weights and buffers),
//                          "optim.<name>" (Optimizer::StateTensors: lr, moments, beta powers) and
//                          the caller's metadata (step, RNG state, ...). Not atomic by itself: the
//                          caller writes a temp path and renames (server/core/checkpoint_store.h).
//   LoadCheckpoint         restores every tensor in place (a captured step sees the values) after
//                          checking that the file holds exactly the trainer's names and shapes;
//                          returns the metadata. On error nothing is changed.
//   ExportWeights          the model's state dict alone (tinygrad names): what kiln_builtin loads.
//   Fit                    the training loop over an ImageDataset (trainer_fit.cc): random
//                          batches from a seeded data order, periodic evaluation and checkpoints,
//                          a stop check before every step; the caller's callbacks store progress,
//                          checkpoints and accuracy (kilnd's JobManager keeps only the job
//                          bookkeeping).
//
// Determinism: on one device, the same spec, seed and batches give bitwise-equal losses, and a
// trainer restored from a checkpoint continues bitwise-equal to the one that wrote it (the
// kernels do not depend on whether a step runs, captures or replays).
// Thread safety: a Trainer is used from one thread at a time; different Trainers may run at once
// (training mode is per thread). CreateTrainer serializes the seeded initialization.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/engine.h"

namespace kiln::api {

struct OptimizerSpec {
  std::string name = "adam";  // "sgd", "adam", "adamw"
  double lr = 1e-3;
  double momentum = 0.0;  // sgd
  bool nesterov = false;  // sgd
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
};

struct TrainerSpec {
  std::string architecture;          // a name of architectures.h
  std::vector<int64_t> mlp_sizes;    // sized architectures: {in, hidden..., classes}; else ignored
  std::string init_weights;          // "" = random init from `seed`; else a safetensors state dict
  OptimizerSpec optimizer;
  uint64_t seed = 0;
};

// Images and labels of an IDX pair (MNIST layout), uint8 pixels.
struct ImageDataset {
  int64_t count = 0;
  std::vector<int64_t> item_shape;  // e.g. {28, 28}
  std::string pixels;               // count * prod(item_shape) bytes, row-major
  std::vector<int32_t> labels;      // count entries
};

// Reads an IDX images file (rank 3) and its labels file (rank 1), gzip or raw. INVALID_ARGUMENT
// names which file is malformed, or that the counts differ; NOT_FOUND if a file is missing.
// `max_items` > 0 bounds the item count (INVALID_ARGUMENT naming the limit).
absl::StatusOr<ImageDataset> LoadIdxDataset(const std::string& images_path,
                                            const std::string& labels_path, int64_t max_items = 0);

// Lowercase hex SHA-256 of a file's bytes. NOT_FOUND / INTERNAL (read error).
absl::StatusOr<std::string> FileSha256Hex(const std::string& path);

// What Trainer::Fit runs. Steps are numbered from 0; `step` values below are steps done.
struct FitSpec {
  int64_t batch_size = 32;
  int64_t steps = 0;                // Fit runs until this many steps are done
  int64_t eval_interval = 0;        // also evaluate after every n-th step (0 = only at the end)
  int64_t checkpoint_interval = 0;  // also checkpoint after every n-th step (0 = only at the end)
  int64_t eval_images = 0;          // the first n test items (0 = all)
  uint64_t seed = 0;                // the data order when `data_order` is empty
  // Resuming: the restored checkpoint's step and data order (DataOrder state text, as
  // on_checkpoint received it); 0 and "" for a fresh start.
  int64_t start_step = 0;
  std::string data_order;
  // The step of the newest checkpoint the caller holds: Fit checkpoints at a stop and at the
  // end only when it has done steps past it.
  int64_t checkpoint_step = 0;
};

struct FitProgress {
  int64_t step = 0;  // steps done, this one included
  float loss = 0;
  double examples_per_second = 0;  // exponential moving average over steps
  double eta_seconds = 0;          // to `steps`, at that rate
};

// Why Fit stopped before `steps`: should_stop's answer.
enum class FitStop { kNone, kCancel, kInterrupt };

struct FitCallbacks {
  // Asked before every step; anything but kNone makes Fit checkpoint (if it has done steps since
  // the last checkpoint) and return. Unset = never.
  std::function<FitStop()> should_stop;
  // After every step. An error ends Fit with it.
  std::function<absl::Status(const FitProgress&)> on_step;
  // Write a checkpoint of the trainer (SaveCheckpoint) at `step`, recording `data_order` so that a
  // resume continues the same batches. An error ends Fit with it.
  std::function<absl::Status(int64_t step, const std::string& data_order)> on_checkpoint;
  // The test accuracy (correct / evaluated items), when `test` is given.
  std::function<absl::Status(double accuracy)> on_eval;
};

struct FitResult {
  int64_t step = 0;              // steps done
  FitStop stopped = FitStop::kNone;  // kNone: reached `steps`, checkpointed and evaluated
};

class Trainer {
 public:
  ~Trainer();
  const std::string& architecture() const;
  const std::vector<int64_t>& input_shape() const;  // one item, batch excluded
  int64_t num_classes() const;
  int64_t num_parameters() const;

  // x: float32 (B, *input_shape()); y: int32 (B,) class indices. INVALID_ARGUMENT for a shape or
  // dtype mismatch; INTERNAL for an engine failure.
  absl::StatusOr<float> Step(const HostTensorView& x, const HostTensorView& y);
  absl::StatusOr<std::vector<int32_t>> Predict(const HostTensorView& x);

  absl::Status SaveCheckpoint(const std::string& path,
                              const std::map<std::string, std::string>& metadata);
  absl::StatusOr<std::map<std::string, std::string>> LoadCheckpoint(const std::string& path);
  absl::Status ExportWeights(const std::string& path);

  // Trains on `train` from spec.start_step to spec.steps (pixels / the architecture's
  // pixel_divisor, labels as classes); evaluates on `test` (may be null) every eval_interval steps
  // and at the end. Bitwise reproducible: the same spec and data give the same losses, and a run
  // resumed from a checkpoint (start_step, data_order) continues the uninterrupted run's losses.
  // Errors of Step/Predict and of the callbacks end it with that status.
  absl::StatusOr<FitResult> Fit(const ImageDataset& train, const ImageDataset* test,
                                const FitSpec& spec, const FitCallbacks& callbacks);
  // OK if `text` is a data order state that Fit can resume from; DATA_LOSS otherwise.
  static absl::Status CheckDataOrder(const std::string& text);

  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::api
