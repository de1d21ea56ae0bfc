// TinyJit: the behaviours of tinygrad's test/unit/test_jit.py and test_jit_footguns.py (reference/tinygrad.md §10.2),
// on the CPU backend, or on $KILN_TEST_DEVICE (tests/gpu/run_gpu_checks.sh runs them on CUDA).
#include "engine/jit/tiny_jit.h"
#include "tests/engine/jit/jit_test_fixture.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <random>
#include <string>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/realize/realize.h"
#include "engine/runtime/registry.h"

namespace kiln::jit {
namespace {

using JitTest = DeviceTest;

absl::StatusOr<std::vector<Tensor>> AddTimesTwo(const std::vector<Tensor>& in) {
  return std::vector<Tensor>{(in[0] + in[1]) * 2};
}

void ExpectAddTimesTwo(const Tensor& a, const Tensor& b, const Tensor& out) {
  auto va = a.ToVector<float>(), vb = b.ToVector<float>(), vo = out.ToVector<float>();
  ASSERT_TRUE(va.ok() && vb.ok() && vo.ok());
  ASSERT_EQ(vo->size(), va->size());
  for (size_t i = 0; i < vo->size(); ++i) EXPECT_FLOAT_EQ((*vo)[i], ((*va)[i] + (*vb)[i]) * 2) << i;
}

TEST_F(JitTest, Simple) {
  TinyJit jit(AddTimesTwo);
  for (int i = 0; i < 5; ++i) {
    Tensor a = RandT({10, 10}), b = RandT({10, 10});
    auto out = jit({a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    ExpectAddTimesTwo(a, b, (*out)[0]);
    EXPECT_EQ(jit.cnt(), i + 1);
  }
  EXPECT_TRUE(jit.captured());
  EXPECT_EQ(jit.num_kernels(), 1);
}

TEST_F(JitTest, Reset) {
  TinyJit jit(AddTimesTwo);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 4; ++i) {
      Tensor a = RandT({4, 4}), b = RandT({4, 4});
      auto out = jit({a, b});
      ASSERT_TRUE(out.ok()) << out.status();
      ExpectAddTimesTwo(a, b, (*out)[0]);
    }
    EXPECT_EQ(jit.cnt(), 4);
    jit.Reset();
    EXPECT_EQ(jit.cnt(), 0);
    EXPECT_FALSE(jit.captured());
  }
  // After a reset, a new signature is accepted (a fresh capture).
  Tensor a = RandT({3}), b = RandT({3});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(jit({a, b}).ok());
}

TEST_F(JitTest, MultipleOutputs) {
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0] + in[1], in[0] - in[1], (in[0] * in[1]).Sum(1)};
  });
  for (int i = 0; i < 5; ++i) {
    Tensor a = RandT({8, 8}), b = RandT({8, 8});
    auto out = jit({a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 3u);
    auto va = Vals(a), vb = Vals(b), o0 = Vals((*out)[0]), o1 = Vals((*out)[1]),
         o2 = Vals((*out)[2]);
    for (int r = 0; r < 8; ++r) {
      float s = 0;
      for (int c = 0; c < 8; ++c) {
        EXPECT_FLOAT_EQ(o0[r * 8 + c], va[r * 8 + c] + vb[r * 8 + c]);
        EXPECT_FLOAT_EQ(o1[r * 8 + c], va[r * 8 + c] - vb[r * 8 + c]);
        s += va[r * 8 + c] * vb[r * 8 + c];
      }
      EXPECT_NEAR(o2[r], s, 1e-5);
    }
  }
  EXPECT_GE(jit.num_kernels(), 2);
}

TEST_F(JitTest, NothingJitted) {
  TinyJit jit(
      [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> { return in; });
  Tensor a = RandT({4});
  ASSERT_TRUE(jit({a}).ok());
  auto r = jit({a});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("didn't JIT anything!"), std::string::npos) << r.status();
}

