// The VIZ viewer's data and page (issue #22), for kilnd's /viz routes (server/rest/viz_routes.h)
// and the offline `kiln viz FILE` (tools/viz): what the engine recorded while VIZ=1, as JSON
// documents, UOp graphs laid out by Graphviz (libgvc's dot engine) as SVG, and the page itself.
//
// A separate library (kiln_api_viz) so that only its users link Graphviz.
//
// Sources: the kernel log (engine/realize/kernel_log.h: the last N kernel compiles with AST, opts,
// source and launches) and the rewrite trace (engine/rewrite/trace.h: every named graph_rewrite
// pass with its input and output graph, and every match with the node before and after). A
// kernel's passes are the rewrite passes of its lowering; passes outside any kernel (scheduling,
// the tensor graph's simplifications) are listed on their own.
//
// Node ids in every document are UOp::id() (never reused within the process), so a match's
// `before` / `after` can be found in a pass's input / output graph. Graphs larger than
// kMaxVizJsonNodes (JSON) or kMaxVizGraphNodes (SVG) are refused (OUT_OF_RANGE, HTTP 400, naming
// the count and the limit).
//
// JSON documents:
//   KernelsJson   {"enabled", "capacity", "dropped", "kernels": [{id, name, device, renderer,
//                  label, compiled_unix_ms, compile_ms, flops, bytes, opts, launch_count, passes}],
//                  "other_passes": [pass summary...]}
//   KernelJson    one kernel: the summary plus "ast" (UOp text form), "source", "launches":
//                  [{ts_us, dur_us}] and "passes": [{id, name, matcher, mode, depth, group,
//                  num_matches, ok, error}]
//   PassJson      one pass: the summary plus "input" and "output" graphs ({"root", "nodes": [{id,
//                  op, dtype, arg, src: [ids]}]}) and "matches": [{rule, matcher, before, after,
//                  removed: [ids of the input graph the match took away], added: [ids of the
//                  output graph it brought in]}]
//   TimelineJson  the logged launches of every kernel as Chrome trace "X" events (ts, dur in us)
// Thread safety: every function is thread-safe (Graphviz calls are serialized).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::api::viz {

inline constexpr size_t kMaxVizGraphNodes = 800;    // drawn as SVG (dot's layout of ~4000 nodes takes minutes)
inline constexpr size_t kMaxVizJsonNodes = 100000;  // listed in a pass's JSON

// Whether compiles are being recorded (the VIZ knob).
bool Enabled();
// The kernel log's ring size (kilnd --viz-kernels; >= 1), and the rewrite trace's with it: 64
// passes and 1024 matches per kernel, at least 4096 and 65536 (a kernel's lowering runs tens to
// a thousand passes, most of them nested ones that rewrite nothing).
void SetCapacity(size_t kernels);

std::string KernelsJson();
// NOT_FOUND naming the id when the kernel is not (or no longer) held.
absl::StatusOr<std::string> KernelJson(int64_t id);
absl::StatusOr<std::string> PassJson(int64_t pass_id);
// The pass's input (output = false) or output graph as SVG; each node's <g> has id="n<UOp id>"
// and class "node", so the page can highlight it. NOT_FOUND for an unknown pass (or a failed
// pass's output), OUT_OF_RANGE over kMaxVizGraphNodes, INTERNAL when Graphviz fails.
absl::StatusOr<std::string> PassSvg(int64_t pass_id, bool output);
std::string TimelineJson();

// The page. Served by kilnd, it fetches the documents above from `api_base` (e.g. "/viz/api")
// and highlight.js from `highlight_js_url` ("" = no syntax colouring).
std::string PageHtml(const std::string& api_base, const std::string& highlight_js_url);
// A self-contained page (no server, no network): every document and every SVG the page can ask
// for is embedded, and highlight.js (`highlight_js`: the script's text, "" = none) inline.
absl::StatusOr<std::string> StandaloneHtml(const std::string& title, const std::string& highlight_js);

// Debian's libjs-highlight.js script, read from /usr/share/javascript (or "" when absent).
std::string HighlightJs();

}  // namespace kiln::api::viz
