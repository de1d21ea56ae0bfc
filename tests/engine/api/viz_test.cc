// The VIZ documents (issue #22, engine/api/viz.h) over a real compile: the kernel list, one
// kernel, one pass with its graphs and matches, the Graphviz SVG of a pass (every node drawn with
// the id the page highlights by), the timeline, and the errors for unknown ids. Also: a run asked
// to record (RunOptions::viz) with VIZ off, and a kernel's BEAM candidates.
#include "engine/api/viz.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/register_all.h"
#include "engine/api/engine.h"
#include "engine/base/env.h"
#include "engine/realize/beam.h"
#include "engine/realize/kernel_log.h"
#include "engine/realize/realize.h"
#include "engine/rewrite/trace.h"
#include "engine/runtime/compile_cache.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST(VizTest, DocumentsOfARealCompile) {
  backends::RegisterAllBackends();
  KernelLog::Get().Clear();
  RewriteTrace::Get().Clear();
  Context on({{Knob::kViz, 1}, {Knob::kTrackMatchStats, 2}});
  {
    RealizeContext ctx;
    ScopedRealizeContext scope(ctx);
    ScopedKernelLogLabel label("viz test");
    Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
    absl::StatusOr<std::vector<float>> out = (t * 7.0f).Sum({1}).ToVector<float>();
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FLOAT_EQ((*out)[0], 70.0f);
  }
  EXPECT_TRUE(api::viz::Enabled());
  const std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  const LoggedKernel& k = kernels[0];

  const std::string list = api::viz::KernelsJson();
  EXPECT_NE(list.find("\"enabled\":true"), std::string::npos) << list;
  EXPECT_NE(list.find(absl::StrCat("\"name\":\"", k.name, "\"")), std::string::npos) << list;
  EXPECT_NE(list.find("\"label\":\"viz test\""), std::string::npos) << list;

  absl::StatusOr<std::string> one = api::viz::KernelJson(k.id);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_NE(one->find("\"source\":"), std::string::npos);
  EXPECT_NE(one->find("\"pass_list\":[{"), std::string::npos) << *one;
  EXPECT_NE(one->find("\"launch_count\":1"), std::string::npos) << *one;

  // A pass of this kernel with matches: its JSON has both graphs, its SVG every input node.
  const std::vector<TracedPass> passes = RewriteTrace::Get().PassesOf(k.id);
  const TracedPass* with_matches = nullptr;
  for (const TracedPass& p : passes) {
    if (p.num_matches > 0 && p.ok && p.depth == 0) {
      with_matches = &p;
      break;
    }
  }
  ASSERT_NE(with_matches, nullptr) << RewriteTrace::Get().Format();
  absl::StatusOr<std::string> pass = api::viz::PassJson(with_matches->id);
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_NE(pass->find(absl::StrCat("\"root\":", with_matches->input->id())), std::string::npos);
  EXPECT_NE(pass->find(absl::StrCat("\"root\":", with_matches->output->id())), std::string::npos);
  EXPECT_EQ(Count(*pass, "\"rule\":"), static_cast<size_t>(with_matches->num_matches));

  absl::StatusOr<std::string> svg = api::viz::PassSvg(with_matches->id, false);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(svg->rfind("<svg", 0), 0u) << svg->substr(0, 200);
  const std::vector<const UOp*> nodes = Toposort(absl::Span<const UOpPtr>(&with_matches->input, 1));
  EXPECT_EQ(Count(*svg, "class=\"node\""), nodes.size());
  for (const UOp* u : nodes) {
    EXPECT_NE(svg->find(absl::StrCat("id=\"n", u->id(), "\"")), std::string::npos) << u->id();
  }
  EXPECT_TRUE(api::viz::PassSvg(with_matches->id, true).ok());

  const std::string timeline = api::viz::TimelineJson();
  EXPECT_EQ(Count(timeline, "\"ph\":\"X\""), 1u) << timeline;

  EXPECT_EQ(api::viz::KernelJson(k.id + 1000).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(api::viz::PassJson(1 << 30).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(api::viz::PassSvg(1 << 30, false).status().code(), absl::StatusCode::kNotFound);

  const std::string page = api::viz::PageHtml("/viz/api", "");
  EXPECT_NE(page.find("\"apiBase\":\"/viz/api\""), std::string::npos);
  EXPECT_EQ(page.find("KILN_VIZ_CONFIG"), std::string::npos);
  absl::StatusOr<std::string> standalone = api::viz::StandaloneHtml("t", "");
  ASSERT_TRUE(standalone.ok());
  EXPECT_NE(standalone->find(absl::StrCat("\"kernel/", k.id, "\"")), std::string::npos);
  EXPECT_NE(standalone->find(absl::StrCat("\"pass/", with_matches->id, "/input.svg\"")), std::string::npos);
  // Nothing in the embedded data closes the page's script early.
  const size_t script = standalone->find("const KILN = ");
  ASSERT_NE(script, std::string::npos);
  EXPECT_EQ(standalone->find("</script>", script), standalone->rfind("</script>"));
  KernelLog::Get().Clear();
  RewriteTrace::Get().Clear();
}

// y = (a + b) * 3: one elementwise kernel.
api::GraphSpec AddScale() {
  api::GraphSpec g;
  g.inputs = {{"a", "float32", {2, 3}}, {"b", "float32", {2, 3}}};
  auto node = [](std::string op, std::vector<uint32_t> src) {
    api::NodeSpec n;
    n.op = std::move(op);
    n.dtype = "float32";
    n.src = std::move(src);
    return n;
  };
  api::NodeSpec a = node("INPUT", {}), b = node("INPUT", {}), three = node("CONST", {});
  a.arg.kind = b.arg.kind = api::NodeArgSpec::Kind::kInt;
  b.arg.int_value = 1;
  three.arg.kind = api::NodeArgSpec::Kind::kFloat;
  three.arg.float_value = 3.0;
  g.nodes = {a, b, node("ADD", {0, 1}), three, node("MUL", {2, 3})};
  g.outputs = {{"y", 4}};
  return g;
}

TEST(VizTest, RunAskedToRecordIsRecordedWithVizOff) {
  backends::RegisterAllBackends();
  Context off({{Knob::kViz, 0}, {Knob::kTrackMatchStats, 0}});
  KernelLog::Get().Clear();
  RewriteTrace::Get().Clear();
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 1, 1, 1, 1, 1};
  const std::vector<api::HostTensorView> in = {
      {"float32", {2, 3}, {reinterpret_cast<const char*>(a.data()), a.size() * 4}},
      {"float32", {2, 3}, {reinterpret_cast<const char*>(b.data()), b.size() * 4}}};
  auto run = [&](api::Engine& e, bool viz) {
    absl::StatusOr<std::shared_ptr<const api::PreparedGraph>> g = e.Prepare(AddScale());
    EXPECT_TRUE(g.ok()) << g.status();
    api::RunOptions o;
    o.viz = viz;
    o.label = "asked";
    absl::StatusOr<api::RunResult> r = e.Run(**g, in, o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      std::vector<float> y(6);
      std::memcpy(y.data(), r->outputs.at(0).data.data(), 24);
      EXPECT_FLOAT_EQ(y[5], 21.0f);
    }
  };
  // Not asked: nothing recorded, nothing traced.
  absl::StatusOr<std::unique_ptr<api::Engine>> quiet = api::Engine::Create();
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  run(**quiet, false);
  EXPECT_TRUE(KernelLog::Get().Kernels().empty());
  EXPECT_TRUE(RewriteTrace::Get().Passes().empty());

  // Asked (a fresh engine compiles again): the compile, its passes and its launch; the knob is
  // back off after the run.
  absl::StatusOr<std::unique_ptr<api::Engine>> asked = api::Engine::Create();
  ASSERT_TRUE(asked.ok()) << asked.status();
  run(**asked, true);
  EXPECT_FALSE(KernelLog::Enabled());
  std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].label, "asked");
  EXPECT_EQ(kernels[0].launch_count, 1);
  EXPECT_FALSE(RewriteTrace::Get().PassesOf(kernels[0].id).empty());

  // Its kernel reused: launches are logged only by runs that record.
  run(**asked, false);
  run(**asked, false);
  ASSERT_TRUE(KernelLog::Get().Find(kernels[0].id, &kernels[0]));
  EXPECT_EQ(kernels[0].launch_count, 1);
  run(**asked, true);  // a JIT capture or replay of the same kernel
  ASSERT_TRUE(KernelLog::Get().Find(kernels[0].id, &kernels[0]));
  EXPECT_EQ(kernels[0].launch_count, 2);
  EXPECT_EQ(KernelLog::Get().Kernels().size(), 1u) << "nothing compiled again";
  KernelLog::Get().Clear();
  RewriteTrace::Get().Clear();
}

