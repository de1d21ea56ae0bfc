// The VIZ documents (issue #22, engine/api/viz.h) over a real compile: the kernel list, one
// kernel, one pass with its graphs and matches, the Graphviz SVG of a pass (every node drawn with
// the id the page highlights by), the timeline, and the errors for unknown ids.
#include "engine/api/viz.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/register_all.h"
#include "engine/base/env.h"
#include "engine/realize/kernel_log.h"
#include "engine/realize/realize.h"
#include "engine/rewrite/trace.h"
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

}  // namespace
}  // namespace kiln
