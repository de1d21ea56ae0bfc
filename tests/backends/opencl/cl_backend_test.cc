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
#include "engine/runtime/buffer.h"
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

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::abs(want[i])) << what << " [" << i << "]";
}

// The single kernel of `t`'s schedule (t's inputs must be realized).
UOpPtr OnlyKernel(const Tensor& t) {
  auto sched = CreateSchedule({t.uop()});
  EXPECT_TRUE(sched.ok()) << sched.status();
  UOpPtr ast;
  int n = 0;
  if (sched.ok())
    for (const ScheduleItem& it : sched->items)
      if (it.kind == ScheduleItem::Kind::kKernel) ast = it.ast, ++n;
  EXPECT_EQ(n, 1);
  return ast;
}

codegen::Target ClTarget(int64_t grid_yz = 0) {
  codegen::Target t;
  t.renderer = "opencl";
  t.has_local = true;
  t.max_local_size = 256;
  t.global_max[1] = t.global_max[2] = grid_yz;
  return t;
}

// Lowers `ast` with exactly `opts` for CL and runs it on fresh buffers: slot 0 (the output, float) is returned,
// slot 1.. are filled from `inputs` in order.
std::vector<float> RunWithOpts(runtime::Device* dev, const UOpPtr& ast,
                               const std::vector<codegen::Opt>& opts,
                               const std::vector<std::vector<float>>& inputs,
                               std::string* source = nullptr,
                               const codegen::Target& target = ClTarget()) {
  codegen::LowerOptions lo;
  lo.use_explicit_opts = true;
  lo.opts = opts;
  auto prog = codegen::LowerKernel(ast, target, lo);
  EXPECT_TRUE(prog.ok()) << prog.status();
  if (!prog.ok()) return {};
  auto k = runtime::CompileKernel(*dev, *prog);
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) return {};
  if (source != nullptr) *source = k->source;
  std::vector<std::shared_ptr<runtime::Buffer>> bufs;
  std::vector<runtime::DeviceMemory> mems;
  for (const codegen::BufferParam& b : prog->buffers) {
    const int64_t n = b.slot == 0 ? b.size : static_cast<int64_t>(inputs.at(b.slot - 1).size());
    auto buf = runtime::Buffer::Create(dev, dtypes::kFloat32, n);
    EXPECT_TRUE(buf.ok()) << buf.status();
    if (b.slot > 0) {
      EXPECT_TRUE((*buf)->CopyIn(inputs[b.slot - 1].data(), n * 4).ok());
    }
    bufs.push_back(*buf);
    mems.push_back((*buf)->memory());
  }
  runtime::LaunchDims dims;
  for (int i = 0; i < 3; ++i) {
    dims.global[i] = prog->global_size[i];
    dims.local[i] = prog->local_size[i];
  }
  auto t = k->program->Launch(mems, {}, dims, true);
  EXPECT_TRUE(t.ok()) << t.status();
  std::vector<float> out(prog->buffers[0].size);
  EXPECT_TRUE(bufs[0]->CopyOut(out.data(), out.size() * 4).ok());
  return out;
}