TEST_F(JitTest, JitZeroDoesNotJit) {
  Context ctx({{Knob::kJit, 0}});
  int calls = 0;
  TinyJit jit([&calls](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    ++calls;
    return std::vector<Tensor>{(in[0] + in[1]) * 2};
  });
  for (int i = 0; i < 4; ++i) {
    Tensor a = RandT({5}), b = RandT({5});
    auto out = jit({a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectAddTimesTwo(a, b, (*out)[0]);
  }
  EXPECT_EQ(calls, 4);
  EXPECT_FALSE(jit.captured());
}

TEST_F(JitTest, FunctionRunsOnlyOnFirstTwoCalls) {
  int calls = 0;
  TinyJit jit([&calls](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    ++calls;
    return std::vector<Tensor>{in[0] * 3};
  });
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(jit({RandT({4})}).ok());
  EXPECT_EQ(
      calls,
      2);  // side effects happen only while running and capturing (footgun: side_effects_only...)
}

// set_capture_first: the first call captures (the function runs once in all), its outputs are already the plan's,
// later calls replay with their own inputs; after Reset the next call captures again.
TEST_F(JitTest, CaptureFirstRunsTheFunctionOnce) {
  int calls = 0;
  TinyJit jit([&calls](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    ++calls;
    return std::vector<Tensor>{(in[0] + in[1]) * 2};
  });
  jit.set_capture_first(true);
  for (int i = 0; i < 4; ++i) {
    Tensor a = RandT({6, 5}), b = RandT({6, 5});
    auto out = jit({a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectAddTimesTwo(a, b, (*out)[0]);
    EXPECT_TRUE(jit.captured());
    EXPECT_EQ(jit.cnt(), i + 2);
  }
  EXPECT_EQ(calls, 1);
  jit.Reset();
  Tensor a = RandT({3}), b = RandT({3});
  auto out = jit({a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectAddTimesTwo(a, b, (*out)[0]);
  EXPECT_TRUE(jit.captured());
  EXPECT_EQ(calls, 2);
}

TEST_F(JitTest, ShapeMismatch) {
  TinyJit jit(AddTimesTwo);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(jit({RandT({4, 4}), RandT({4, 4})}).ok());
  auto r = jit({RandT({8, 8}), RandT({8, 8})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("args mismatch in JIT"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("expected_input_info"), std::string::npos) << r.status();
  // dtype mismatch too; a valid call still replays afterwards.
  Tensor ai = Tensor::FromVector(std::vector<int32_t>(16, 1), {4, 4}, TestDevice());
  Tensor bi = Tensor::FromVector(std::vector<int32_t>(16, 2), {4, 4}, TestDevice());
  auto r2 = jit({ai, bi});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("args mismatch in JIT"), std::string::npos) << r2.status();
  Tensor a = RandT({4, 4}), b = RandT({4, 4});
  auto ok = jit({a, b});
  ASSERT_TRUE(ok.ok()) << ok.status();
  ExpectAddTimesTwo(a, b, (*ok)[0]);
}

TEST_F(JitTest, ShapeMismatchBeforeCaptureIsFine) {
  // The signature is fixed at capture (call 2): call 1 may differ.
  TinyJit jit(AddTimesTwo);
  ASSERT_TRUE(jit({RandT({2}), RandT({2})}).ok());
  Tensor a = RandT({6}), b = RandT({6});
  ASSERT_TRUE(jit({a, b}).ok());
  auto out = jit({a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectAddTimesTwo(a, b, (*out)[0]);
}

TEST_F(JitTest, DuplicateInputFails) {
  TinyJit jit(AddTimesTwo);
  Tensor a = RandT({4});
  auto r = jit({a, a});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("duplicate inputs to JIT"), std::string::npos) << r.status();
}

TEST_F(JitTest, KwargsOrderIrrelevant) {
  TinyJit jit([](const JitArgs& a) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{a.named.at("x") - a.named.at("y")};
  });
  for (int i = 0; i < 5; ++i) {
    Tensor x = RandT({6}), y = RandT({6});
    JitArgs args;
    if (i % 2 == 0) {
      args.named.emplace("y", y);
      args.named.emplace("x", x);
    } else {
      args.named.emplace("x", x);
      args.named.emplace("y", y);
    }
    auto out = jit.Call(args);
    ASSERT_TRUE(out.ok()) << out.status();
    auto vx = Vals(x), vy = Vals(y), vo = Vals((*out)[0]);
    for (int j = 0; j < 6; ++j) EXPECT_FLOAT_EQ(vo[j], vx[j] - vy[j]);
  }
  EXPECT_EQ(jit.expected_names(), (std::vector<std::string>{"x", "y"}));
  // Positional vs named cannot mix: other names are a mismatch.
  JitArgs other;
  other.named.emplace("x", RandT({6}));
  other.named.emplace("z", RandT({6}));
  auto r = jit.Call(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected_names"), std::string::npos) << r.status();
}

TEST_F(JitTest, ViewInputFails) {
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0] + 1};
  });
  Tensor base = RandT({4, 4});
  ASSERT_TRUE(base.Realize().ok());
  for (const Tensor& view : {base.Permute({1, 0}), base.Shrink({{0, 2}, {0, 4}})}) {
    auto r = jit({view});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("JIT inputs must be real buffers; use .clone()"),
              std::string::npos)
        << r.status();
  }
  auto rc = jit({Tensor::Full({4}, 2.0f, std::nullopt, TestDevice())});  // a constant has no buffer (jit_init_empty)
  ASSERT_FALSE(rc.ok());
  EXPECT_NE(rc.status().message().find("JIT inputs must be real buffers"), std::string::npos)
      << rc.status();
  // The contiguous copy of a view is fine; an unrealized computed input is realized first.
  for (int i = 0; i < 3; ++i) {
    auto ok = jit({base.Permute({1, 0}).Contiguous()});
    ASSERT_TRUE(ok.ok()) << ok.status();
    auto b = Vals(base), o = Vals((*ok)[0]);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(o[r * 4 + c], b[c * 4 + r] + 1);
  }
}

TEST_F(JitTest, RandomRegenerates) {
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0] + Tensor::Rand({16}, dtypes::kDefaultFloat, TestDevice())};
  });
  Tensor zero = Tensor::FromVector(std::vector<float>(16, 0.0f), {16}, TestDevice());
  std::vector<std::vector<float>> seen;
  for (int i = 0; i < 5; ++i) {
    auto out = jit({zero});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> v = Vals((*out)[0]);
    for (float f : v) {
      EXPECT_GE(f, 0.0f);
      EXPECT_LT(f, 1.0f);
    }
    for (const auto& prev : seen) EXPECT_NE(prev, v) << "call " << i << " repeated random numbers";
    seen.push_back(v);
  }
}

