// Issue #18, items 1 and 2: each api::Engine owns its realize context (memo, loaded kernels,
// statistics), graph models run through the per-signature TinyJit trace cache (the third and later
// calls of a signature replay with no scheduling), and a cancelled run stops between kernels on
// both the eager and the replay path. Expected values are computed here with plain loops.
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/api/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::api {
namespace {

using ::testing::HasSubstr;

NodeSpec Node(std::string op, std::string dtype, std::vector<uint32_t> src = {}) {
  NodeSpec n;
  n.op = std::move(op);
  n.dtype = std::move(dtype);
  n.src = std::move(src);
  return n;
}
NodeSpec Input(int index) {
  NodeSpec n = Node("INPUT", "float32");
  n.arg.kind = NodeArgSpec::Kind::kInt;
  n.arg.int_value = index;
  return n;
}
NodeSpec ConstF(double v) {
  NodeSpec n = Node("CONST", "float32");
  n.arg.kind = NodeArgSpec::Kind::kFloat;
  n.arg.float_value = v;
  return n;
}
NodeSpec Reduce(std::string op, uint32_t src, std::vector<int64_t> axes) {
  NodeSpec r = Node("REDUCE_AXIS", "float32", {src});
  r.arg.kind = NodeArgSpec::Kind::kReduce;
  r.arg.reduce_op = std::move(op);
  r.arg.reduce_axes = std::move(axes);
  return r;
}

// y = (a + b) * scale  (one elementwise kernel)
GraphSpec AddScale(double scale) {
  GraphSpec g;
  g.inputs = {{"a", "float32", {2, 3}}, {"b", "float32", {2, 3}}};
  g.nodes = {Input(0), Input(1), Node("ADD", "float32", {0, 1}), ConstF(scale), Node("MUL", "float32", {2, 3})};
  g.outputs = {{"y", 4}};
  return g;
}

// rows = sum(a * b, axis 1), cols = max(a + b, axis 0): two reductions over different axes.
GraphSpec TwoReductions() {
  GraphSpec g;
  g.inputs = {{"a", "float32", {4, 5}}, {"b", "float32", {4, 5}}};
  g.nodes = {Input(0), Input(1), Node("MUL", "float32", {0, 1}), Node("ADD", "float32", {0, 1}),
             Reduce("ADD", 2, {1}), Reduce("MAX", 3, {0})};
  g.outputs = {{"rows", 4}, {"cols", 5}};
  return g;
}

std::string_view Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}
std::vector<float> Floats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

std::unique_ptr<Engine> NewEngine() {
  auto e = Engine::Create();
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

TEST(EngineContextTest, TwoEnginesRunConcurrentlyWithSeparateStatsAndCaches) {
  std::unique_ptr<Engine> e1 = NewEngine(), e2 = NewEngine();
  ASSERT_NE(e1, nullptr);
  ASSERT_NE(e2, nullptr);
  auto g1 = e1->Prepare(AddScale(3.0));
  auto g2 = e2->Prepare(TwoReductions());
  ASSERT_TRUE(g1.ok()) << g1.status();
  ASSERT_TRUE(g2.ok()) << g2.status();
  constexpr int kRuns = 6;
  std::atomic<int> bad{0};
  std::thread t1([&] {
    for (int r = 0; r < kRuns; ++r) {
      std::vector<float> a(6), b(6);
      for (int i = 0; i < 6; ++i) a[i] = static_cast<float>(i + r), b[i] = static_cast<float>(2 * i - r);
      auto run = e1->Run(**g1, {{"float32", {2, 3}, Bytes(a)}, {"float32", {2, 3}, Bytes(b)}});
      if (!run.ok()) { ++bad; continue; }
      std::vector<float> y = Floats(run->outputs[0].data);
      for (int i = 0; i < 6; ++i) if (y[i] != (a[i] + b[i]) * 3.0f) ++bad;
    }
  });
  std::thread t2([&] {
    for (int r = 0; r < kRuns; ++r) {
      std::vector<float> a(20), b(20);
      for (int i = 0; i < 20; ++i) a[i] = static_cast<float>((i * 7 + r) % 11), b[i] = static_cast<float>(i % 3 + r);
      auto run = e2->Run(**g2, {{"float32", {4, 5}, Bytes(a)}, {"float32", {4, 5}, Bytes(b)}});
      if (!run.ok()) { ++bad; continue; }
      std::vector<float> rows = Floats(run->outputs[0].data), cols = Floats(run->outputs[1].data);
      for (int i = 0; i < 4; ++i) {
        float s = 0;
        for (int j = 0; j < 5; ++j) s += a[i * 5 + j] * b[i * 5 + j];
        if (rows[i] != s) ++bad;
      }
      for (int j = 0; j < 5; ++j) {
        float m = a[j] + b[j];
        for (int i = 1; i < 4; ++i) m = std::max(m, a[i * 5 + j] + b[i * 5 + j]);
        if (cols[j] != m) ++bad;
      }
    }
  });
  t1.join();
  t2.join();
  EXPECT_EQ(bad.load(), 0);

  const EngineStats s1 = e1->stats(), s2 = e2->stats();
  EXPECT_EQ(s1.runs, static_cast<uint64_t>(kRuns));
  EXPECT_EQ(s2.runs, static_cast<uint64_t>(kRuns));
  // Each engine's trace cache holds its own graph's one signature only.
  EXPECT_EQ(s1.traces.entries, 1);
  EXPECT_EQ(s2.traces.entries, 1);
  // Loaded kernels are per engine: each cache holds what its own engine compiled, and the engine's
  // compile count is its own cache's misses (the other engine's kernels are not there).
  EXPECT_GE(s1.kernels.entries, 1);
  EXPECT_GE(s2.kernels.entries, 2);
  EXPECT_EQ(s1.kernels.misses, static_cast<int64_t>(s1.kernels_compiled));
  EXPECT_EQ(s2.kernels.misses, static_cast<int64_t>(s2.kernels_compiled));
  // Scheduling happened on each context only for its own run and capture calls.
  EXPECT_GE(s1.schedules, 2u);
  EXPECT_GE(s2.schedules, 2u);
  EXPECT_LE(s1.schedules, 4u);
  EXPECT_LE(s2.schedules, 4u);

  // A third engine running engine 1's graph compiles it again: nothing is shared but binaries.
  std::unique_ptr<Engine> e3 = NewEngine();
  ASSERT_NE(e3, nullptr);
  auto g3 = e3->Prepare(AddScale(3.0));
  ASSERT_TRUE(g3.ok());
  std::vector<float> a(6, 1.0f);
  auto run = e3->Run(**g3, {{"float32", {2, 3}, Bytes(a)}, {"float32", {2, 3}, Bytes(a)}});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_GE(run->kernels_compiled, 1);
  EXPECT_EQ(e3->stats().runs, 1u);
  EXPECT_EQ(e1->stats().runs, static_cast<uint64_t>(kRuns));
}

TEST(EngineContextTest, GraphModelReplaysItsTraceWithoutScheduling) {
  std::unique_ptr<Engine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  auto g = e->Prepare(TwoReductions());
  ASSERT_TRUE(g.ok()) << g.status();
  const char* kEvents[] = {"run", "capture", "replay", "replay", "replay"};
  for (int call = 0; call < 5; ++call) {
    std::vector<float> a(20), b(20);
    for (int i = 0; i < 20; ++i) a[i] = static_cast<float>(i - call), b[i] = static_cast<float>((i * call) % 5);
    const uint64_t schedules_before = e->stats().schedules;
    auto run = e->Run(**g, {{"float32", {4, 5}, Bytes(a)}, {"float32", {4, 5}, Bytes(b)}});
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->jit_event, kEvents[call]) << "call " << call;
    std::vector<float> rows = Floats(run->outputs[0].data);
    for (int i = 0; i < 4; ++i) {
      float s = 0;
      for (int j = 0; j < 5; ++j) s += a[i * 5 + j] * b[i * 5 + j];
      EXPECT_EQ(rows[i], s) << "call " << call << " row " << i;
    }
    EXPECT_GE(run->kernels.size(), 1u);
    if (call >= 2) {
      EXPECT_EQ(run->schedules, 0) << "call " << call;
      EXPECT_EQ(e->stats().schedules, schedules_before) << "call " << call;
      EXPECT_TRUE(run->jit_hit);
      // Replayed launches of a graph are timed per kernel (as its eager runs were).
      for (const KernelTiming& k : run->kernels) EXPECT_TRUE(k.timed) << k.name;
    } else {
      EXPECT_GE(run->schedules, 1) << "call " << call;
    }
  }
  EXPECT_EQ((*g)->runs(), 5u);
}

// A token that reports cancelled from its `after`-th check on (the run checks it at admission and
// before every kernel or copy; an eager run also once when its schedule is admitted).
std::shared_ptr<const CancellationToken> CancelAtCheck(int after) {
  auto n = std::make_shared<std::atomic<int>>(0);
  return std::make_shared<const CancellationToken>([n, after] { return n->fetch_add(1) + 1 >= after; });
}

TEST(EngineContextTest, CancelledRunStopsWithinOneKernelEagerAndReplayed) {
  std::unique_ptr<Engine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  auto g = e->Prepare(TwoReductions());
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<float> a(20, 1.0f), b(20, 2.0f);
  const std::vector<HostTensorView> in = {{"float32", {4, 5}, Bytes(a)}, {"float32", {4, 5}, Bytes(b)}};

  // Eager (the signature's first call): admission, the schedule's admission and the check before
  // the first kernel pass; the one before the second kernel cancels.
  RunOptions o;
  o.cancellation = CancelAtCheck(4);
  auto first = e->Run(**g, in, o);
  ASSERT_TRUE(absl::IsCancelled(first.status())) << first.status();
  EXPECT_THAT(std::string(first.status().message()), HasSubstr("after 1 of"));

  // Uncancelled: run, then capture; both need at least two kernels for the check to mean anything.
  auto run = e->Run(**g, in);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_GE(run->kernels.size(), 2u);
  auto capture = e->Run(**g, in);
  ASSERT_TRUE(capture.ok()) << capture.status();
  ASSERT_EQ(capture->jit_event, "capture");

  // Replay: admission and the check before the plan's first call pass; the next one cancels.
  o.cancellation = CancelAtCheck(3);
  auto replay = e->Run(**g, in, o);
  ASSERT_TRUE(absl::IsCancelled(replay.status())) << replay.status();
  EXPECT_THAT(std::string(replay.status().message()), HasSubstr("after 1 of"));
  // Past the deadline: stopped before it started.
  RunOptions late;
  late.deadline = absl::Now() - absl::Seconds(1);
  EXPECT_TRUE(absl::IsDeadlineExceeded(e->Run(**g, in, late).status()));
  // And the next run replays normally.
  auto after = e->Run(**g, in);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->jit_event, "replay");
  EXPECT_THAT(Floats(after->outputs[0].data), ::testing::Each(10.0f));
}

}  // namespace
}  // namespace kiln::api
