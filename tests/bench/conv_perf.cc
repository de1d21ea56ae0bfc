// conv_perf: the kernels of the Fashion-MNIST CNN's convolutions (reference/tinygrad.md §11) through the real
// pipeline: for each conv layer, the forward output, the weight gradient and the input gradient are built with the
// Tensor API (Gradient of sum(conv(x, w) * dy)), realized `--reps` times, and every kernel launch is reported with
// its name, its best time and its GFLOPS counted on the conv's 2*B*Cout*OH*OW*Cin*K*K useful flops.
// One JSON object per line, so a script can compare against a reference (tests/bench/conv_compare.py against
// PyTorch; tests/bench/run.sh prints them as they are):
//   {"layer":"conv2","part":"dw","batch":512,"kernels":1,"best_s":..,"kernel_s":..,"gflops":..,"names":"r_..."}
// best_s: the fastest realize of the part (building, scheduling and launching included); kernel_s: the sum of its
// kernels' fastest times. --shape NAME:CIN:COUT:HW:K[:STRIDE[:PAD]] (repeatable) replaces the CNN's layers by
// other convolutions (a square HW x HW input, K x K kernel, zero padding PAD on every side).
// Usage: conv_perf [--batch 512] [--reps 3] [--layers conv1,conv2,conv3,conv4] [--parts fwd,dw,dx] [--shape ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/register_all.h"
#include "engine/realize/realize.h"
#include "engine/tensor/gradient.h"
#include "engine/tensor/tensor.h"

namespace {

using kiln::Tensor;

struct Layer {
  std::string name;
  int64_t cin, cout, hw, k;  // input is hw x hw
  int64_t stride = 1, pad = 0;
};
const std::vector<Layer> kCnnLayers = {{"conv1", 1, 32, 28, 5}, {"conv2", 32, 32, 24, 5}, {"conv3", 32, 64, 10, 3},
                                       {"conv4", 64, 64, 8, 3}};

// NAME:CIN:COUT:HW:K[:STRIDE[:PAD]]
bool ParseShape(const std::string& spec, Layer* l) {
  std::vector<std::string> f = absl::StrSplit(spec, ':');
  if (f.size() < 5 || f.size() > 7 || f[0].empty()) return false;
  std::vector<int64_t> v;
  for (size_t i = 1; i < f.size(); ++i) {
    char* end = nullptr;
    const long long x = std::strtoll(f[i].c_str(), &end, 10);
    if (f[i].empty() || *end != '\0' || x < (i == 6 ? 0 : 1) || x > 4096) return false;
    v.push_back(x);
  }
  *l = Layer{f[0], v[0], v[1], v[2], v[3], v.size() > 4 ? v[4] : 1, v.size() > 5 ? v[5] : 0};
  return true;
}

Tensor Realized(Tensor t) {
  if (absl::Status st = t.Realize(); !st.ok()) {
    std::fprintf(stderr, "realize: %s\n", std::string(st.ToString()).c_str());
    std::exit(1);
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 512;
  int reps = 3;
  std::vector<std::string> layers = {"conv1", "conv2", "conv3", "conv4"}, parts = {"fwd", "dw", "dx"};
  std::vector<Layer> shapes;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    Layer l;
    if (a == "--batch") batch = std::atoll(v.c_str());
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else if (a == "--layers") layers = absl::StrSplit(v, ',');
    else if (a == "--parts") parts = absl::StrSplit(v, ',');
    else if (a == "--shape" && ParseShape(v, &l)) shapes.push_back(l);
    else {
      std::fprintf(stderr,
                   "usage: %s [--batch N] [--reps R] [--layers conv1,...] [--parts fwd,dw,dx] "
                   "[--shape NAME:CIN:COUT:HW:K[:STRIDE[:PAD]]]...\n",
                   argv[0]);
      return 2;
    }
  }
  if (batch < 1 || reps < 1) {
    std::fprintf(stderr, "--batch and --reps must be >= 1\n");
    return 2;
  }
  if (!shapes.empty()) {
    layers.clear();
    for (const Layer& l : shapes) layers.push_back(l.name);
  }
  kiln::backends::RegisterAllBackends();
  Tensor::ManualSeed(1);
  for (const Layer& l : shapes.empty() ? kCnnLayers : shapes) {
    if (std::find(layers.begin(), layers.end(), l.name) == layers.end()) continue;
    const int64_t oh = (l.hw + 2 * l.pad - l.k) / l.stride + 1;
    kiln::ConvOptions opts;
    opts.stride = {l.stride};
    opts.padding = {l.pad};
    const double flops = 2.0 * batch * l.cout * oh * oh * l.cin * l.k * l.k;
    Tensor x = Realized(Tensor::Randn({batch, l.cin, l.hw, l.hw}));
    Tensor w = Realized(Tensor::Randn({l.cout, l.cin, l.k, l.k}));
    Tensor dy = Realized(Tensor::Randn({batch, l.cout, oh, oh}));
    for (const std::string& part : parts) {
      double best = 1e30;
      std::vector<std::string> names;
      std::vector<double> kbest;
      for (int r = 0; r < reps; ++r) {
        Tensor out;
        if (part == "fwd") {
          out = x.Conv2d(w, std::nullopt, opts);
        } else {
          Tensor xx = x, ww = w;
          Tensor loss = (xx.Conv2d(ww, std::nullopt, opts) * dy).Sum();
          auto g = kiln::Gradient(loss, {part == "dw" ? ww : xx});
          if (!g.ok()) {
            std::fprintf(stderr, "gradient: %s\n", std::string(g.status().ToString()).c_str());
            return 1;
          }
          out = (*g)[0];
        }
        auto t0 = std::chrono::steady_clock::now();
        Realized(out);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const kiln::RealizeStats& rs = kiln::LastRealizeStats();
        if (r == 0) {
          for (const auto& k : rs.launches) names.push_back(k.name);
          kbest.assign(rs.launches.size(), 1e30);
        }
        if (r > 0 || reps == 1) best = std::min(best, s);
        for (size_t i = 0; i < rs.launches.size() && i < kbest.size(); ++i)
          kbest[i] = std::min(kbest[i], rs.launches[i].seconds);
      }
      std::vector<std::string> kt;
      double ksum = 0;
      for (size_t i = 0; i < names.size(); ++i) {
        kt.push_back(absl::StrFormat("%s:%.3fms", names[i], kbest[i] * 1e3));
        ksum += kbest[i];
      }
      std::printf(
          "{\"layer\":\"%s\",\"part\":\"%s\",\"batch\":%lld,\"kernels\":%zu,\"best_s\":%.6f,\"kernel_s\":%.6f,"
          "\"gflops\":%.2f,\"names\":\"%s\"}\n",
          l.name.c_str(), part.c_str(), static_cast<long long>(batch), names.size(), best, ksum,
          flops / (ksum > 0 ? ksum : best) / 1e9, absl::StrJoin(kt, " ").c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
