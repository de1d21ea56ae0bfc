// Trainer: a builtin architecture, an optimizer and a jitted train step (trainer.h).
#include "engine/api/trainer.h"

#include <cstdio>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/architectures.h"
#include "engine/api/engine_state.h"
#include "engine/base/sha256.h"
#include "engine/base/status.h"
#include "engine/jit/tiny_jit.h"
#include "engine/nn/losses.h"
#include "engine/nn/models.h"
#include "engine/nn/module.h"
#include "engine/nn/optim.h"
#include "engine/nn/state/idx.h"
#include "engine/nn/state/safetensors.h"
#include "engine/realize/realize.h"

namespace kiln::api {
namespace {

constexpr int64_t kMaxMlpLayers = 16;
constexpr int64_t kMaxMlpWidth = 1 << 16;

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::Mutex g_init_mu(absl::kConstInit);  // Tensor::ManualSeed is process-wide

// Training steps are not capped by FLOPs or bytes moved: their sizes are validated by the job
// spec (batch, layer sizes) and a step of the largest allowed batch is legitimately long. Memory
// keeps the library default.
RunControl TrainingRunControl() {
  RunControl c;
  c.limits.max_flops = 0;
  c.limits.max_bytes_moved = 0;
  return c;
}

absl::StatusOr<std::unique_ptr<nn::Optimizer>> MakeOptimizer(const OptimizerSpec& o,
                                                             std::vector<Tensor*> params) {
  if (!(o.lr > 0) || o.lr > 10) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.lr: ", o.lr, " is not in (0, 10]"));
  }
  if (!(o.weight_decay >= 0) || o.weight_decay > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.weight_decay: ", o.weight_decay, " is not in [0, 1]"));
  }
  if (o.name == "sgd") {
    if (!(o.momentum >= 0) || o.momentum >= 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.momentum: ", o.momentum, " is not in [0, 1)"));
    }
    return std::unique_ptr<nn::Optimizer>(
        new nn::SGD(std::move(params), o.lr, o.momentum, o.weight_decay, o.nesterov));
  }
  if (o.name == "adam" || o.name == "adamw") {
    if (!(o.beta1 >= 0) || o.beta1 >= 1 || !(o.beta2 >= 0) || o.beta2 >= 1) {
      return absl::InvalidArgumentError("optimizer.beta1/beta2: each must be in [0, 1)");
    }
    if (!(o.eps > 0) || o.eps > 1) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer.eps: ", o.eps, " is not in (0, 1]"));
    }
    if (o.name == "adamw") {
      return std::unique_ptr<nn::Optimizer>(
          new nn::AdamW(std::move(params), o.lr, o.beta1, o.beta2, o.eps, o.weight_decay));
    }
    return std::unique_ptr<nn::Optimizer>(
        new nn::Adam(std::move(params), o.lr, o.beta1, o.beta2, o.eps, o.weight_decay));
  }
  return absl::InvalidArgumentError(absl::StrCat("optimizer.name: unknown '", o.name.substr(0, 32),
                                                 "' (known: sgd, adam, adamw)"));
}

}  // namespace

struct Trainer::Impl {
  std::string device;
  std::string architecture;
  std::vector<int64_t> input_shape;
  int64_t num_classes = 0;
  int64_t num_parameters = 0;
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<nn::Optimizer> opt;
  std::unique_ptr<jit::TinyJit> step;
  absl::Mutex* run_mu = nullptr;  // the engine's: one run at a time per Engine

  // Every checkpointed tensor by file name.
  std::map<std::string, Tensor*> CheckpointTensors() {
    std::map<std::string, Tensor*> out;
    for (const nn::NamedTensor& t : nn::StateDict(*model)) out["model." + t.name] = t.tensor;
    for (const auto& [name, t] : opt->StateTensors()) out["optim." + name] = t;
    return out;
  }