// Values in [0.25, 0.75] (no cancellation in sums, so float rounding stays within the tolerance).
std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.5f + 0.25f * std::sin(static_cast<float>(i) * scale);
  return v;
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
  auto bin = Dev()->compiler().Compile(
      "__kernel void broken(__global float* a) { a[0] = undefined_name; }", "broken");
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
      {"elementwise chain",
       [](const std::string& d) {
         Tensor a = Tensor::FromVector<float>({1, -2, 3, -4, 5, -6, 7, -8}, {2, 4}, d);
         return ((a + 1.0f) * a).Relu().Exp2();
       }},
      {"matmul + bias + relu",
       [](const std::string& d) {
         std::vector<float> x(6 * 5), w(5 * 7);
         for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
         for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(static_cast<float>(i) * 0.3f);
         Tensor b = Tensor::FromVector<float>({0.1f, -0.2f, 0.3f, 0.f, 0.5f, -0.6f, 0.7f}, {7}, d);
         return (Tensor::FromVector<float>(x, {6, 5}, d)
                     .Matmul(Tensor::FromVector<float>(w, {5, 7}, d)) +
                 b)
             .Relu();
       }},
      {"softmax",
       [](const std::string& d) {
         std::vector<float> x(4 * 33);
         for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 1.7f) * 4;
         return Tensor::FromVector<float>(x, {4, 33}, d).Softmax(1);
       }},
      {"5-d permute (more than three launch dims)",
       [](const std::string& d) {
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
    Tensor a =
        Tensor::FromVector<int32_t>({7, -7, 5, std::numeric_limits<int32_t>::min(), -7}, {5}, d);
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

// LOCAL, GROUP and GROUPTOP lowered for real: work-group dims, local memory, barriers and the gated store, each
// against the CPU backend's value of the same tensor.
TEST_F(ClTest, ExplicitLocalAndGroupOpts) {
  using codegen::Opt;
  using codegen::OptOp;
  const std::vector<float> xs = Ramp(16 * 512, 0.01f);
  Tensor x = Tensor::FromVector<float>(xs, {16, 512}, "CL");
  const std::vector<float> want = Values(Tensor::FromVector<float>(xs, {16, 512}, "CPU").Sum(1));
  const UOpPtr ast = OnlyKernel(x.Sum(1));
  ASSERT_NE(ast, nullptr);
  const std::vector<std::vector<Opt>> cases = {
      {},
      {{OptOp::kLocal, 0, 8}},
      {{OptOp::kGroupTop, 0, 16}},
      {{OptOp::kGroup, 0, 32}},
      {{OptOp::kLocal, 0, 4}, {OptOp::kGroupTop, 0, 16}},
      {{OptOp::kUpcast, 0, 2},
       {OptOp::kLocal, 0, 2},
       {OptOp::kGroup, 0, 8},
       {OptOp::kUnroll, 0, 4}},
  };
  for (const auto& opts : cases) {
    std::string names;
    for (const Opt& o : opts) names += o.ToString() + " ";
    SCOPED_TRACE(names);
    std::string src;
    ExpectClose(RunWithOpts(Dev(), ast, opts, {xs}, &src), want, names);
    const bool grouped = !names.empty() && names.find("GROUP") != std::string::npos;
    EXPECT_EQ(src.find("barrier(CLK_LOCAL_MEM_FENCE)") != std::string::npos, grouped) << src;
    EXPECT_EQ(src.find("__local float") != std::string::npos, grouped) << src;
  }
  // Illegal work-groups are InvalidArgument, never a crash.
  codegen::LowerOptions lo;
  lo.use_explicit_opts = true;
  lo.opts = {{OptOp::kGroupTop, 0, 16}, {OptOp::kGroup, 0, 4}};
  EXPECT_EQ(codegen::LowerKernel(ast, ClTarget(), lo).status().code(),
            absl::StatusCode::kInvalidArgument);
  lo.opts = {{OptOp::kLocal, 0, 16}, {OptOp::kGroupTop, 0, 32}};
  EXPECT_EQ(codegen::LowerKernel(ast, ClTarget(), lo).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "16 x 32 work-items exceed the target's 256";
}

// A grid too small for the y/z dims (CUDA allows 65535 blocks there) folds every global axis into dimension 0.
TEST_F(ClTest, LaunchDimsFoldWhenTheGridIsTooSmall) {
  const std::vector<float> xs = Ramp(40 * 30 * 7, 0.2f);
  Tensor x = Tensor::FromVector<float>(xs, {40, 30, 7}, "CL");
  const std::vector<float> want =
      Values(Tensor::FromVector<float>(xs, {40, 30, 7}, "CPU") * 3.0f + 1.0f);
  const UOpPtr ast = OnlyKernel(x * 3.0f + 1.0f);
  ASSERT_NE(ast, nullptr);
  std::string unfolded, folded;
  ExpectClose(RunWithOpts(Dev(), ast, {}, {xs}, &unfolded), want, "3 launch dims");
  ExpectClose(RunWithOpts(Dev(), ast, {}, {xs}, &folded, ClTarget(16)), want,
              "folded into dimension 0");
  EXPECT_NE(unfolded.find("get_global_id(2)"), std::string::npos) << unfolded;
  EXPECT_EQ(folded.find("get_global_id(1)"), std::string::npos) << folded;
  EXPECT_NE(folded.find("get_global_id(0)"), std::string::npos) << folded;
}

// An output axis of symbolic size (a Variable) stays a loop inside the work-item; the constant axis is the launch.
TEST_F(ClTest, SymbolicAxisStaysALoop) {
  const UOpPtr out = UOp::Make(Op::PARAM, dtypes::kFloat32.Ptr(), {}, int64_t{0});
  const UOpPtr n = UOp::Make(Op::DEFINE_VAR, dtypes::kIndex, {}, VarArg{"batch", 1, 16});
  const UOpPtr r0 = UOp::Make(Op::RANGE, dtypes::kIndex, {n}, AxisArg{0, AxisType::kLoop});
  const UOpPtr r1 = UOp::Range(8, 1);
  const UOpPtr i = r0 * 8 + r1;
  const UOpPtr val = UOp::Make(Op::CAST, dtypes::kFloat32, {i});
  const UOpPtr ast = UOp::Sink(std::vector<UOpPtr>{UOp::Make(
      Op::END, dtypes::kVoid,
      {UOp::Make(Op::STORE, dtypes::kVoid, {UOp::Make(Op::INDEX, out->dtype(), {out, i}), val}), r0,
       r1})});
  auto prog = codegen::LowerKernel(ast, ClTarget());
  ASSERT_TRUE(prog.ok()) << prog.status();
  auto k = runtime::CompileKernel(*Dev(), *prog);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_NE(k->source.find("for ("), std::string::npos) << k->source;
  EXPECT_EQ(k->source.find("batch"), std::string::npos) << "no user strings\n" << k->source;
  auto buf = runtime::Buffer::Create(Dev(), dtypes::kFloat32, 128);
  ASSERT_TRUE(buf.ok());
  std::vector<float> init(128, -1.0f);
  ASSERT_TRUE((*buf)->CopyIn(init.data(), init.size() * 4).ok());
  runtime::LaunchDims dims;
  for (int d = 0; d < 3; ++d) {
    dims.global[d] = prog->global_size[d];
    dims.local[d] = prog->local_size[d];
  }
  const std::vector<runtime::DeviceMemory> mems = {(*buf)->memory()};
  const std::vector<int64_t> vars = {5};
  ASSERT_TRUE(k->program->Launch(mems, vars, dims, false).ok());
  std::vector<float> got(128);
  ASSERT_TRUE((*buf)->CopyOut(got.data(), got.size() * 4).ok());
  for (int j = 0; j < 128; ++j) EXPECT_EQ(got[j], j < 40 ? static_cast<float>(j) : -1.0f) << j;
}

// The GPU heuristic picks GROUPTOP for a long reduce with few outputs and LOCAL for a matmul; both run correctly.
TEST_F(ClTest, GpuHeuristic) {
  const std::vector<float> xs = Ramp(8192, 0.001f);
  Tensor s = Tensor::FromVector<float>(xs, {8192}, "CL").Sum();
  auto opts = codegen::HeuristicOpts(OnlyKernel(s), ClTarget());
  ASSERT_TRUE(opts.ok()) << opts.status();
  ASSERT_FALSE(opts->empty());
  EXPECT_EQ((*opts)[0].op, codegen::OptOp::kGroupTop);
  ExpectClose(Values(s), Values(Tensor::FromVector<float>(xs, {8192}, "CPU").Sum()), "sum");

  const std::vector<float> as = Ramp(64 * 96, 0.3f), bs = Ramp(96 * 128, 0.7f);
  Tensor mm = Tensor::FromVector<float>(as, {64, 96}, "CL")
                  .Matmul(Tensor::FromVector<float>(bs, {96, 128}, "CL"));
  opts = codegen::HeuristicOpts(OnlyKernel(mm), ClTarget());
  ASSERT_TRUE(opts.ok()) << opts.status();
  bool local = false;
  for (const codegen::Opt& o : *opts) local |= o.op == codegen::OptOp::kLocal;
  EXPECT_TRUE(local);
  ExpectClose(Values(mm),
              Values(Tensor::FromVector<float>(as, {64, 96}, "CPU")
                         .Matmul(Tensor::FromVector<float>(bs, {96, 128}, "CPU"))),
              "matmul");
}

}  // namespace
}  // namespace kiln::backends
