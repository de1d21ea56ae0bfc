// kernel_perf: steady-state kernel figures for tests/bench/matmul_compare.py (make bench). Not a Google Benchmark:
// the compare script wants one JSON object per line on stdout, and compile time needs cold/cached control.
//
// For each case the kernel comes from the real pipeline (Tensor ops -> CreateSchedule -> LowerKernel with the same
// Target realize uses -> CompileKernel -> Launch), with the inputs realized first and the output allocated once;
// Launch(timed=true) is then repeated after a warm-up and the best and median kernel times are printed.
//   {"case":"matmul","n":"512","k":512,"name":"r_...","opts":"...","best_s":..,"median_s":..,"gflops":..,
//    "max_abs_err":..,"pre":"<kernels timed with it>"}      (n: the size as given, "N" or "MxNxK")
//   {"case":"add","numel":16777216,...,"gbs":..}           (bytes = 3 * 4 * numel: two reads, one write)
//   {"case":"memcpy","bytes":...,"threads":1|2,"gbs":..}  (bytes counted as read + write)
//   {"case":"compile","kernel":"...","lower_ms":..,"cold_ms":..,"cached_ms":..}
//       lower_ms: LowerKernel; cold_ms: render + LLVM compile + load with an empty, memory-only cache;
//       cached_ms: render + cache hit + load.
// BEAM=n: each kernel's opts come from the BEAM cache or a search (engine/realize/beam.h) instead of the heuristic.
// KERNEL_PERF_DUMP=DIR writes each kernel's rendered source to DIR/<kernel name>.ll and its object to .o.
// Usage: kernel_perf [--sizes 512,1024,2048,4096x4096x1024] [--reps R] [--add-numel N] [--skip-add]
//   (a size N is N x N x N; MxNxK is A [M, K] @ B [K, N])
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/codegen/codegen.h"
#include "engine/codegen/render/renderer.h"
#include "engine/realize/beam.h"
#include "engine/realize/realize_internal.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/compile_cache.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}


struct Loaded {
  codegen::Program program;
  std::unique_ptr<runtime::Program> runner;
  std::vector<std::shared_ptr<runtime::Buffer>> hold;
  std::vector<runtime::DeviceMemory> mems;
  runtime::LaunchDims dims;
  double lower_s = 0, cold_s = 0, cached_s = 0;
  // Kernels that run before this one and are timed with it (the CPU matmul's pack of B, engine/tensor/nn_ops.cc).
  std::vector<Loaded> pre;
};

absl::StatusOr<Loaded> PrepareOne(const ScheduleItem* item);

// Schedules `out` (its inputs must be realized), lowers, compiles and binds its buffers. The last kernel is the one
// reported; kernels before it (a pack of a matmul operand) are timed with it.
absl::StatusOr<Loaded> Prepare(const Tensor& out) {
  KILN_ASSIGN_OR_RETURN(Schedule s, CreateSchedule({out.uop()}));
  std::vector<const ScheduleItem*> items;
  for (const ScheduleItem& it : s.items)
    if (it.kind == ScheduleItem::Kind::kKernel) items.push_back(&it);
  if (items.empty()) return absl::FailedPreconditionError("kernel_perf: no kernel scheduled");
  KILN_ASSIGN_OR_RETURN(Loaded l, PrepareOne(items.back()));
  for (size_t i = 0; i + 1 < items.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Loaded p, PrepareOne(items[i]));
    l.pre.push_back(std::move(p));
  }
  return l;
}

