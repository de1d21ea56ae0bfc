// Trains tinygrad's beautiful_mnist CNN (reference/tinygrad.md §11) on Fashion-MNIST with kiln's
// autograd, nn layers and Adam, then reports test accuracy.
//
//   train_fashion_mnist [--steps 70] [--batch 512] [--seed 42] [--lr 0.001] [--data DIR] [--save FILE] [--device D]
//
// --device (default: $DEV, else CPU) places the model and the batches: CPU, CL, CUDA, ...
// --eval N evaluates on the first N test images (default all 10k). --expect-learning exits 1 unless the last step's
// loss is below the first's (the CTest fashion_mnist_cl uses it).
// Data: the four IDX .gz files of Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
// Pixels are scaled to [0, 1]. Batches are sampled on the host (uniform with replacement, seeded).
// Prints per step: loss, ms/step and kernels launched; then time to first step and test accuracy on
// the 10k test images (eval mode: BatchNorm running statistics).
// TODO(#4): read the data with engine/nn/state's IDX loader, run the step under TinyJit and write
// --save as safetensors once those land; until then --save writes a raw float32 dump.
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/nn/layers.h"
#include "engine/nn/losses.h"
#include "engine/nn/module.h"
#include "engine/nn/optim.h"
#include "engine/realize/realize.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/gradient.h"
#include "engine/tensor/tensor.h"

namespace {

using kiln::Tensor;
namespace nn = kiln::nn;

// Reads a gzip'd IDX file: returns the payload after the header and fills dims.
bool ReadIdx(const std::string& path, std::vector<uint8_t>* data, std::vector<int64_t>* dims) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  std::vector<uint8_t> buf;
  uint8_t chunk[1 << 16];
  int n;
  while ((n = gzread(f, chunk, sizeof(chunk))) > 0) buf.insert(buf.end(), chunk, chunk + n);
  gzclose(f);
  if (buf.size() < 4 || buf[2] != 0x08) return false;  // unsigned byte data
  int nd = buf[3];
  size_t off = 4;
  int64_t total = 1;
  dims->clear();
  for (int i = 0; i < nd; ++i) {
    int64_t d = (int64_t{buf[off]} << 24) | (int64_t{buf[off + 1]} << 16) | (int64_t{buf[off + 2]} << 8) | buf[off + 3];
    dims->push_back(d);
    total *= d;
    off += 4;
  }
  if (buf.size() != off + static_cast<size_t>(total)) return false;
  data->assign(buf.begin() + off, buf.end());
  return true;
}

