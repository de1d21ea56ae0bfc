#include "server/rest/viz_routes.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/api/viz.h"
#include "server/rest/http_status.h"
#include "server/rest/http_util.h"

namespace kiln::server {
namespace {

constexpr std::string_view kApi = "api/";

absl::StatusOr<int64_t> ParseId(std::string_view text) {
  int64_t id = 0;
  if (text.empty() || text.size() > 19 || !absl::SimpleAtoi(std::string(text), &id) || id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("id: '", std::string(text.substr(0, 32)), "' is not a positive integer"));
  }
  return id;
}

void SetBody(HttpResponse* res, std::string body, const char* type) {
  res->status = 200;
  res->content_type = type;
  res->body = std::move(body);
}

void SetDoc(HttpResponse* res, absl::StatusOr<std::string> doc, const char* type) {
  if (!doc.ok()) return SetStatus(res, doc.status());
  SetBody(res, *std::move(doc), type);
}

}  // namespace

bool MatchVizPath(std::string_view path, std::string* doc) {
  if (path == "/viz" || path == "/viz/") {
    doc->clear();
    return true;
  }
  if (path.substr(0, 5) != "/viz/") return false;
  *doc = std::string(path.substr(5));
  return true;
}

std::string_view VizEndpoint(std::string_view doc) {
  if (doc.empty()) return "GET /viz";
  if (doc == "highlight.js") return "GET /viz/highlight.js";
  return "GET /viz/api/{doc}";
}

void HandleViz(const std::string& doc, HttpResponse* res) {
  if (doc.empty()) {
    const bool hljs = !api::viz::HighlightJs().empty();
    return SetBody(res, api::viz::PageHtml("/viz/api", hljs ? "/viz/highlight.js" : ""), "text/html; charset=utf-8");
  }
  if (doc == "highlight.js") {
    std::string js = api::viz::HighlightJs();
    if (js.empty()) return SetError(res, 404, "highlight.js: Debian's libjs-highlight.js is not installed");
    return SetBody(res, std::move(js), "application/javascript");
  }
  if (doc.substr(0, kApi.size()) != kApi) return SetError(res, 404, "no /viz route for this path");
  std::string_view d(doc);
  d.remove_prefix(kApi.size());
  if (d == "kernels") return SetDoc(res, api::viz::KernelsJson(), kJsonType);
  if (d == "timeline") return SetDoc(res, api::viz::TimelineJson(), kJsonType);
  if (d.substr(0, 7) == "kernel/") {
    absl::StatusOr<int64_t> id = ParseId(d.substr(7));
    if (!id.ok()) return SetStatus(res, id.status());
    return SetDoc(res, api::viz::KernelJson(*id), kJsonType);
  }
  if (d.substr(0, 5) == "pass/") {
    d.remove_prefix(5);
    const size_t slash = d.find('/');
    absl::StatusOr<int64_t> id = ParseId(d.substr(0, slash));
    if (!id.ok()) return SetStatus(res, id.status());
    if (slash == std::string_view::npos) return SetDoc(res, api::viz::PassJson(*id), kJsonType);
    const std::string_view which = d.substr(slash + 1);
    if (which == "input.svg" || which == "output.svg") {
      return SetDoc(res, api::viz::PassSvg(*id, which == "output.svg"), "image/svg+xml");
    }
  }
  SetError(res, 404, "no /viz route for this path");
}

}  // namespace kiln::server
