// OpenCL backend on the machine's OpenCL devices (PoCL in CI): discovery, build errors with the log, the compile
// cache, profiling times, kernel counts and values against the CPU backend, and a few training steps of a small CNN
// compared with the same steps on CPU. Every test skips when no OpenCL device exists.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/opencl/cl_device.h"
#include "backends/register_all.h"
#include "engine/codegen/codegen.h"
#include "engine/nn/layers.h"
#include "engine/nn/losses.h"
#include "engine/nn/optim.h"
#include "engine/realize/realize.h"
#include "engine/runtime/compile_cache.h"
#include "engine/runtime/registry.h"
#include "engine/schedule/schedule.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln::backends {
namespace {

class ClTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterAllBackends();
    if (CountOpenClDevices() == 0) GTEST_SKIP() << "no OpenCL device (install pocl-opencl-icd)";
  }
  static runtime::Device* Dev() { return *runtime::GetDevice("CL"); }
};

std::vector<float> Values(const Tensor& t) {
  auto v = t.ToVector<float>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>{};
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::abs(want[i])) << what << " [" << i << "]";
}

TEST_F(ClTest, Discovery) {
  EXPECT_TRUE(runtime::BackendRegistry::Global().HasKind("CL"));
  auto d0 = runtime::GetDevice("cl:0");
  ASSERT_TRUE(d0.ok()) << d0.status();
  EXPECT_EQ((*d0)->renderer(), "opencl");
  auto missing = runtime::GetDevice("CL:999");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

TEST_F(ClTest, BuildErrorCarriesTheLog) {
  auto bin = Dev()->compiler().Compile("__kernel void broken(__global float* a) { a[0] = undefined_name; }", "broken");
  ASSERT_FALSE(bin.ok());
  EXPECT_EQ(bin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bin.status().message().find("build log"), std::string::npos) << bin.status();
  EXPECT_NE(bin.status().message().find("undefined_name"), std::string::npos) << bin.status();
}

TEST_F(ClTest, CopiesRoundTrip) {
  std::vector<int32_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int32_t>(i * 7 - 300);
  Tensor t = Tensor::FromVector<int32_t>(data, {10, 100}, "CL");
  auto back = t.ToVector<int32_t>();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, data);
}

// The compile cache applies to CL: a second compile of the same program is a memory hit, not a PoCL build.
TEST_F(ClTest, CompileCacheHits) {
  Tensor a = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, "CL");
  Tensor s = (a * 2.0f + 1.0f).Sum(1);
  auto sched = CreateSchedule({s.uop()});
  ASSERT_TRUE(sched.ok()) << sched.status();
  const UOpPtr* ast = nullptr;
  for (const ScheduleItem& it : sched->items)
    if (it.kind == ScheduleItem::Kind::kKernel) ast = &it.ast;
  ASSERT_NE(ast, nullptr);
  codegen::Target target;
  target.renderer = "opencl";
  target.has_local = true;
  auto prog = codegen::LowerKernel(*ast, target);
  ASSERT_TRUE(prog.ok()) << prog.status();
  runtime::CompileCache::Options o;
  o.disk = false;
  runtime::CompileCache cache(o);
  ASSERT_TRUE(runtime::CompileKernel(*Dev(), *prog, &cache).ok());
  auto k = runtime::CompileKernel(*Dev(), *prog, &cache);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().memory_hits, 1);
  EXPECT_NE(k->source.find("__kernel void"), std::string::npos);
}

// Kernel counts on CL equal CPU's (same scheduler), the launches land on CL, the values agree, and CL kernels are
// timed by profiling events.
TEST_F(ClTest, KernelCountsAndValuesMatchCpu) {
  struct Graph {
    const char* what;
    Tensor (*fn)(const std::string& dev);
  };
  static const Graph kGraphs[] = {
      {"elementwise chain", [](const std::string& d) {
         Tensor a = Tensor::FromVector<float>({1, -2, 3, -4, 5, -6, 7, -8}, {2, 4}, d);
         return ((a + 1.0f) * a).Relu().Exp2();
       }},
      {"matmul + bias + relu", [](const std::string& d) {
         std::vector<float> x(6 * 5), w(5 * 7);
         for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
         for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(static_cast<float>(i) * 0.3f);
         Tensor b = Tensor::FromVector<float>({0.1f, -0.2f, 0.3f, 0.f, 0.5f, -0.6f, 0.7f}, {7}, d);
         return (Tensor::FromVector<float>(x, {6, 5}, d).Matmul(Tensor::FromVector<float>(w, {5, 7}, d)) + b).Relu();
       }},
      {"softmax", [](const std::string& d) {
         std::vector<float> x(4 * 33);
         for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 1.7f) * 4;
         return Tensor::FromVector<float>(x, {4, 33}, d).Softmax(1);
       }},
      {"5-d permute (more than three launch dims)", [](const std::string& d) {
         std::vector<float> x(2 * 3 * 4 * 5 * 6);
         for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
         return Tensor::FromVector<float>(x, {2, 3, 4, 5, 6}, d).Permute({4, 2, 0, 3, 1}) * 3.0f;
       }},
  };
  for (const Graph& g : kGraphs) {
    SCOPED_TRACE(g.what);
    Tensor cpu = g.fn("CPU");
    ASSERT_TRUE(cpu.Realize().ok());
    const size_t cpu_kernels = LastRealizeStats().launches.size();
    Tensor cl = g.fn("CL");
    ASSERT_TRUE(cl.Realize().ok()) << cl.status();
    const RealizeStats& st = LastRealizeStats();
    EXPECT_EQ(st.launches.size(), cpu_kernels);
    for (const KernelLaunch& l : st.launches) {
      EXPECT_EQ(l.device, "CL");
      EXPECT_GE(l.seconds, 0.0);
    }
    ExpectClose(Values(cl), Values(cpu), g.what);
  }
}