absl::StatusOr<Loaded> PrepareOne(const ScheduleItem* item) {
  KILN_ASSIGN_OR_RETURN(runtime::Device * dev, runtime::GetDevice(item->device));
  Loaded l;
  auto t0 = Clock::now();
  codegen::LowerOptions lo;
  if (const int64_t beam = GetKnob(Knob::kBeam); beam > 0) {  // BEAM=n: the searched (or cached) opts
    KILN_ASSIGN_OR_RETURN(BeamChoice c, BeamOpts(*dev, item->ast, realize_internal::TargetFor(*dev),
                                                 static_cast<int>(beam)));
    lo.use_explicit_opts = !c.heuristic;
    lo.opts = c.opts;
    t0 = Clock::now();
  }
  KILN_ASSIGN_OR_RETURN(l.program, codegen::LowerKernel(item->ast, realize_internal::TargetFor(*dev), lo));
  l.lower_s = Since(t0);
  runtime::CompileCache cold({.db_path = "", .memory_entries = 0, .disk = false});
  KILN_ASSIGN_OR_RETURN(runtime::CompiledKernel ck, runtime::CompileKernel(*dev, l.program, &cold));
  l.cold_s = ck.compile_seconds;
  if (const char* dir = std::getenv("KERNEL_PERF_DUMP"); dir != nullptr && *dir != '\0') {
    const std::string path = std::string(dir) + "/" + l.program.name + ".ll";
    if (std::FILE* f = std::fopen(path.c_str(), "w")) {
      std::fwrite(ck.source.data(), 1, ck.source.size(), f);
      std::fclose(f);
    }
    absl::StatusOr<std::string> obj = dev->compiler().Compile(ck.source, l.program.name);
    if (std::FILE* f =
            obj.ok() ? std::fopen((std::string(dir) + "/" + l.program.name + ".o").c_str(), "wb")
                     : nullptr) {
      std::fwrite(obj->data(), 1, obj->size(), f);
      std::fclose(f);
    }
  }
  runtime::CompileCache warm({.db_path = "", .memory_entries = 16, .disk = false});
  KILN_RETURN_IF_ERROR(runtime::CompileKernel(*dev, l.program, &warm).status());
  KILN_ASSIGN_OR_RETURN(runtime::CompiledKernel hit,
                        runtime::CompileKernel(*dev, l.program, &warm));
  l.cached_s = hit.compile_seconds;
  l.runner = std::move(hit.program);
  for (const UOpPtr& b : item->buffers) {
    std::shared_ptr<runtime::Buffer> buf = runtime::BufferTable::Global().Lookup(b.get());
    if (buf == nullptr) {
      KILN_ASSIGN_OR_RETURN(buf, runtime::Buffer::Create(dev, b->dtype(), b->ArgInt()));
      KILN_RETURN_IF_ERROR(runtime::BufferTable::Global().Attach(b.get(), buf));
    }
    l.mems.push_back(buf->memory());
    l.hold.push_back(std::move(buf));
  }
  l.dims.threads = l.program.threads;
  return l;
}

struct Times {
  double best = 0, median = 0;
};

absl::StatusOr<double> LaunchAll(Loaded& l) {
  double s = 0;
  for (Loaded& p : l.pre) {
    KILN_ASSIGN_OR_RETURN(double ps, p.runner->Launch(p.mems, {}, p.dims, true));
    s += ps;
  }
  KILN_ASSIGN_OR_RETURN(double ms, l.runner->Launch(l.mems, {}, l.dims, true));
  return s + ms;
}

absl::StatusOr<Times> TimeIt(Loaded& l, int reps, double min_total_s) {
  for (int i = 0; i < 2; ++i) KILN_RETURN_IF_ERROR(LaunchAll(l).status());
  std::vector<double> t;
  double total = 0;
  while (static_cast<int>(t.size()) < reps || total < min_total_s) {
    KILN_ASSIGN_OR_RETURN(double s, LaunchAll(l));
    t.push_back(s);
    total += s;
    if (t.size() > 1000) break;
  }
  std::sort(t.begin(), t.end());
  return Times{t.front(), t[t.size() / 2]};
}

void PrintCompile(const Loaded& l) {
  std::printf(
      "{\"case\":\"compile\",\"kernel\":\"%s\",\"lower_ms\":%.3f,\"cold_ms\":%.3f,\"cached_ms\":%."
      "3f}\n",
      l.program.name.c_str(), l.lower_s * 1e3, l.cold_s * 1e3, l.cached_s * 1e3);
}

struct MatmulShape {
  std::string label;
  int64_t m = 0, n = 0, k = 0;
};