TEST_F(JitTest, RandomSameWithAndWithoutJit) {
  auto fn = [](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0] * Tensor::Rand({8}, dtypes::kDefaultFloat, TestDevice()) + Tensor::Randn({8}, dtypes::kDefaultFloat, TestDevice())};
  };
  Tensor one = Tensor::FromVector(std::vector<float>(8, 1.0f), {8}, TestDevice());
  Tensor::ManualSeed(42);
  std::vector<std::vector<float>> nojit;
  for (int i = 0; i < 4; ++i) {
    auto out = fn({one});
    Tensor t = (*out)[0];
    nojit.push_back(Vals(t));
  }
  Tensor::ManualSeed(42);
  TinyJit jit(fn);
  for (int i = 0; i < 4; ++i) {
    auto out = jit({one});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> v = Vals((*out)[0]);
    ASSERT_EQ(v.size(), nojit[i].size());
    for (size_t j = 0; j < v.size(); ++j)
      EXPECT_NEAR(v[j], nojit[i][j], 1e-6) << "call " << i << " elem " << j;
  }
}

TEST_F(JitTest, OutputBufferReuse) {
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0] * 2};
  });
  ASSERT_TRUE(jit({RandT({4})}).ok());
  auto o2 = jit({RandT({4})});
  ASSERT_TRUE(o2.ok());
  Tensor out2 = (*o2)[0];
  std::vector<float> v2 = Vals(out2);
  Tensor a3 = RandT({4});
  auto o3 = jit({a3});
  ASSERT_TRUE(o3.ok());
  Tensor out3 = (*o3)[0];
  EXPECT_EQ(out2.uop(), out3.uop());  // the same output tensor, its buffer overwritten
  EXPECT_EQ(Vals(out2), Vals(out3));
  EXPECT_NE(Vals(out2), v2);
  auto va3 = Vals(a3), vo = Vals(out3);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(vo[i], va3[i] * 2);
}

