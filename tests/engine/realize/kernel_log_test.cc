// The VIZ kernel log (issue #22): off unless VIZ; with it, each compile is recorded with its AST,
// opts, source, the rewrite passes of its lowering and its launches; the ring keeps the last N.
// The recorded passes of a kernel chain: each top-level pass starts from the graph the previous
// one produced, beginning at the kernel's AST, so stepping through them replays the lowering; and
// within a rule-driven pass every new node is explained by a recorded match, and replaying its
// recorded matches from its input (ReplayMatches) gives exactly its output node.
#include "engine/realize/kernel_log.h"

#include <string>
#include <vector>

#include "backends/register_all.h"
#include "absl/container/flat_hash_set.h"
#include "engine/base/env.h"
#include "engine/jit/tiny_jit.h"
#include "engine/realize/realize.h"
#include "engine/rewrite/trace.h"
#include "engine/tensor/tensor.h"
#include "engine/uop/printer.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

// Realizes (x * k + 1) on the CPU in a fresh context (so its kernel is compiled, not reused).
void RunOnce(float k) {
  RealizeContext ctx;
  ScopedRealizeContext scope(ctx);
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {8});
  absl::StatusOr<std::vector<float>> out = (t * k + 1.0f).ToVector<float>();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ((*out)[1], 2 * k + 1);
}

class KernelLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    KernelLog::Get().Clear();
    KernelLog::Get().SetCapacity(256);
    RewriteTrace::Get().Clear();
  }
  void TearDown() override {
    KernelLog::Get().Clear();
    KernelLog::Get().SetCapacity(256);
    RewriteTrace::Get().Clear();
  }
};

TEST_F(KernelLogTest, OffRecordsNothing) {
  Context off({{Knob::kViz, 0}, {Knob::kTrackMatchStats, 0}});
  RunOnce(3.0f);
  EXPECT_TRUE(KernelLog::Get().Kernels().empty());
  EXPECT_EQ(KernelLog::Get().Reserve(), 0);
  EXPECT_TRUE(RewriteTrace::Get().Passes().empty());
}