absl::Status Matmul(const MatmulShape& shape, int reps) {
  const int64_t m = shape.m, n = shape.n, kk = shape.k;
  std::vector<float> a(m * kk), b(kk * n);
  uint32_t seed = 12345;
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) - 0.5f;
  };
  for (float& x : a) x = next();
  for (float& x : b) x = next();
  Tensor ta = Tensor::FromVector(a, {m, kk});
  Tensor tb = Tensor::FromVector(b, {kk, n});
  KILN_RETURN_IF_ERROR(ta.Realize());
  KILN_RETURN_IF_ERROR(tb.Realize());
  Tensor c = ta.Matmul(tb);
  KILN_ASSIGN_OR_RETURN(Loaded l, Prepare(c));
  KILN_ASSIGN_OR_RETURN(Times t, TimeIt(l, reps, 0.5));
  // Spot-check 64 outputs against a double-precision reference.
  std::vector<float> got(m * n);
  const runtime::DeviceMemory& out = l.mems[0];
  std::memcpy(got.data(), out.ptr, std::min<size_t>(out.nbytes, got.size() * sizeof(float)));
  double err = 0;
  for (int s = 0; s < 64; ++s) {
    const int64_t i = (s * 7919) % m, j = (s * 104729 + 13) % n;
    double ref = 0;
    for (int64_t k = 0; k < kk; ++k) ref += static_cast<double>(a[i * kk + k]) * b[k * n + j];
    err = std::max(err, std::fabs(ref - got[i * n + j]));
  }
  const double flops = 2.0 * m * n * kk;
  std::vector<std::string> pre_names;
  for (const Loaded& p : l.pre) pre_names.push_back(p.program.name);
  const std::string pre = absl::StrJoin(pre_names, " ");
  std::printf(
      "{\"case\":\"matmul\",\"n\":\"%s\",\"k\":%lld,\"name\":\"%s\",\"opts\":\"%s\",\"threads\":%d,\"best_s\":%."
      "6g,"
      "\"median_s\":%.6g,\"gflops\":%.3f,\"gflops_median\":%.3f,\"max_abs_err\":%.3g,\"pre\":\"%s\"}\n",
      shape.label.c_str(), static_cast<long long>(kk), l.program.name.c_str(),
      absl::StrJoin(l.program.applied_opts, " ").c_str(), l.program.threads, t.best, t.median,
      flops / t.best * 1e-9, flops / t.median * 1e-9, err, pre.c_str());
  PrintCompile(l);
  for (const Loaded& p : l.pre) PrintCompile(p);
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Add(int64_t numel, int reps) {
  std::vector<float> a(numel), b(numel);
  for (int64_t i = 0; i < numel; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.5f;
    b[i] = static_cast<float>(i % 777) * 0.25f;
  }
  Tensor ta = Tensor::FromVector(a, {numel});
  Tensor tb = Tensor::FromVector(b, {numel});
  KILN_RETURN_IF_ERROR(ta.Realize());
  KILN_RETURN_IF_ERROR(tb.Realize());
  Tensor c = ta + tb;
  KILN_ASSIGN_OR_RETURN(Loaded l, Prepare(c));
  KILN_ASSIGN_OR_RETURN(Times t, TimeIt(l, reps, 0.5));
  const float* got = static_cast<const float*>(l.mems[0].ptr);
  int64_t bad = 0;
  for (int64_t i = 0; i < numel; i += 4097) bad += got[i] != a[i] + b[i];
  const double bytes = 3.0 * 4.0 * static_cast<double>(numel);
  std::printf(
      "{\"case\":\"add\",\"numel\":%lld,\"name\":\"%s\",\"opts\":\"%s\",\"threads\":%d,\"best_s\":%"
      ".6g,"
      "\"median_s\":%.6g,\"gbs\":%.3f,\"gbs_median\":%.3f,\"mismatches\":%lld}\n",
      static_cast<long long>(numel), l.program.name.c_str(),
      absl::StrJoin(l.program.applied_opts, " ").c_str(), l.program.threads, t.best, t.median,
      bytes / t.best * 1e-9, bytes / t.median * 1e-9, static_cast<long long>(bad));
  PrintCompile(l);
  // memcpy of the output's bytes (numel * 4), 1 and 2 threads; GB/s counts read + write.
  std::vector<char> src(numel * 4, 1), dst(numel * 4, 0);
  for (int threads : {1, 2}) {
    double best = 1e30;
    for (int r = 0; r < std::max(reps, 10); ++r) {
      auto t0 = Clock::now();
      if (threads == 1) {
        std::memcpy(dst.data(), src.data(), src.size());
      } else {
        const size_t half = src.size() / 2;
        std::thread th(
            [&] { std::memcpy(dst.data() + half, src.data() + half, src.size() - half); });
        std::memcpy(dst.data(), src.data(), half);
        th.join();
      }
      best = std::min(best, Since(t0));
    }
    std::printf("{\"case\":\"memcpy\",\"bytes\":%zu,\"threads\":%d,\"best_s\":%.6g,\"gbs\":%.3f}\n",
                src.size(), threads, best, 2.0 * static_cast<double>(src.size()) / best * 1e-9);
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::vector<MatmulShape> sizes = {{"512", 512, 512, 512}, {"1024", 1024, 1024, 1024}, {"2048", 2048, 2048, 2048}};
  int reps = 10;
  int64_t add_numel = int64_t{1} << 24;
  bool skip_add = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (absl::string_view p : absl::StrSplit(argv[++i], ',')) {
        std::vector<int64_t> d;
        for (absl::string_view x : absl::StrSplit(p, 'x')) {
          int64_t v = 0;
          if (absl::SimpleAtoi(x, &v) && v > 0) d.push_back(v);
        }
        if (d.size() == 1) sizes.push_back({std::string(p), d[0], d[0], d[0]});
        if (d.size() == 3) sizes.push_back({std::string(p), d[0], d[1], d[2]});
      }
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--add-numel" && i + 1 < argc) {
      add_numel = std::max<int64_t>(1, std::atoll(argv[++i]));
    } else if (a == "--skip-add") {
      skip_add = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--sizes 512,1024,2048,MxNxK] [--reps R] [--add-numel N] [--skip-add]\n",
                   argv[0]);
      return 2;
    }
  }
  backends::RegisterAllBackends();
  for (const MatmulShape& shape : sizes) {
    if (absl::Status st = Matmul(shape, reps); !st.ok()) {
      std::fprintf(stderr, "matmul %s: %s\n", shape.label.c_str(), st.ToString().c_str());
      return 1;
    }
  }
  if (!skip_add) {
    if (absl::Status st = Add(add_numel, reps); !st.ok()) {
      std::fprintf(stderr, "add: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::Main(argc, argv); }