TEST_F(JitTest, OutputFedBackAsInput) {
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0].Flip(0) + 1};
  });
  Tensor x = Tensor::FromVector(std::vector<float>{0, 1, 2, 3}, {4}, TestDevice());
  std::vector<float> want = {0, 1, 2, 3};
  for (int i = 0; i < 6; ++i) {
    auto out = jit({x});
    ASSERT_TRUE(out.ok()) << out.status();
    std::reverse(want.begin(), want.end());
    for (float& f : want) f += 1;
    EXPECT_EQ(Vals((*out)[0]), want) << "call " << i;
    x = (*out)[0];
  }
}

TEST_F(JitTest, ImplicitInputsByIdentity) {
  Tensor w = RandT({4});
  ASSERT_TRUE(w.Realize().ok());
  TinyJit jit([&w](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0] * w};
  });
  Tensor x = RandT({4});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(jit({x}).ok());
  // Overwrite the weight's buffer outside the JIT: the replay reads the new contents.
  Tensor w_alias = w;
  w_alias.Assign(Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, {4}, TestDevice()));
  ASSERT_TRUE(w_alias.Realize().ok());
  auto out = jit({x});
  ASSERT_TRUE(out.ok());
  auto vx = Vals(x), vo = Vals((*out)[0]);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(vo[i], vx[i] * (i + 1));
}

TEST_F(JitTest, AssignInsideJitReplays) {
  Tensor acc = Tensor::FromVector(std::vector<float>(3, 0.0f), {3}, TestDevice());
  TinyJit jit([&acc](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    Tensor a = acc;  // assign through a copy: acc keeps naming the buffer
    a.Assign(a + in[0]);
    return std::vector<Tensor>{a};
  });
  Tensor one = Tensor::FromVector(std::vector<float>{1, 2, 3}, {3}, TestDevice());
  for (int i = 1; i <= 5; ++i) {
    auto out = jit({one});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Vals(acc), (std::vector<float>{1.0f * i, 2.0f * i, 3.0f * i})) << "call " << i;
  }
}

TEST_F(JitTest, SeveralRealizesCaptured) {
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    Tensor x = in[0];
    for (int i = 0; i < 10; ++i) {
      x = x + 1;
      if (absl::Status st = x.Realize(); !st.ok()) return st;
    }
    return std::vector<Tensor>{x};
  });
  for (int i = 0; i < 4; ++i) {
    Tensor a = RandT({8});
    auto out = jit({a});
    ASSERT_TRUE(out.ok()) << out.status();
    auto va = Vals(a), vo = Vals((*out)[0]);
    for (int j = 0; j < 8; ++j) EXPECT_NEAR(vo[j], va[j] + 10, 1e-5);
  }
  EXPECT_EQ(jit.num_kernels(), 10);
}

TEST_F(JitTest, DataAccessDuringCaptureFails) {
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    auto v = (in[0] + 1).ToVector<float>();
    if (!v.ok()) return v.status();
    return std::vector<Tensor>{in[0] * (*v)[0]};
  });
  ASSERT_TRUE(jit({RandT({4})}).ok());
  auto r = jit({RandT({4})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("cannot access tensor data during JIT capture"),
            std::string::npos)
      << r.status();
}