  absl::Status CheckBatch(const HostTensorView& x) const {
    if (x.dtype != "float32") {
      return absl::InvalidArgumentError(absl::StrCat("x: dtype ", x.dtype, ", need float32"));
    }
    if (x.shape.size() != input_shape.size() + 1 || x.shape[0] < 1 ||
        !std::equal(input_shape.begin(), input_shape.end(), x.shape.begin() + 1)) {
      return absl::InvalidArgumentError(absl::StrCat("x: shape ", ShapeText(x.shape), ", need (N, ",
                                                     absl::StrJoin(input_shape, ", "), ")"));
    }
    int64_t n = 1;
    for (int64_t d : x.shape) n *= d;
    if (static_cast<int64_t>(x.data.size()) != n * 4) {
      return absl::InvalidArgumentError(absl::StrCat("x: ", x.data.size(), " bytes, need ", n * 4));
    }
    return absl::OkStatus();
  }
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;
const std::string& Trainer::architecture() const { return impl_->architecture; }
const std::vector<int64_t>& Trainer::input_shape() const { return impl_->input_shape; }
int64_t Trainer::num_classes() const { return impl_->num_classes; }
int64_t Trainer::num_parameters() const { return impl_->num_parameters; }

absl::StatusOr<std::unique_ptr<Trainer>> Engine::CreateTrainer(const TrainerSpec& spec) {
  auto impl = std::make_unique<Trainer::Impl>();
  impl->device = state_->device;
  impl->architecture = spec.architecture;
  impl->run_mu = &state_->run_mu;
  {
    absl::MutexLock init(&g_init_mu);
    Tensor::ManualSeed(spec.seed);
    const Architecture* arch = FindArchitecture(spec.architecture);
    if (arch == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("architecture: unknown '",
                                                     spec.architecture.substr(0, 64), "' (known: ",
                                                     KnownArchitectures(), ")"));
    }
    std::vector<int64_t> sizes = arch->default_sizes;
    if (arch->sized) {
      sizes = spec.mlp_sizes;
      const auto& s = sizes;
      if (s.size() < 2 || static_cast<int64_t>(s.size()) > kMaxMlpLayers + 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mlp_sizes: need 2 to ", kMaxMlpLayers + 1, " sizes (input, hidden..., classes)"));
      }
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] < 1 || s[i] > kMaxMlpWidth) {
          return absl::InvalidArgumentError(
              absl::StrCat("mlp_sizes[", i, "]: ", s[i], " is not in [1, ", kMaxMlpWidth, "]"));
        }
      }
    }
    impl->model = arch->Build(state_->device, sizes);
    impl->input_shape = arch->InputShape(sizes);
    impl->num_classes = arch->NumClasses(sizes);
    KILN_RETURN_IF_ERROR(nn::RealizeState(*impl->model));
  }
  if (!spec.init_weights.empty()) {
    if (absl::Status st = nn::LoadModel(*impl->model, spec.init_weights, /*strict=*/true); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("init_weights: ", st.message()));
    }
  }
  for (const nn::NamedTensor& t : nn::StateDict(*impl->model)) {
    impl->num_parameters += t.tensor->numel();
  }
  KILN_ASSIGN_OR_RETURN(impl->opt,
                        MakeOptimizer(spec.optimizer, nn::Parameters(*impl->model)));
  Trainer::Impl* m = impl.get();
  impl->step = std::make_unique<jit::TinyJit>(
      [m](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
        nn::TrainingScope train(true);
        m->opt->ZeroGrad();
        Tensor loss = nn::SparseCategoricalCrossEntropy(m->model->Forward(in[0]), in[1]);
        KILN_RETURN_IF_ERROR(loss.Backward());
        KILN_ASSIGN_OR_RETURN(std::vector<Tensor*> updates, m->opt->ScheduleStep());
        updates.push_back(&loss);
        KILN_RETURN_IF_ERROR(Tensor::Realize(updates));
        return std::vector<Tensor>{loss};
      });
  return std::make_unique<Trainer>(std::move(impl));
}

absl::StatusOr<float> Trainer::Step(const HostTensorView& x, const HostTensorView& y) {
  KILN_RETURN_IF_ERROR(impl_->CheckBatch(x));
  const int64_t batch = x.shape[0];
  if (y.dtype != "int32" || y.shape.size() != 1 || y.shape[0] != batch ||
      static_cast<int64_t>(y.data.size()) != batch * 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("y: dtype ", y.dtype, " shape ", ShapeText(y.shape), ", need int32 (", batch, ")"));
  }
  absl::MutexLock l(impl_->run_mu);
  const RunControl control = TrainingRunControl();
  ScopedRunControl scope(control);
  Tensor xt = Tensor::FromHost(x.data.data(), dtypes::kFloat32, x.shape, impl_->device);
  Tensor yt = Tensor::FromHost(y.data.data(), dtypes::kInt32, y.shape, impl_->device);
  absl::StatusOr<std::vector<Tensor>> out = (*impl_->step)({xt, yt});
  if (!out.ok()) return absl::InternalError(absl::StrCat("step: ", out.status().message()));
  absl::StatusOr<float> loss = (*out)[0].Item<float>();
  if (!loss.ok()) return absl::InternalError(absl::StrCat("loss: ", loss.status().message()));
  return *loss;
}

