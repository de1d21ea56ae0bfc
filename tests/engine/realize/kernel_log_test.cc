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