TEST_F(JitTest, NestedJitFails) {
  auto inner = std::make_shared<TinyJit>(AddTimesTwo);
  TinyJit outer([inner](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    auto r = (*inner)({in[0], in[1]});
    if (!r.ok()) return r.status();
    return std::vector<Tensor>{(*r)[0] + 1};
  });
  ASSERT_TRUE(outer({RandT({4}), RandT({4})}).ok());
  auto r = outer({RandT({4}), RandT({4})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("having TinyJit inside another TinyJit is not supported"),
            std::string::npos)
      << r.status();
}

TEST_F(JitTest, ErrorTensorFromFunctionPropagates) {
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0].Reshape({7})};
  });
  auto r = jit({RandT({4})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- device graphs (JIT=2; the same behaviours above also run with JIT=2 as the tiny_jit_test_graph CTests) ----

// Whether the test device implements Device::CreateGraph (CL does not: its JIT=2 replays stay kernel by kernel).
bool DeviceHasGraphs() {
  auto dev = runtime::GetDevice(TestDevice());
  return dev.ok() && (*dev)->CreateGraph({}).status().code() != absl::StatusCode::kUnimplemented;
}

// Several kernels, two inputs: every replay with new input buffers re-points only the graph items that read them
// (GraphExec::UpdateBuffers; cuGraphExecKernelNodeSetParams on CUDA), and a replay with the same buffers updates
// nothing; results stay right throughout.
TEST_F(JitTest, GraphReplayUpdatesChangedInputsOnly) {
  Context knobs({{Knob::kJit, 2}});
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    Tensor x = in[0] + 1;
    if (absl::Status st = x.Realize(); !st.ok()) return st;
    Tensor y = x * 3;
    if (absl::Status st = y.Realize(); !st.ok()) return st;
    return std::vector<Tensor>{y + in[1]};
  });
  int64_t updates = 0;
  std::vector<Tensor> keep;  // earlier inputs stay alive, so new ones cannot reuse their memory (and skip the update)
  for (int i = 0; i < 5; ++i) {
    Tensor a = RandT({32}), b = RandT({32});
    keep.push_back(a);
    keep.push_back(b);
    auto out = jit({a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    auto va = Vals(a), vb = Vals(b), vo = Vals((*out)[0]);
    for (int j = 0; j < 32; ++j) EXPECT_NEAR(vo[j], (va[j] + 1) * 3 + vb[j], 1e-5) << "call " << i;
    if (i >= 1 && DeviceHasGraphs()) {
      ASSERT_NE(jit.plan(), nullptr);
      EXPECT_GE(jit.plan()->num_graphs(), 1) << "JIT=2 on " << TestDevice() << " recorded no device graph";
      if (i >= 2) { EXPECT_GT(jit.plan()->graph_updates(), updates) << "new inputs did not update the graph"; }
      updates = jit.plan()->graph_updates();
    }
  }
  Tensor a = RandT({32}), b = RandT({32});
  for (int i = 0; i < 2; ++i) {
    auto out = jit({a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    auto va = Vals(a), vb = Vals(b), vo = Vals((*out)[0]);
    for (int j = 0; j < 32; ++j) EXPECT_NEAR(vo[j], (va[j] + 1) * 3 + vb[j], 1e-5);
    if (i == 1) { EXPECT_EQ(jit.plan()->graph_updates(), updates) << "same inputs, yet the graph was updated"; }
    if (!DeviceHasGraphs()) { EXPECT_EQ(jit.plan()->num_graphs(), 0); }
    updates = jit.plan()->graph_updates();
  }
  EXPECT_EQ(jit.num_kernels(), 3);
}

// Random numbers regenerate on every graph replay (the key buffer is refilled, the graph reads it).
TEST_F(JitTest, GraphReplayRandomRegenerates) {
  Context knobs({{Knob::kJit, 2}});
  TinyJit jit([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{in[0] + Tensor::Rand({16}, dtypes::kDefaultFloat, TestDevice())};
  });
  Tensor zero = Tensor::FromVector(std::vector<float>(16, 0.0f), {16}, TestDevice());
  std::vector<std::vector<float>> seen;
  for (int i = 0; i < 4; ++i) {
    auto out = jit({zero});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> v = Vals((*out)[0]);
    for (const auto& prev : seen) EXPECT_NE(prev, v) << "call " << i << " repeated random numbers";
    seen.push_back(v);
  }
  EXPECT_EQ(jit.plan()->num_graphs() >= 1, DeviceHasGraphs());
}

// JIT=1 given explicitly is plain replay; JIT unset batches into graphs only on devices whose graphs are on by
// default (CUDA), not on CPU/INTERP.
TEST_F(JitTest, GraphModeFollowsTheJitKnob) {
  {
    Context knobs({{Knob::kJit, 1}});
    TinyJit jit(AddTimesTwo);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(jit({RandT({4}), RandT({4})}).ok());
    EXPECT_EQ(jit.plan()->num_graphs(), 0);
  }
  if (KnobIsSet(Knob::kJit)) GTEST_SKIP() << "JIT is set in the environment";
  TinyJit jit(AddTimesTwo);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(jit({RandT({4}), RandT({4})}).ok());
  auto dev = runtime::GetDevice(TestDevice());
  ASSERT_TRUE(dev.ok());
  EXPECT_EQ(jit.plan()->num_graphs() > 0, (*dev)->graphs_by_default());
}

// x @ w^T for row-major x [n, k] and w [m, k], in double (the tests' own reference).
std::vector<double> MatmulT(const std::vector<float>& x, const std::vector<float>& w, int n, int k, int m) {
  std::vector<double> out(static_cast<size_t>(n) * m, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      for (int q = 0; q < k; ++q) out[i * m + j] += static_cast<double>(x[i * k + q]) * w[j * k + q];
  return out;
}

// Kernels that read only constant buffers (MarkConstant: an ONNX model's weights) run at capture and never again;
// their outputs keep the values. Here three weights are transposed into buffers of their own (three copy kernels,
// one size, so the scheduler reuses one intermediate buffer for them) and chained through matmuls: a replay that
// read a constant value from the reused buffer would multiply by the wrong weight.
TEST_F(JitTest, ConstantWeightKernelsRunOnceAndKeepTheirValues) {
  constexpr int kN = 4, kK = 16;
  std::vector<Tensor> w;
  for (int i = 0; i < 3; ++i) {
    w.push_back(RandT({kK, kK}));
    ASSERT_TRUE(w.back().Realize().ok());
    ASSERT_TRUE(MarkConstant(w.back().uop()).ok());
  }
  TinyJit jit([&w](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    Tensor h = in[0];
    for (const Tensor& wi : w) h = h.Matmul(wi.Permute({1, 0}).Contiguous()) * 0.5f;
    return std::vector<Tensor>{h};
  });
  jit.set_time_launches(true);
  for (int call = 0; call < 4; ++call) {
    Tensor x = RandT({kN, kK});
    auto out = jit({x});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> h = Vals(x);
    for (const Tensor& wi : w) {
      std::vector<double> e = MatmulT(h, Vals(wi), kN, kK, kK);  // h @ w^T
      for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(e[i] * 0.5);
    }
    std::vector<float> got = Vals((*out)[0]);
    ASSERT_EQ(got.size(), h.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], h[i], 1e-5f * (1 + std::abs(h[i]))) << "call " << call << " " << i;
  }
  ASSERT_TRUE(jit.captured());
  const ExecPlan* plan = jit.plan();
  // The three copies are constant, the one that writes the shared buffer last included (its value lives in memory
  // of its own, as the earlier ones' do); the matmuls read the input.
  EXPECT_EQ(plan->num_constant_calls(), 3);
  // The last replay launched every other kernel (SkippedInLastRun). Device graphs (JIT=2: tiny_jit_test_graph)
  // replay the constant calls with the rest.
  const int want_skipped = plan->num_graphs() == 0 ? plan->num_constant_calls() : 0;
  int skipped = 0;
  for (bool s : plan->SkippedInLastRun()) skipped += s;
  EXPECT_EQ(skipped, want_skipped);
  if (plan->num_graphs() == 0) {
    int untimed = 0;  // plain replay times each launched kernel; skipped calls stay at -1
    for (double t : plan->call_seconds()) untimed += t < 0;
    EXPECT_EQ(untimed, want_skipped);
  }
}

// A constant buffer is a promise: a kernel that would write one fails, eagerly and in a capture.
TEST_F(JitTest, WritingAConstantBufferFails) {
  Tensor w = RandT({4});
  ASSERT_TRUE(w.Realize().ok());
  ASSERT_TRUE(MarkConstant(w.uop()).ok());
  Tensor eager = w;
  eager.Assign(w + 1);
  absl::Status st = eager.Realize();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  Tensor w2 = RandT({4});
  ASSERT_TRUE(w2.Realize().ok());
  ASSERT_TRUE(MarkConstant(w2.uop()).ok());
  TinyJit jit([&w2](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    Tensor a = w2;
    a.Assign(a + in[0]);
    return std::vector<Tensor>{a};
  });
  Tensor x = RandT({4});
  ASSERT_FALSE(jit({x}).ok());
  auto second = jit({x});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
}

}  // namespace
}  // namespace kiln::jit