absl::StatusOr<std::vector<int32_t>> Trainer::Predict(const HostTensorView& x) {
  KILN_RETURN_IF_ERROR(impl_->CheckBatch(x));
  absl::MutexLock l(impl_->run_mu);
  const RunControl control = TrainingRunControl();
  ScopedRunControl scope(control);
  nn::TrainingScope eval(false);
  Tensor xt = Tensor::FromHost(x.data.data(), dtypes::kFloat32, x.shape, impl_->device);
  absl::StatusOr<std::vector<int32_t>> pred = impl_->model->Forward(xt).Argmax(1).ToVector<int32_t>();
  if (!pred.ok()) return absl::InternalError(absl::StrCat("predict: ", pred.status().message()));
  return pred;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path,
                                     const std::map<std::string, std::string>& metadata) {
  absl::MutexLock l(impl_->run_mu);
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, t] : impl_->CheckpointTensors()) tensors.emplace(name, *t);
  return nn::SafeSave(tensors, path, metadata);
}

absl::StatusOr<std::map<std::string, std::string>> Trainer::LoadCheckpoint(const std::string& path) {
  absl::MutexLock l(impl_->run_mu);
  std::map<std::string, std::string> metadata;
  absl::StatusOr<std::map<std::string, Tensor>> loaded = nn::SafeLoad(path, &metadata, impl_->device);
  if (!loaded.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", loaded.status().message()));
  }
  std::map<std::string, Tensor*> targets = impl_->CheckpointTensors();
  if (loaded->size() != targets.size()) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", loaded->size(), " tensors, the trainer has ",
                                            targets.size()));
  }
  for (const auto& [name, target] : targets) {
    auto it = loaded->find(name);
    if (it == loaded->end()) {
      return absl::DataLossError(absl::StrCat("checkpoint: tensor ", name, " is missing"));
    }
    if (it->second.shape() != target->shape() || it->second.dtype() != target->dtype()) {
      return absl::DataLossError(absl::StrCat("checkpoint: tensor ", name, " has shape ",
                                              ShapeText(it->second.shape()), ", need ",
                                              ShapeText(target->shape())));
    }
  }
  std::vector<Tensor*> assigned;
  for (auto& [name, target] : targets) {
    target->Assign(loaded->at(name));
    assigned.push_back(target);
  }
  if (absl::Status st = Tensor::Realize(assigned); !st.ok()) {
    return absl::InternalError(absl::StrCat("checkpoint restore: ", st.message()));
  }
  return metadata;
}

absl::Status Trainer::ExportWeights(const std::string& path) {
  absl::MutexLock l(impl_->run_mu);
  return nn::SaveModel(*impl_->model, path);
}

absl::StatusOr<ImageDataset> LoadIdxDataset(const std::string& images_path,
                                            const std::string& labels_path, int64_t max_items) {
  absl::StatusOr<nn::IdxData> images = nn::ReadIdx(images_path, 3);
  if (!images.ok()) {
    if (absl::IsNotFound(images.status())) return absl::NotFoundError("images: file is missing");
    return absl::InvalidArgumentError(absl::StrCat("images: ", images.status().message()));
  }
  absl::StatusOr<nn::IdxData> labels = nn::ReadIdx(labels_path, 1);
  if (!labels.ok()) {
    if (absl::IsNotFound(labels.status())) return absl::NotFoundError("labels: file is missing");
    return absl::InvalidArgumentError(absl::StrCat("labels: ", labels.status().message()));
  }
  if (images->dims[0] != labels->dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat("dataset: ", images->dims[0], " images but ",
                                                   labels->dims[0], " labels"));
  }
  if (max_items > 0 && images->dims[0] > max_items) {
    return absl::InvalidArgumentError(absl::StrCat("dataset: ", images->dims[0],
                                                   " items exceed the limit of ", max_items));
  }
  ImageDataset out;
  out.count = images->dims[0];
  out.item_shape = {images->dims[1], images->dims[2]};
  out.pixels.assign(images->data.begin(), images->data.end());
  out.labels.assign(labels->data.begin(), labels->data.end());
  return out;
}

absl::StatusOr<std::string> FileSha256Hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("file is missing");
  Sha256 h;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof(buf));
    if (in.gcount() > 0) h.Update(buf, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return absl::InternalError("read error");
  return DigestHex(h.Final());
}

}  // namespace kiln::api
