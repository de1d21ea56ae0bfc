// BEAM search (issue #21 item 1): BEAM=n kernels compute what the heuristic's compute (checked against float64
// loops here), the search is counted once per kernel, and its choice is found in the disk cache by a fresh cache
// (a new process's view: empty memory, same SQLite file) without searching again.
#include <cmath>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/realize/beam.h"
#include "engine/realize/realize.h"
#include "engine/runtime/compile_cache.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using codegen::Opt;
using codegen::OptOp;

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// relu(A @ B) + bias, and the row sums of A, on `device`; float64 references from the same inputs.
struct Case {
  int64_t m = 48, k = 40, n = 64;
  std::vector<float> a = Random(static_cast<size_t>(m * k), 1), b = Random(static_cast<size_t>(k * n), 2),
                     bias = Random(static_cast<size_t>(n), 3);
  std::vector<double> WantMatmul() const {
    std::vector<double> out(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t) s += static_cast<double>(a[i * k + t]) * b[t * n + j];
        out[i * n + j] = std::max(s, 0.0) + bias[j];
      }
    return out;
  }
  std::vector<double> WantRowSums() const {
    std::vector<double> out(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t t = 0; t < k; ++t) out[i] += a[i * k + t];
    return out;
  }
  void Check(const std::string& device) const {
    Tensor ta = Tensor::FromVector<float>(a, {m, k}).To(device), tb = Tensor::FromVector<float>(b, {k, n}).To(device),
           tbias = Tensor::FromVector<float>(bias, {n}).To(device);
    absl::StatusOr<std::vector<float>> mm = (ta.Matmul(tb).Relu() + tbias).ToVector<float>();
    ASSERT_TRUE(mm.ok()) << mm.status();
    const std::vector<double> want = WantMatmul();
    ASSERT_EQ(mm->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR((*mm)[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
    absl::StatusOr<std::vector<float>> rs = ta.Sum(1).ToVector<float>();
    ASSERT_TRUE(rs.ok()) << rs.status();
    const std::vector<double> want_rs = WantRowSums();
    for (size_t i = 0; i < want_rs.size(); ++i) ASSERT_NEAR((*rs)[i], want_rs[i], 1e-4 * (1 + std::fabs(want_rs[i])));
  }
};

class BeamTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_beam_test_" + std::to_string(::getpid()) + "_" + GetParam());
    std::filesystem::create_directories(dir_);
    runtime::CompileCache::ConfigureGlobal({(dir_ / "cache.db").string()});
  }
  void TearDown() override {
    runtime::CompileCache::ConfigureGlobal({});
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

TEST_P(BeamTest, SearchesOnceThenEveryProcessFindsTheChoice) {
  const std::string device = GetParam();
  Case c;
  const BeamCounters before = GetBeamCounters();
  {
    Context knobs({{Knob::kBeam, 2}, {Knob::kBeamBudget, 2}});
    RealizeContext ctx;
    ScopedRealizeContext scope(ctx);
    c.Check(device);
  }
  const BeamCounters searched = GetBeamCounters();
  EXPECT_GE(searched.searches - before.searches, 2) << "matmul and row-sum kernels";
  EXPECT_GT(searched.candidates, before.candidates);

  // A new process: an empty in-memory cache over the same file, a new realize context. Nothing is searched.
  runtime::CompileCache::ConfigureGlobal({(dir_ / "cache.db").string()});
  {
    Context knobs({{Knob::kBeam, 2}, {Knob::kBeamBudget, 2}});
    RealizeContext ctx;
    ScopedRealizeContext scope(ctx);
    c.Check(device);
  }
  const BeamCounters again = GetBeamCounters();
  EXPECT_EQ(again.searches, searched.searches);
  EXPECT_GE(again.cache_hits - searched.cache_hits, 2);

  // Another width is another search.
  {
    Context knobs({{Knob::kBeam, 1}, {Knob::kBeamBudget, 2}});
    RealizeContext ctx;
    ScopedRealizeContext scope(ctx);
    c.Check(device);
  }
  EXPECT_GT(GetBeamCounters().searches, again.searches);
}

// kilnd --beam: the heuristic's kernels answer at once, the searches run on the tuner thread, and once they drain
// the generation moves on and the next realize lowers with the stored choices (cache hits, no new searches).
TEST_P(BeamTest, BackgroundSearchesSwapInWhenDrained) {
  const std::string device = GetParam();
  Case c;
  c.m = 32;  // shapes of its own: kernels no other test has searched
  c.a.resize(static_cast<size_t>(c.m * c.k));
  SetBeamBackground(true);
  const BeamCounters before = GetBeamCounters();
  {
    Context knobs({{Knob::kBeam, 1}, {Knob::kBeamBudget, 1}});
    RealizeContext ctx;
    ScopedRealizeContext scope(ctx);
    c.Check(device);  // right with the heuristic's kernels while the searches are queued
  }
  WaitForBeamIdle();
  const BeamCounters drained = GetBeamCounters();
  EXPECT_EQ(drained.pending, 0);
  EXPECT_GE(drained.searches - before.searches, 2);
  EXPECT_GT(drained.generation, before.generation);
  {
    Context knobs({{Knob::kBeam, 1}, {Knob::kBeamBudget, 1}});
    RealizeContext ctx;
    ScopedRealizeContext scope(ctx);
    c.Check(device);  // the tuned kernels
  }
  const BeamCounters after = GetBeamCounters();
  SetBeamBackground(false);
  EXPECT_EQ(after.searches, drained.searches);
  EXPECT_GE(after.cache_hits - drained.cache_hits, 2);
  EXPECT_EQ(after.pending, 0);
}

INSTANTIATE_TEST_SUITE_P(Devices, BeamTest, ::testing::Values("CPU", "INTERP", "CL"),
                         [](const auto& info) { return info.param; });

TEST(BeamChoiceTest, EncodesAndDecodes) {
  BeamChoice c;
  c.heuristic = false;
  c.opts = {Opt{OptOp::kUpcast, 1, 4}, Opt{OptOp::kUnroll, 0, 0}, Opt{OptOp::kThread, 0, 2}};
  BeamChoice back;
  ASSERT_TRUE(DecodeBeamChoice(EncodeBeamChoice(c), &back));
  EXPECT_FALSE(back.heuristic);
  EXPECT_EQ(back.opts, c.opts);
  ASSERT_TRUE(DecodeBeamChoice(EncodeBeamChoice(BeamChoice{}), &back));
  EXPECT_TRUE(back.heuristic);
  for (const char* bad : {"", "opts:UPCAST,0", "opts:WARP,0,2", "opts:UPCAST,x,2", "heuristics"})
    EXPECT_FALSE(DecodeBeamChoice(bad, &back)) << bad;
}

TEST(BeamChoiceTest, ActionsFitTheTarget) {
  codegen::Target cpu;
  cpu.has_threads = true;
  cpu.max_threads = 2;
  bool thread = false, local = false;
  for (const Opt& o : BeamActions(cpu)) {
    thread |= o.op == OptOp::kThread;
    local |= o.op == OptOp::kLocal || o.op == OptOp::kGroupTop;
  }
  EXPECT_TRUE(thread);
  EXPECT_FALSE(local);
  codegen::Target gpu;
  gpu.has_local = true;
  thread = local = false;
  for (const Opt& o : BeamActions(gpu)) {
    thread |= o.op == OptOp::kThread;
    local |= o.op == OptOp::kLocal;
  }
  EXPECT_FALSE(thread);
  EXPECT_TRUE(local);
}

}  // namespace
}  // namespace kiln