// BEAM with VIZ: the kernel's record lists what the search tried, and the page's document has it.
TEST(VizTest, BeamCandidatesAreRecorded) {
  backends::RegisterAllBackends();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln_viz_beam_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  runtime::CompileCache::ConfigureGlobal({(dir / "cache.db").string()});  // nothing searched yet
  KernelLog::Get().Clear();
  RewriteTrace::Get().Clear();
  Context on({{Knob::kViz, 1}, {Knob::kTrackMatchStats, 2}, {Knob::kBeam, 2},
              {Knob::kBeamBudget, 1}});
  auto matmul = [] {
    RealizeContext ctx;
    ScopedRealizeContext scope(ctx);
    std::vector<float> a(24 * 20), b(20 * 16);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) - 2;
    Tensor ta = Tensor::FromVector<float>(a, {24, 20}), tb = Tensor::FromVector<float>(b, {20, 16});
    absl::StatusOr<std::vector<float>> out = ta.Matmul(tb).ToVector<float>();
    ASSERT_TRUE(out.ok()) << out.status();
    double want = 0;  // out[0][0], from the inputs
    for (int t = 0; t < 20; ++t) want += static_cast<double>(a[t]) * b[t * 16];
    EXPECT_FLOAT_EQ((*out)[0], static_cast<float>(want));
  };
  matmul();
  const std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  const LoggedBeam& beam = kernels[0].beam;
  EXPECT_EQ(beam.width, 2);
  EXPECT_FALSE(beam.from_cache);
  ASSERT_GE(beam.candidates.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(beam.candidates[0].opts, "heuristic")) << beam.candidates[0].opts;
  EXPECT_EQ(beam.candidates[1].opts, "no opts");
  EXPECT_EQ(beam.candidates[1].result, "reference");
  const std::set<std::string> results = {"timed",  "slow",      "rejected",
                                         "failed", "not timed", "reference"};
  const std::set<std::string> eligible = {"timed", "slow", "reference"};
  double fastest = 1e30;
  int rounds = 0;
  for (const LoggedBeamCandidate& c : beam.candidates) {
    EXPECT_TRUE(results.count(c.result)) << c.result;
    EXPECT_EQ(c.seconds >= 0, c.result != "failed" && c.result != "not timed")
        << c.opts << " " << c.result;
    if (eligible.count(c.result)) fastest = std::min(fastest, c.seconds);
    rounds = std::max(rounds, c.round);
  }
  EXPECT_EQ(rounds, beam.rounds);
  ASSERT_GE(beam.chosen, 0);
  ASSERT_LT(beam.chosen, static_cast<int>(beam.candidates.size()));
  const LoggedBeamCandidate& chosen = beam.candidates[static_cast<size_t>(beam.chosen)];
  EXPECT_TRUE(eligible.count(chosen.result)) << chosen.result;
  EXPECT_EQ(chosen.seconds, fastest);
  EXPECT_EQ(beam.choice, beam.chosen == 0 ? "heuristic" : chosen.opts);
  EXPECT_DOUBLE_EQ(beam.best_seconds, chosen.seconds);
  // The candidates' own lowerings are not in the trace: no pass outside the kernel is a lowering
  // pass.
  std::set<std::string> lowering;
  for (const TracedPass& p : RewriteTrace::Get().PassesOf(kernels[0].id)) lowering.insert(p.name);
  ASSERT_FALSE(lowering.empty());
  for (const TracedPass& p : RewriteTrace::Get().PassesOf(0)) {
    EXPECT_FALSE(lowering.count(p.name)) << p.name;
  }

  absl::StatusOr<std::string> doc = api::viz::KernelJson(kernels[0].id);
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_NE(doc->find("\"beam\":{\"width\":2,\"from_cache\":false"), std::string::npos) << *doc;
  EXPECT_EQ(Count(*doc, "\"result\":"), beam.candidates.size());
  EXPECT_NE(doc->find(absl::StrCat("\"chosen\":", beam.chosen)), std::string::npos);

  // The same kernel compiled again in this process: the choice from the cache, with the search's
  // list.
  matmul();
  const std::vector<LoggedKernel> again = KernelLog::Get().Kernels();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_TRUE(again[1].beam.from_cache);
  EXPECT_EQ(again[1].beam.candidates.size(), beam.candidates.size());
  EXPECT_EQ(again[1].beam.chosen, beam.chosen);
  // The process-wide search log keeps figures only.
  for (const BeamChoice& c : BeamSearchLog()) EXPECT_TRUE(c.tried.empty());

  // Without VIZ nothing is listed (a fresh cache: searched again).
  runtime::CompileCache::ConfigureGlobal({(dir / "cache2.db").string()});
  {
    Context quiet({{Knob::kViz, 0}, {Knob::kTrackMatchStats, 0}});
    const BeamCounters before = GetBeamCounters();
    matmul();
    EXPECT_EQ(GetBeamCounters().searches, before.searches + 1);
  }
  EXPECT_EQ(KernelLog::Get().Kernels().size(), 2u);
  runtime::CompileCache::ConfigureGlobal({});
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  KernelLog::Get().Clear();
  RewriteTrace::Get().Clear();
}

}  // namespace
}  // namespace kiln
