// conv_perf: the kernels of the Fashion-MNIST CNN's convolutions (reference/tinygrad.md §11) through the real
// pipeline: for each conv layer, the forward output, the weight gradient and the input gradient are built with the
// Tensor API (Gradient of sum(conv(x, w) * dy)), realized `--reps` times, and every kernel launch is reported with
// its name, its best time and its GFLOPS counted on the conv's 2*B*Cout*OH*OW*Cin*K*K useful flops.
// One JSON object per line, so a script can compare against a reference (tests/bench/run.sh prints them as they are).
//   {"layer":"conv2","part":"dw","batch":512,"kernels":1,"best_s":..,"gflops":..,"names":"r_..."}
// Usage: conv_perf [--batch 512] [--reps 3] [--layers conv1,conv2,conv3,conv4] [--parts fwd,dw,dx]
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
  const char* name;
  int64_t cin, cout, hw, k;  // input is hw x hw
};
constexpr Layer kLayers[] = {{"conv1", 1, 32, 28, 5}, {"conv2", 32, 32, 24, 5}, {"conv3", 32, 64, 10, 3},
                             {"conv4", 64, 64, 8, 3}};

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
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--batch") batch = std::atoll(v.c_str());
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else if (a == "--layers") layers = absl::StrSplit(v, ',');
    else if (a == "--parts") parts = absl::StrSplit(v, ',');
    else {
      std::fprintf(stderr, "usage: %s [--batch N] [--reps R] [--layers conv1,...] [--parts fwd,dw,dx]\n", argv[0]);
      return 2;
    }
  }
  kiln::backends::RegisterAllBackends();
  Tensor::ManualSeed(1);
  for (const Layer& l : kLayers) {
    if (std::find(layers.begin(), layers.end(), l.name) == layers.end()) continue;
    const int64_t oh = l.hw - l.k + 1;
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
          out = x.Conv2d(w);
        } else {
          Tensor xx = x, ww = w;
          Tensor loss = (xx.Conv2d(ww) * dy).Sum();
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
      for (size_t i = 0; i < names.size(); ++i) kt.push_back(absl::StrFormat("%s:%.2fms", names[i], kbest[i] * 1e3));
      std::printf(
          "{\"layer\":\"%s\",\"part\":\"%s\",\"batch\":%lld,\"kernels\":%zu,\"best_s\":%.6f,\"gflops\":%.2f,"
          "\"names\":\"%s\"}\n",
          l.name, part.c_str(), static_cast<long long>(batch), names.size(), best, flops / best / 1e9,
          absl::StrJoin(kt, " ").c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
