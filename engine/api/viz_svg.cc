// PassSvg (viz.h): a pass's graph as Graphviz DOT, laid out and rendered to SVG by libgvc's dot
// engine. Graphviz keeps global state, so every call into it holds one process-wide mutex.
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/api/viz.h"
#include "engine/base/status.h"
#include "engine/rewrite/trace.h"
#include "engine/uop/ops.h"
#include "engine/uop/printer.h"
#include "engine/uop/uop.h"

// Last: Graphviz's C headers define macros (TRUE, NIL, ...) that must not reach the others.
#include <graphviz/gvc.h>

namespace kiln::api::viz {
namespace {

constexpr size_t kMaxLabelArg = 40;

// A DOT double-quoted string body.
std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string_view FillOf(Op op) {
  const std::string_view n = OpName(op);
  if (n == "SINK") return "#d9d9d9";
  if (n == "CONST" || n == "DEFINE_VAR" || n == "VCONST") return "#d5f5d5";
  if (n == "LOAD" || n == "STORE" || n == "INDEX" || n == "BUFFER" || n == "DEFINE_GLOBAL" ||
      n == "DEFINE_LOCAL" || n == "DEFINE_REG" || n == "BUFFERIZE" || n == "COPY")
    return "#d6e6fb";
  if (n == "RANGE" || n == "END" || n == "ENDRANGE" || n == "REDUCE" || n == "REDUCE_AXIS" || n == "SPECIAL")
    return "#fde2c4";
  if (n == "RESHAPE" || n == "EXPAND" || n == "PERMUTE" || n == "PAD" || n == "SHRINK" || n == "FLIP" ||
      n == "VIEW")
    return "#eadcf8";
  return "#fff8d0";
}

std::string Dot(const UOpPtr& root) {
  std::string dot =
      "digraph G {\n"
      "  graph [ranksep=0.3, nodesep=0.25];\n"
      "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=9, margin=\"0.06,0.03\", "
      "height=0.2];\n"
      "  edge [arrowsize=0.5, color=\"#777777\"];\n";
  for (const UOp* u : Toposort(absl::Span<const UOpPtr>(&root, 1))) {
    std::string arg = PrintArg(u->arg());
    if (arg.size() > kMaxLabelArg) arg = absl::StrCat(arg.substr(0, kMaxLabelArg), "...");
    std::string label = absl::StrCat(std::string(OpName(u->op())), "\n", u->dtype().Name());
    if (!arg.empty()) absl::StrAppend(&label, "\n", arg);
    absl::StrAppend(&dot, "  n", u->id(), " [id=\"n", u->id(), "\", label=\"", Escape(label), "\", fillcolor=\"",
                    std::string(FillOf(u->op())), "\"];\n");
    for (size_t i = 0; i < u->num_src(); ++i) {
      absl::StrAppend(&dot, "  n", u->src(i)->id(), " -> n", u->id(), ";\n");
    }
  }
  dot += "}\n";
  return dot;
}

absl::Mutex& GraphvizMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

absl::StatusOr<std::string> RenderSvg(const std::string& dot) {
  absl::MutexLock l(&GraphvizMutex());
  static GVC_t* gvc = gvContext();
  if (gvc == nullptr) return absl::InternalError("graphviz: no context");
  Agraph_t* g = agmemread(dot.c_str());
  if (g == nullptr) return absl::InternalError("graphviz: the graph did not parse");
  if (gvLayout(gvc, g, "dot") != 0) {
    agclose(g);
    return absl::InternalError("graphviz: the dot layout failed");
  }
  char* data = nullptr;
  unsigned int length = 0;
  const int rc = gvRenderData(gvc, g, "svg", &data, &length);
  std::string svg = rc == 0 && data != nullptr ? std::string(data, length) : std::string();
  if (data != nullptr) gvFreeRenderData(data);
  gvFreeLayout(gvc, g);
  agclose(g);
  if (svg.empty()) return absl::InternalError("graphviz: SVG rendering failed");
  // The page inlines the <svg> element: drop the XML prolog and doctype.
  const size_t at = svg.find("<svg");
  return at == std::string::npos ? svg : svg.substr(at);
}

}  // namespace

absl::StatusOr<std::string> PassSvg(int64_t pass_id, bool output) {
  TracedPass p;
  if (!RewriteTrace::Get().FindPass(pass_id, &p)) {
    return absl::NotFoundError(absl::StrCat("pass ", pass_id, ": not in the rewrite trace"));
  }
  const UOpPtr& root = output ? p.output : p.input;
  if (!root) return absl::NotFoundError(absl::StrCat("pass ", pass_id, ": has no ", output ? "output" : "input"));
  const size_t nodes = Toposort(absl::Span<const UOpPtr>(&root, 1)).size();
  if (nodes > kMaxVizGraphNodes) {
    return absl::OutOfRangeError(
        absl::StrCat("graph: ", nodes, " nodes, over the viewer's limit of ", kMaxVizGraphNodes));
  }
  return RenderSvg(Dot(root));
}

}  // namespace kiln::api::viz