TEST_F(KernelLogTest, RecordsCompileSourcePassesAndLaunches) {
  Context on({{Knob::kViz, 1}, {Knob::kTrackMatchStats, 2}});
  {
    ScopedKernelLogLabel label("unit test model");
    RunOnce(5.0f);
  }
  const std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  const LoggedKernel& k = kernels[0];
  EXPECT_GT(k.id, 0);
  EXPECT_EQ(k.name.substr(0, 2), "E_") << k.name;
  EXPECT_EQ(k.device, "CPU");
  EXPECT_EQ(k.label, "unit test model");
  ASSERT_NE(k.ast, nullptr);
  EXPECT_EQ(k.ast->op(), Op::SINK);
  EXPECT_NE(k.source.find(k.name), std::string::npos) << "the rendered source defines the kernel";
  EXPECT_GT(k.compiled_unix_ms, 0);
  EXPECT_GT(k.bytes, 0);
  EXPECT_EQ(k.launch_count, 1);
  ASSERT_EQ(k.launches.size(), 1u);
  EXPECT_GE(k.launches[0].seconds, 0);
  EXPECT_GT(k.launches[0].start_ns, 0);

  // The lowering's passes are this kernel's group; the other passes (scheduling) are not.
  const std::vector<TracedPass> passes = RewriteTrace::Get().PassesOf(k.id);
  ASSERT_GE(passes.size(), 3u);
  std::vector<const TracedPass*> top;
  for (const TracedPass& p : passes) {
    EXPECT_TRUE(p.ok) << p.name << ": " << p.error;
    if (p.depth == 0) top.push_back(&p);
  }
  ASSERT_FALSE(top.empty());
  EXPECT_EQ(top.front()->input, k.ast) << "the first pass starts from the kernel's AST";
  for (size_t i = 1; i < top.size(); ++i) {
    EXPECT_EQ(top[i]->input, top[i - 1]->output)
        << "pass '" << top[i]->name << "' does not start where '" << top[i - 1]->name << "' ended";
  }
  bool any_match = false;
  for (const TracedPass& p : passes) any_match = any_match || p.num_matches > 0;
  EXPECT_TRUE(any_match) << RewriteTrace::Get().Format();

  // The recorded matches account for every change of a rule-driven pass: a node of the output that
  // the input lacks is either rebuilt around a changed source, or lies in some match's replacement.
  int checked = 0;
  for (const TracedPass* p : top) {
    if (p->matcher == "codegen" || p->num_matches == 0 || !p->output) continue;  // imperative steps
    absl::flat_hash_set<const UOp*> old_nodes;
    for (const UOp* u : Toposort(absl::Span<const UOpPtr>(&p->input, 1))) old_nodes.insert(u);
    absl::flat_hash_set<const UOp*> replacements;
    for (const TracedMatch& m : RewriteTrace::Get().MatchesOf(p->id)) {
      for (const UOp* u : Toposort(absl::Span<const UOpPtr>(&m.after, 1))) replacements.insert(u);
    }
    for (const UOp* u : Toposort(absl::Span<const UOpPtr>(&p->output, 1))) {
      if (old_nodes.contains(u)) continue;
      bool rebuilt = false;
      for (const UOpPtr& src : u->src()) rebuilt = rebuilt || !old_nodes.contains(src.get());
      EXPECT_TRUE(rebuilt || replacements.contains(u))
          << "pass '" << p->name << "' produced " << PrintNode(*u) << " that no recorded match explains";
    }
    // Replaying the recorded steps from the input reaches the pass's output node itself.
    const std::vector<TracedMatch> steps = RewriteTrace::Get().MatchesOf(p->id);
    ASSERT_EQ(steps.size(), static_cast<size_t>(p->num_matches))
        << p->name << ": matches dropped from the trace";
    absl::StatusOr<UOpPtr> replayed = ReplayMatches(p->input, steps);
    ASSERT_TRUE(replayed.ok()) << p->name << ": " << replayed.status();
    EXPECT_EQ(*replayed, p->output)
        << "pass '" << p->name << "' replays to\n" << PrintGraph(*replayed);
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no rule-driven pass rewrote anything";
}

// The top-level passes of kernel `id`'s lowering as "name:matches" (what the VIZ page lists).
std::vector<std::string> TopPasses(int64_t id) {
  std::vector<std::string> out;
  for (const TracedPass& p : RewriteTrace::Get().PassesOf(id))
    if (p.depth == 0) out.push_back(p.name + ":" + std::to_string(p.num_matches));
  return out;
}

// A kernel compiled while recording was off and launched again by a recording run (kernel cache hit) gets a record
// marked reused, whose passes are exactly those of a compile of the same AST while recording.
TEST_F(KernelLogTest, AKernelReusedByARecordingRunIsRecorded) {
  RealizeContext ctx;
  ScopedRealizeContext scope(ctx);
  auto run = [](float first) {
    Tensor t = Tensor::FromVector<float>({first, 2, 3, 4, 5, 6, 7, 8}, {8});
    absl::StatusOr<std::vector<float>> out = (t * 3.0f + 1.0f).ToVector<float>();
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FLOAT_EQ((*out)[0], first * 3 + 1);
  };
  {
    Context off({{Knob::kViz, 0}, {Knob::kTrackMatchStats, 0}});
    run(1.0f);
  }
  ASSERT_TRUE(KernelLog::Get().Kernels().empty());
  const RealizeCounters before = ctx.counters();
  {
    Context on({{Knob::kViz, 1}, {Knob::kTrackMatchStats, 2}});
    ScopedKernelLogLabel label("asked");
    run(10.0f);  // a new input buffer: the same kernel, from the kernel cache
    run(20.0f);
  }
  EXPECT_EQ(ctx.counters().kernels_compiled, before.kernels_compiled) << "nothing was compiled again";
  std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  const LoggedKernel reused = kernels[0];
  EXPECT_TRUE(reused.reused);
  EXPECT_EQ(reused.label, "asked");
  EXPECT_EQ(reused.launch_count, 2) << "one record, both launches";
  ASSERT_NE(reused.ast, nullptr);
  const std::vector<std::string> reused_passes = TopPasses(reused.id);
  ASSERT_GE(reused_passes.size(), 3u);
  EXPECT_EQ(RewriteTrace::Get().PassesOf(reused.id).front().input, reused.ast);

  // The same kernel compiled while recording (a fresh context): same name, source, opts and passes.
  KernelLog::Get().Clear();
  {
    Context on({{Knob::kViz, 1}, {Knob::kTrackMatchStats, 2}});
    RunOnce(3.0f);
  }
  kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  const LoggedKernel& compiled = kernels[0];
  EXPECT_FALSE(compiled.reused);
  EXPECT_EQ(compiled.ast, reused.ast) << "hash-consed: the same AST";
  EXPECT_EQ(compiled.name, reused.name);
  EXPECT_EQ(compiled.source, reused.source);
  EXPECT_EQ(compiled.applied_opts, reused.applied_opts);
  EXPECT_EQ(TopPasses(compiled.id), reused_passes);
}

// A JIT plan captured while recording was off: a recording replay records each of its kernels once (reused), with
// their launches; a replay that is not recording adds nothing.
TEST_F(KernelLogTest, AJitReplayOfUnrecordedKernelsIsRecorded) {
  RealizeContext ctx;
  ScopedRealizeContext scope(ctx);
  jit::TinyJit step([](const std::vector<Tensor>& in) -> absl::StatusOr<std::vector<Tensor>> {
    Tensor y = (in[0] * 2.0f + 1.0f).Sum({1});
    if (absl::Status st = y.Realize(); !st.ok()) return st;
    return std::vector<Tensor>{y};
  });
  auto call = [&](float v) {
    Tensor x = Tensor::Full({4, 8}, v);
    ASSERT_TRUE(x.Realize().ok());
    absl::StatusOr<std::vector<Tensor>> out = step({x});
    ASSERT_TRUE(out.ok()) << out.status();
    absl::StatusOr<std::vector<float>> got = (*out)[0].ToVector<float>();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FLOAT_EQ((*got)[3], 8 * (2 * v + 1));
  };
  {
    Context off({{Knob::kViz, 0}, {Knob::kTrackMatchStats, 0}});
    for (int i = 0; i < 3; ++i) call(static_cast<float>(i));  // run, capture, replay
  }
  ASSERT_TRUE(step.captured());
  ASSERT_TRUE(KernelLog::Get().Kernels().empty());
  {
    Context on({{Knob::kViz, 1}, {Knob::kTrackMatchStats, 2}});
    call(5.0f);
    call(6.0f);
  }
  {
    Context off({{Knob::kViz, 0}, {Knob::kTrackMatchStats, 0}});
    call(7.0f);
  }
  const std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), static_cast<size_t>(step.num_kernels()));
  const std::vector<std::string> names = step.plan()->KernelNames();
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_TRUE(kernels[i].reused);
    EXPECT_EQ(kernels[i].name, names[i]);
    EXPECT_EQ(kernels[i].launch_count, 2) << kernels[i].name;
    EXPECT_GE(TopPasses(kernels[i].id).size(), 3u) << kernels[i].name;
  }
}

