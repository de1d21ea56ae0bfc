// The VIZ page and its JSON/SVG documents on kilnd's HTTP port (issue #22; engine/api/viz.h has
// what each document holds):
//   GET /viz                          the page (HTML, no external resources)
//   GET /viz/highlight.js             Debian's libjs-highlight.js (404 when not installed)
//   GET /viz/api/kernels              compiles in the VIZ kernel log, passes outside kernels
//   GET /viz/api/kernel/{id}          one compile: AST, opts, source, launches, passes
//   GET /viz/api/pass/{id}            one rewrite pass: input/output graphs, matches
//   GET /viz/api/pass/{id}/input.svg  its input graph laid out by Graphviz (also output.svg)
//   GET /viz/api/timeline             the logged launches as Chrome trace events
// Admin role (server/core/auth.h, group kiln-viz). Ids that are not positive integers are 400.
#pragma once

#include <string>
#include <string_view>

#include "server/rest/http_message.h"

namespace kiln::server {

// The document a /viz path names ("" = the page, "highlight.js", "api/kernels", ...), or false
// for a path under no /viz route.
bool MatchVizPath(std::string_view path, std::string* doc);
// The endpoint-table name of a /viz document ("GET /viz", "GET /viz/highlight.js",
// "GET /viz/api/{doc}").
std::string_view VizEndpoint(std::string_view doc);
void HandleViz(const std::string& doc, HttpResponse* res);

}  // namespace kiln::server
