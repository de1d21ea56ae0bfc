// PageHtml and StandaloneHtml (viz.h): the page (viz_page.html, embedded at build time as
// VizPageTemplate) with its configuration, and for the offline file every document it can ask for.
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/api/viz.h"
#include "engine/realize/kernel_log.h"
#include "engine/rewrite/trace.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace kiln::api::viz {

const char* VizPageTemplate();  // generated: viz_page_html.cc

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// The embedded documents of a standalone page stop growing past this many bytes (SVGs first).
constexpr size_t kMaxEmbeddedBytes = size_t{48} << 20;

// highlight.js token colours (the page's own, after highlight.js's "github" style).
constexpr char kHighlightCss[] =
    "<style>.hljs-keyword,.hljs-selector-tag,.hljs-type{color:#a626a4;font-weight:bold}"
    ".hljs-number,.hljs-literal{color:#986801}.hljs-string{color:#50a14f}"
    ".hljs-comment{color:#a0a1a7;font-style:italic}.hljs-title,.hljs-variable{color:#4078f2}"
    ".hljs-built_in,.hljs-meta{color:#c18401}</style>\n";

// JSON safe inside a <script> element: no "</" (a JSON string keeps its meaning with "<\/").
std::string ScriptSafe(const std::string& text) { return absl::StrReplaceAll(text, {{"</", "<\\/"}}); }

// A script's text safe inside a <script> element. Only the sequences that end or re-enter the element are
// changed (a general "</" would break regex literals such as /</g): highlight.js holds none of them.
std::string InlineScript(const std::string& js) {
  return absl::StrReplaceAll(js, {{"</script", "<\\/script"}, {"</SCRIPT", "<\\/SCRIPT"}, {"<!--", "<\\!--"}});
}

std::string Fill(const std::string& config, const std::string& hljs_block) {
  return absl::StrReplaceAll(VizPageTemplate(), {{"/*KILN_VIZ_CONFIG*/", config}, {"<!--KILN_HLJS-->", hljs_block}});
}

}  // namespace

std::string PageHtml(const std::string& api_base, const std::string& highlight_js_url) {
  rapidjson::StringBuffer b;
  Writer w(b);
  w.StartObject();
  w.Key("apiBase");
  w.String(api_base.c_str());
  w.Key("embedded");
  w.Null();
  w.EndObject();
  std::string hljs;
  if (!highlight_js_url.empty()) {
    hljs = absl::StrCat("<script src=\"", highlight_js_url, "\"></script>\n", kHighlightCss);
  }
  return Fill(ScriptSafe(std::string(b.GetString(), b.GetSize())), hljs);
}

absl::StatusOr<std::string> StandaloneHtml(const std::string& title, const std::string& highlight_js) {
  std::vector<std::pair<std::string, std::string>> docs;
  size_t bytes = 0;
  auto add = [&](std::string path, std::string text) {
    bytes += text.size();
    docs.emplace_back(std::move(path), std::move(text));
  };
  add("kernels", KernelsJson());
  add("timeline", TimelineJson());
  std::vector<int64_t> passes;
  for (const LoggedKernel& k : KernelLog::Get().Kernels()) {
    absl::StatusOr<std::string> kj = KernelJson(k.id);
    if (!kj.ok()) continue;
    add(absl::StrCat("kernel/", k.id), *std::move(kj));
    for (const TracedPass& p : RewriteTrace::Get().PassesOf(k.id)) passes.push_back(p.id);
  }
  for (const TracedPass& p : RewriteTrace::Get().PassesOf(0)) passes.push_back(p.id);
  for (int64_t id : passes) {
    absl::StatusOr<std::string> pj = PassJson(id);
    if (!pj.ok()) continue;  // over the node limit: the page shows the error it gets
    add(absl::StrCat("pass/", id), *std::move(pj));
  }
  for (int64_t id : passes) {
    for (bool output : {false, true}) {
      if (bytes > kMaxEmbeddedBytes) break;
      absl::StatusOr<std::string> svg = PassSvg(id, output);
      if (svg.ok()) add(absl::StrCat("pass/", id, output ? "/output.svg" : "/input.svg"), *std::move(svg));
    }
  }
  rapidjson::StringBuffer b;
  Writer w(b);
  w.StartObject();
  w.Key("apiBase");
  w.String("");
  w.Key("title");
  w.String(title.c_str());
  w.Key("embedded");
  w.StartObject();
  for (const auto& [path, text] : docs) {
    w.Key(path.c_str());
    w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  }
  w.EndObject();
  w.EndObject();
  std::string hljs;
  if (!highlight_js.empty()) hljs = absl::StrCat("<script>", InlineScript(highlight_js), "</script>\n", kHighlightCss);
  return Fill(ScriptSafe(std::string(b.GetString(), b.GetSize())), hljs);
}

}  // namespace kiln::api::viz