class Model : public nn::Module {
 public:
  explicit Model(const std::string& dev) {
    auto relu = [](const Tensor& x) { return x.Relu(); };
    auto pool = [](const Tensor& x) { return x.MaxPool2d({2, 2}); };
    layers.Emplace<nn::Conv2d>(1, 32, 5, kiln::ConvOptions{}, true, dev);
    layers.Add(relu);
    layers.Emplace<nn::Conv2d>(32, 32, 5, kiln::ConvOptions{}, true, dev);
    layers.Add(relu);
    layers.Emplace<nn::BatchNorm>(32, 1e-5, true, true, 0.1, dev);
    layers.Add(pool);
    layers.Emplace<nn::Conv2d>(32, 64, 3, kiln::ConvOptions{}, true, dev);
    layers.Add(relu);
    layers.Emplace<nn::Conv2d>(64, 64, 3, kiln::ConvOptions{}, true, dev);
    layers.Add(relu);
    layers.Emplace<nn::BatchNorm>(64, 1e-5, true, true, 0.1, dev);
    layers.Add(pool);
    layers.Add([](const Tensor& x) { return x.Flatten(1); });
    layers.Emplace<nn::Linear>(576, 10, true, dev);
  }
  Tensor Forward(const Tensor& x) override { return layers.Forward(x); }
  void CollectState(const std::string& prefix, std::vector<nn::NamedTensor>* out) override {
    layers.CollectState(prefix + "layers.", out);
  }
  nn::Sequential layers;
};

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int Fail(const absl::Status& st, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, std::string(st.ToString()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 70, batch = 512;
  int64_t eval_images = -1;
  bool expect_learning = false;
  uint64_t seed = 42;
  double lr = 1e-3;
  std::string data_dir = "/usr/share/datasets/fashion-mnist", save, device = kiln::DefaultDevice();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") steps = std::atoi(next().c_str());
    else if (a == "--batch") batch = std::atoi(next().c_str());
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--lr") lr = std::atof(next().c_str());
    else if (a == "--data") data_dir = next();
    else if (a == "--save") save = next();
    else if (a == "--device") device = next();
    else if (a == "--eval") eval_images = std::atoll(next().c_str());
    else if (a == "--expect-learning") expect_learning = true;
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--batch N] [--seed N] [--lr X] [--data DIR] [--save FILE] [--device D] [--eval N] [--expect-learning]\n", argv[0]);
      return 2;
    }
  }
  kiln::backends::RegisterAllBackends();
  std::vector<uint8_t> xtr, ytr, xte, yte;
  std::vector<int64_t> d;
  if (!ReadIdx(data_dir + "/train-images-idx3-ubyte.gz", &xtr, &d) ||
      !ReadIdx(data_dir + "/train-labels-idx1-ubyte.gz", &ytr, &d) ||
      !ReadIdx(data_dir + "/t10k-images-idx3-ubyte.gz", &xte, &d) ||
      !ReadIdx(data_dir + "/t10k-labels-idx1-ubyte.gz", &yte, &d)) {
    std::fprintf(stderr, "cannot read the Fashion-MNIST IDX files in %s\n", data_dir.c_str());
    return 77;
  }
  const int64_t n_train = static_cast<int64_t>(ytr.size());
  const int64_t n_test = eval_images >= 0 ? std::min<int64_t>(eval_images, yte.size()) : static_cast<int64_t>(yte.size());
  std::printf("train %lld, test %lld images\n", static_cast<long long>(n_train), static_cast<long long>(n_test));

  Tensor::ManualSeed(seed);
  if (absl::StatusOr<kiln::runtime::Device*> dev = kiln::runtime::GetDevice(device); !dev.ok()) {
    Fail(dev.status(), "device");
    return absl::IsNotFound(dev.status()) ? 77 : 1;  // 77: the device is absent here (CTest skips)
  }
  std::printf("device %s\n", device.c_str());
  Model model(device);
  auto t_start = std::chrono::steady_clock::now();
  nn::Adam opt(nn::Parameters(model), lr);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, n_train - 1);
  std::vector<float> xb(static_cast<size_t>(batch) * 784);
  std::vector<int32_t> yb(batch);
  double first_step_ms = 0, total_ms = 0;
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < batch; ++b) {
      int64_t k = pick(rng);
      for (int p = 0; p < 784; ++p) xb[b * 784 + p] = xtr[k * 784 + p] / 255.0f;
      yb[b] = ytr[k];
    }
    Tensor x = Tensor::FromVector(xb, {batch, 1, 28, 28}, device);
    Tensor y = Tensor::FromVector(yb, {batch}, device);
    opt.ZeroGrad();
    Tensor loss;
    int kernels = 0, compiled = 0;
    double compile_ms = 0;
    {
      nn::TrainingScope train(true);
      loss = nn::SparseCategoricalCrossEntropy(model(x), y);
      if (absl::Status st = loss.Backward(); !st.ok()) return Fail(st, "backward");
      if (absl::Status st = opt.Step({&loss}); !st.ok()) return Fail(st, "step");
      const kiln::RealizeStats& rs = kiln::LastRealizeStats();
      kernels = rs.kernels;
      compiled = rs.compiled;
      compile_ms = rs.compile_seconds * 1e3;
    }
    absl::StatusOr<float> l = loss.Item<float>();
    if (!l.ok()) return Fail(l.status(), "loss");
    if (step == 0) first_loss = *l;
    last_loss = *l;
    auto t1 = std::chrono::steady_clock::now();
    double ms = Ms(t0, t1);
    if (step == 0) first_step_ms = Ms(t_start, t1);
    else total_ms += ms;
    std::printf("step %3d  loss %.4f  %8.1f ms  %d kernels (%d compiled, %.1f ms compiling)\n", step, *l, ms, kernels,
                compiled, compile_ms);
    std::fflush(stdout);
  }
  std::printf("time to first step: %.1f ms\n", first_step_ms);
  if (steps > 1) std::printf("ms/step (steps 1..%d): %.1f\n", steps - 1, total_ms / (steps - 1));

  // test accuracy, eval mode
  nn::TrainingScope eval(false);
  int64_t correct = 0;
  const int64_t eb = 1000;
  std::vector<float> xe(eb * 784);
  for (int64_t s = 0; s < n_test; s += eb) {
    int64_t m = std::min(eb, n_test - s);
    xe.resize(m * 784);
    for (int64_t i = 0; i < m * 784; ++i) xe[i] = xte[s * 784 + i] / 255.0f;
    Tensor pred = model(Tensor::FromVector(xe, {m, 1, 28, 28}, device)).Argmax(1);
    absl::StatusOr<std::vector<int32_t>> p = pred.ToVector<int32_t>();
    if (!p.ok()) return Fail(p.status(), "eval");
    for (int64_t i = 0; i < m; ++i) correct += (*p)[i] == yte[s + i];
  }
  double acc = n_test > 0 ? 100.0 * static_cast<double>(correct) / static_cast<double>(n_test) : 0.0;
  std::printf("test accuracy: %.2f%%\n", acc);

  if (!save.empty()) {
    std::ofstream out(save, std::ios::binary);
    for (nn::NamedTensor& nt : nn::StateDict(model)) {
      absl::StatusOr<std::vector<float>> v = nt.tensor->ToVector<float>();
      if (!v.ok()) return Fail(v.status(), "save");
      out.write(reinterpret_cast<const char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(float)));
    }
    std::printf("saved %s\n", save.c_str());
  }
  if (expect_learning && !(last_loss < first_loss)) {
    std::fprintf(stderr, "the loss did not fall: %.4f -> %.4f\n", first_loss, last_loss);
    return 1;
  }
  return 0;
}