// A recorded kernel whose record the ring dropped is recorded again when a recording run launches it.
TEST_F(KernelLogTest, ADroppedRecordIsRecordedAgain) {
  Context on({{Knob::kViz, 1}, {Knob::kTrackMatchStats, 2}});
  RealizeContext ctx;
  ScopedRealizeContext scope(ctx);
  auto run = [](float k) {
    Tensor t = Tensor::FromVector<float>({1, 2, 3, 4}, {4});
    absl::StatusOr<std::vector<float>> out = (t * k).ToVector<float>();
    ASSERT_TRUE(out.ok()) << out.status();
  };
  KernelLog::Get().SetCapacity(1);
  run(2.0f);
  const int64_t first = KernelLog::Get().Kernels().at(0).id;
  run(3.0f);  // another kernel: the first record is dropped
  ASSERT_FALSE(KernelLog::Get().Holds(first));
  run(2.0f);
  const std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_GT(kernels[0].id, first);
  EXPECT_TRUE(kernels[0].reused);
  EXPECT_EQ(kernels[0].launch_count, 1);
}

TEST_F(KernelLogTest, RingKeepsTheLastCompiles) {
  Context on({{Knob::kViz, 1}, {Knob::kTrackMatchStats, 2}});
  KernelLog::Get().SetCapacity(2);
  RunOnce(2.0f);
  RunOnce(3.0f);
  RunOnce(4.0f);
  const std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_LT(kernels[0].id, kernels[1].id);
  EXPECT_EQ(KernelLog::Get().dropped(), 1);
  LoggedKernel found;
  EXPECT_TRUE(KernelLog::Get().Find(kernels[1].id, &found));
  EXPECT_FALSE(KernelLog::Get().Find(kernels[0].id - 1, &found));
}

TEST_F(KernelLogTest, LaunchesAreBoundedPerKernel) {
  Context on({{Knob::kViz, 1}});
  const int64_t id = KernelLog::Get().Reserve();
  ASSERT_GT(id, 0);
  LoggedKernel k;
  k.id = id;
  k.name = "E_test";
  KernelLog::Get().RecordCompile(k);
  for (int i = 0; i < 100; ++i) KernelLog::Get().RecordLaunch(id, i + 1, 1e-6 * i);
  LoggedKernel got;
  ASSERT_TRUE(KernelLog::Get().Find(id, &got));
  EXPECT_EQ(got.launch_count, 100);
  ASSERT_EQ(got.launches.size(), kMaxLoggedLaunches);
  EXPECT_EQ(got.launches.back().start_ns, 100);
  EXPECT_EQ(got.launches.front().start_ns, 100 - static_cast<int64_t>(kMaxLoggedLaunches) + 1);
}

}  // namespace
}  // namespace kiln
