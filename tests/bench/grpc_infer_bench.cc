// grpc_infer_bench: closed-loop KServe v2 ModelInfer from C++ (clients/cpp's KilnClient over the generated stubs)
// against a running kilnd, for the server-overhead figure without a Python client's own cost. Per concurrency level:
// throughput, p50/p99 latency, the model's mean compute time from ModelStatistics over the same window, and
// p50 latency minus that compute (the "server overhead"), beside a no-op RPC's p50 (ServerLive: what the
// client library and loopback gRPC cost by themselves).
//   grpc_infer_bench --address 127.0.0.1:8001 [--model fashion_mnist] [--seconds 4] [--concurrency 1,4,16]
// The input is one [1, 1, 28, 28] float32 image named by the model's metadata (fashion_mnist's INPUT).
// tests/bench/serve_bench.py starts kilnd and runs it after the Python levels when the binary is built.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "clients/cpp/kiln_client.h"

namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

bool Stats(kiln::client::KilnClient& c, const std::string& model, uint64_t* count, uint64_t* compute_ns) {
  auto s = c.Statistics(model);
  if (!s.ok() || s->model_stats_size() == 0) return false;
  *count = 0;
  *compute_ns = 0;
  for (const auto& m : s->model_stats()) {
    *count += m.inference_stats().success().count();
    *compute_ns += m.inference_stats().compute_infer().ns();
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:8001", model = "fashion_mnist";
  double seconds = 4;
  std::vector<int> levels = {1, 4, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--address") address = v;
    else if (a == "--model") model = v;
    else if (a == "--seconds") seconds = std::atof(v.c_str());
    else if (a == "--concurrency") {
      levels.clear();
      for (absl::string_view t : absl::StrSplit(v, ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(t, &n) || n < 1 || n > 256) {
          std::fprintf(stderr, "--concurrency: 1..256 each\n");
          return 2;
        }
        levels.push_back(n);
      }
    } else {
      std::fprintf(stderr, "usage: %s --address HOST:PORT [--model M] [--seconds S] [--concurrency 1,4,16]\n",
                   argv[0]);
      return 2;
    }
  }
  kiln::client::KilnClient probe(address);
  std::vector<double> live;
  for (int i = 0; i < 500; ++i) {
    const auto t0 = Clock::now();
    if (!probe.ServerLive().ok()) {
      std::fprintf(stderr, "grpc_infer_bench: kilnd at %s is not live\n", address.c_str());
      return 1;
    }
    live.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  kiln::client::NamedTensor input{"INPUT", {"float32", {1, 1, 28, 28}, std::string(784 * sizeof(float), '\0')}};
  for (int i = 0; i < 5; ++i) {  // run, capture, replays: the window measures replays only
    auto r = probe.Infer(model, {input});
    if (!r.ok()) {
      std::fprintf(stderr, "grpc_infer_bench: %s\n", std::string(r.status().ToString()).c_str());
      return 1;
    }
  }
  const double floor_us = Percentile(live, 50);
  std::printf("grpc_infer_bench: C++ KilnClient, %s, model %s, batch 1; ServerLive p50 %.1f us\n", address.c_str(),
              model.c_str(), floor_us);
  std::printf("%4s %9s %8s %8s %10s %12s\n", "conc", "req/s", "p50 us", "p99 us", "compute us", "p50-compute");
  for (int conc : levels) {
    uint64_t n0 = 0, c0 = 0, n1 = 0, c1 = 0;
    if (!Stats(probe, model, &n0, &c0)) return 1;
    std::vector<std::vector<double>> lat(conc);
    std::atomic<int> errors{0};
    const auto stop = Clock::now() + std::chrono::duration<double>(seconds);
    std::vector<std::thread> threads;
    for (int t = 0; t < conc; ++t) {
      threads.emplace_back([&, t] {
        kiln::client::KilnClient c(address);
        while (Clock::now() < stop) {
          const auto t0 = Clock::now();
          if (!c.Infer(model, {input}).ok()) ++errors;
          lat[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
      });
    }
    for (std::thread& th : threads) th.join();
    if (!Stats(probe, model, &n1, &c1)) return 1;
    std::vector<double> all;
    for (const auto& l : lat) all.insert(all.end(), l.begin(), l.end());
    const double compute_us = n1 > n0 ? static_cast<double>(c1 - c0) / static_cast<double>(n1 - n0) / 1e3 : 0;
    const double p50 = Percentile(all, 50);
    std::printf("%4d %9.1f %8.1f %8.1f %10.1f %12.1f\n", conc, static_cast<double>(all.size()) / seconds, p50,
                Percentile(all, 99), compute_us, p50 - compute_us);
    if (errors.load() > 0 || n1 - n0 != all.size()) {
      std::fprintf(stderr, "grpc_infer_bench: %d errors; statistics counted %llu of %zu requests\n", errors.load(),
                   static_cast<unsigned long long>(n1 - n0), all.size());
      return 1;
    }
  }
  return 0;
}