// Integer division by zero inside a kernel yields 0 on CL as on CPU (never a crash).
TEST_F(ClTest, IntegerDivisionByZero) {
  std::vector<std::vector<int32_t>> got;
  for (const char* d : {"CPU", "CL"}) {
    Tensor a = Tensor::FromVector<int32_t>({7, -7, 5, std::numeric_limits<int32_t>::min(), -7}, {5}, d);
    Tensor b = Tensor::FromVector<int32_t>({0, 2, 0, -1, 2}, {5}, d);
    auto v = (a.FloorDiv(b) + a.Mod(b) * 1000).ToVector<int32_t>();
    ASSERT_TRUE(v.ok()) << d << ": " << v.status();
    EXPECT_EQ((*v)[0], 0) << d;
    EXPECT_EQ((*v)[2], 0) << d;
    EXPECT_EQ((*v)[4], -4 + 1000) << d << ": -7 // 2 = -4, -7 % 2 = 1 (Python semantics)";
    got.push_back(*v);
  }
  EXPECT_EQ(got[0], got[1]) << "CPU and CL differ";
}

// A small CNN trained for a few SGD steps on CL follows the same losses and weights as on CPU.
TEST_F(ClTest, CnnTrainingStepsMatchCpu) {
  struct Run {
    std::vector<float> losses, weights;
  };
  std::vector<float> xs(4 * 1 * 8 * 8);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i) * 0.37f);
  Tensor::ManualSeed(11);
  nn::Conv2d init_conv(1, 4, 3, {}, true, "CPU");
  nn::Linear init_fc(4 * 3 * 3, 3, true, "CPU");
  const std::vector<float> cw = Values(init_conv.weight), cb = Values(*init_conv.bias);
  const std::vector<float> fw = Values(init_fc.weight), fb = Values(*init_fc.bias);
  auto train = [&](const std::string& dev) {
    Run r;
    nn::Conv2d conv(1, 4, 3, {}, true, dev);
    nn::Linear fc(4 * 3 * 3, 3, true, dev);
    conv.weight = Tensor::FromVector<float>(cw, {4, 1, 3, 3}, dev);
    conv.bias = Tensor::FromVector<float>(cb, {4}, dev);
    fc.weight = Tensor::FromVector<float>(fw, {3, 36}, dev);
    fc.bias = Tensor::FromVector<float>(fb, {3}, dev);
    std::vector<Tensor*> ps = {&conv.weight, &*conv.bias, &fc.weight, &*fc.bias};
    for (Tensor* p : ps) p->RequiresGrad();
    nn::SGD opt(ps, 0.05, 0.9);
    Tensor x = Tensor::FromVector<float>(xs, {4, 1, 8, 8}, dev);
    Tensor y = Tensor::FromVector<int32_t>({0, 2, 1, 2}, {4}, dev);
    for (int step = 0; step < 3; ++step) {
      opt.ZeroGrad();
      Tensor logits = fc(conv(x).Relu().MaxPool2d().Flatten(1));
      Tensor loss = nn::SparseCategoricalCrossEntropy(logits, y);
      absl::Status st = loss.Backward();
      EXPECT_TRUE(st.ok()) << dev << ": " << st;
      st = opt.Step({&loss});
      EXPECT_TRUE(st.ok()) << dev << ": " << st;
      auto v = loss.Item<float>();
      EXPECT_TRUE(v.ok()) << dev << ": " << v.status();
      r.losses.push_back(v.ok() ? *v : NAN);
    }
    for (Tensor* p : ps)
      for (float w : Values(*p)) r.weights.push_back(w);
    return r;
  };
  Run cl = train("CL"), cpu = train("CPU");
  ExpectClose(cl.losses, cpu.losses, "losses");
  ExpectClose(cl.weights, cpu.weights, "weights after 3 steps");
  EXPECT_LT(cpu.losses.back(), cpu.losses.front()) << "the steps train";
}

}  // namespace
}  // namespace kiln::backends
