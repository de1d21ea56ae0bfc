// The VIZ documents (viz.h): JSON of the kernel log and the rewrite trace.
#include "engine/api/viz.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/clock.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/realize/kernel_log.h"
#include "engine/rewrite/trace.h"
#include "engine/uop/ops.h"
#include "engine/uop/printer.h"
#include "engine/uop/uop.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace kiln::api::viz {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// Matches of one pass get removed/added node lists up to this many (the rest list none).
constexpr size_t kMaxDiffedMatches = 500;
constexpr size_t kMaxArgChars = 160;

void Str(Writer* w, std::string_view s) { w->String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

std::string Done(const rapidjson::StringBuffer& b) { return std::string(b.GetString(), b.GetSize()); }

std::string ArgText(const UOp& u) {
  std::string a = PrintArg(u.arg());
  if (a.size() > kMaxArgChars) a = absl::StrCat(a.substr(0, kMaxArgChars), "...");
  return a;
}

void PassSummary(Writer* w, const TracedPass& p) {
  w->Key("id");
  w->Int64(p.id);
  w->Key("name");
  Str(w, p.name);
  w->Key("matcher");
  Str(w, p.matcher);
  w->Key("mode");
  Str(w, p.mode);
  w->Key("depth");
  w->Int(p.depth);
  w->Key("group");
  w->Int64(p.group);
  w->Key("num_matches");
  w->Int64(p.num_matches);
  w->Key("ok");
  w->Bool(p.ok);
  w->Key("error");
  Str(w, p.error);
}

void KernelSummary(Writer* w, const LoggedKernel& k, size_t passes) {
  w->Key("id");
  w->Int64(k.id);
  w->Key("name");
  Str(w, k.name);
  w->Key("device");
  Str(w, k.device);
  w->Key("renderer");
  Str(w, k.renderer);
  w->Key("label");
  Str(w, k.label);
  w->Key("compiled_unix_ms");
  w->Int64(k.compiled_unix_ms);
  w->Key("compile_ms");
  w->Double(k.compile_seconds * 1e3);
  w->Key("reused");
  w->Bool(k.reused);
  w->Key("flops");
  w->Int64(k.flops);
  w->Key("bytes");
  w->Int64(k.bytes);
  w->Key("opts");
  w->StartArray();
  for (const std::string& o : k.applied_opts) Str(w, o);
  w->EndArray();
  w->Key("launch_count");
  w->Int64(k.launch_count);
  w->Key("passes");
  w->Uint64(passes);
  w->Key("beam_width");
  w->Int(k.beam.width);
  w->Key("beam_candidates");
  w->Uint64(k.beam.candidates.size());
}

// The kernel's BEAM record: null when BEAM did not run for it.
void Beam(Writer* w, const LoggedBeam& b) {
  if (b.width == 0) {
    w->Null();
    return;
  }
  w->StartObject();
  w->Key("width");
  w->Int(b.width);
  w->Key("from_cache");
  w->Bool(b.from_cache);
  w->Key("choice");
  Str(w, b.choice);
  w->Key("rounds");
  w->Int(b.rounds);
  w->Key("search_ms");
  w->Double(b.search_seconds * 1e3);
  w->Key("heuristic_us");
  w->Double(b.heuristic_seconds * 1e6);
  w->Key("best_us");
  w->Double(b.best_seconds * 1e6);
  w->Key("chosen");
  w->Int(b.chosen);
  w->Key("candidates");
  w->StartArray();
  for (const LoggedBeamCandidate& c : b.candidates) {
    w->StartObject();
    w->Key("opts");
    Str(w, c.opts);
    w->Key("round");
    w->Int(c.round);
    w->Key("result");
    Str(w, c.result);
    w->Key("us");
    if (c.seconds >= 0) {
      w->Double(c.seconds * 1e6);
    } else {
      w->Null();
    }
    w->EndObject();
  }
  w->EndArray();
  w->EndObject();
}

std::vector<const UOp*> NodesOf(const UOpPtr& root) {
  if (!root) return {};
  return Toposort(absl::Span<const UOpPtr>(&root, 1));
}

absl::Status CheckSize(size_t nodes) {
  if (nodes > kMaxVizJsonNodes) {
    return absl::OutOfRangeError(absl::StrCat("graph: ", nodes, " nodes, over the viewer's limit of ",
                                                     kMaxVizJsonNodes));
  }
  return absl::OkStatus();
}

void Graph(Writer* w, const UOpPtr& root, const std::vector<const UOp*>& nodes) {
  w->StartObject();
  w->Key("root");
  if (root) {
    w->Uint64(root->id());
  } else {
    w->Null();
  }
  w->Key("nodes");
  w->StartArray();
  for (const UOp* u : nodes) {
    w->StartObject();
    w->Key("id");
    w->Uint64(u->id());
    w->Key("op");
    Str(w, OpName(u->op()));
    w->Key("dtype");
    Str(w, u->dtype().Name());
    w->Key("arg");
    Str(w, ArgText(*u));
    w->Key("src");
    w->StartArray();
    for (const UOpPtr& s : u->src()) w->Uint64(s->id());
    w->EndArray();
    w->EndObject();
  }
  w->EndArray();
  w->EndObject();
}

absl::flat_hash_set<uint64_t> IdsOf(const std::vector<const UOp*>& nodes) {
  absl::flat_hash_set<uint64_t> out;
  for (const UOp* u : nodes) out.insert(u->id());
  return out;
}

// Ids under `root` that are in `in` and not in `not_in`.
void Diff(Writer* w, const UOpPtr& root, const absl::flat_hash_set<uint64_t>& in,
          const absl::flat_hash_set<uint64_t>& not_in) {
  w->StartArray();
  if (root && in.contains(root->id())) {
    for (const UOp* u : NodesOf(root)) {
      if (in.contains(u->id()) && !not_in.contains(u->id())) w->Uint64(u->id());
    }
  }
  w->EndArray();
}

// Passes of no kernel, newest last (at most this many listed).
constexpr size_t kMaxOtherPasses = 2000;

}  // namespace

bool Enabled() { return KernelLog::Enabled(); }

void SetCapacity(size_t kernels) {
  KernelLog::Get().SetCapacity(kernels);
  RewriteTrace::Get().SetCapacity(std::max<size_t>(4096, 64 * kernels), std::max<size_t>(65536, 1024 * kernels));
}

std::string KernelsJson() {
  const std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  const std::vector<TracedPass> passes = RewriteTrace::Get().Passes();
  rapidjson::StringBuffer b;
  Writer w(b);
  w.StartObject();
  w.Key("enabled");
  w.Bool(Enabled());
  w.Key("capacity");
  w.Uint64(KernelLog::Get().capacity());
  w.Key("dropped");
  w.Int64(KernelLog::Get().dropped());
  w.Key("kernels");
  w.StartArray();
  for (const LoggedKernel& k : kernels) {
    size_t n = 0;
    for (const TracedPass& p : passes) n += p.group == k.id ? 1 : 0;
    w.StartObject();
    KernelSummary(&w, k, n);
    w.EndObject();
  }
  w.EndArray();
  w.Key("other_passes");
  w.StartArray();
  std::vector<const TracedPass*> other;
  for (const TracedPass& p : passes) {
    if (p.group == 0) other.push_back(&p);
  }
  const size_t skip = other.size() > kMaxOtherPasses ? other.size() - kMaxOtherPasses : 0;
  for (size_t i = skip; i < other.size(); ++i) {
    w.StartObject();
    PassSummary(&w, *other[i]);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Done(b);
}

absl::StatusOr<std::string> KernelJson(int64_t id) {
  LoggedKernel k;
  if (!KernelLog::Get().Find(id, &k)) {
    return absl::NotFoundError(absl::StrCat("kernel ", id, ": not in the VIZ log (it keeps the last ",
                                            KernelLog::Get().capacity(), " compiles)"));
  }
  const std::vector<TracedPass> passes = RewriteTrace::Get().PassesOf(id);
  rapidjson::StringBuffer b;
  Writer w(b);
  w.StartObject();
  KernelSummary(&w, k, passes.size());
  w.Key("ast");
  Str(&w, k.ast ? PrintGraph(k.ast) : std::string());
  w.Key("source");
  Str(&w, k.source);
  w.Key("beam");
  Beam(&w, k.beam);
  w.Key("launches");
  w.StartArray();
  const int64_t now = SteadyNowNs();
  for (const LoggedLaunch& l : k.launches) {
    w.StartObject();
    w.Key("ago_ms");  // how long before this answer the launch started
    w.Double(static_cast<double>(now - l.start_ns) / 1e6);
    w.Key("dur_us");
    w.Double(l.seconds * 1e6);
    w.EndObject();
  }
  w.EndArray();
  w.Key("pass_list");
  w.StartArray();
  for (const TracedPass& p : passes) {
    w.StartObject();
    PassSummary(&w, p);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Done(b);
}

absl::StatusOr<std::string> PassJson(int64_t pass_id) {
  TracedPass p;
  if (!RewriteTrace::Get().FindPass(pass_id, &p)) {
    return absl::NotFoundError(absl::StrCat("pass ", pass_id, ": not in the rewrite trace"));
  }
  const std::vector<const UOp*> in_nodes = NodesOf(p.input);
  const std::vector<const UOp*> out_nodes = NodesOf(p.output);
  KILN_RETURN_IF_ERROR(CheckSize(std::max(in_nodes.size(), out_nodes.size())));
  const absl::flat_hash_set<uint64_t> in_ids = IdsOf(in_nodes);
  const absl::flat_hash_set<uint64_t> out_ids = IdsOf(out_nodes);
  const std::vector<TracedMatch> matches = RewriteTrace::Get().MatchesOf(pass_id);
  rapidjson::StringBuffer b;
  Writer w(b);
  w.StartObject();
  PassSummary(&w, p);
  w.Key("input");
  Graph(&w, p.input, in_nodes);
  w.Key("output");
  Graph(&w, p.output, out_nodes);
  w.Key("matches");
  w.StartArray();
  for (size_t i = 0; i < matches.size(); ++i) {
    const TracedMatch& m = matches[i];
    w.StartObject();
    w.Key("rule");
    Str(&w, m.rule);
    w.Key("matcher");
    Str(&w, m.matcher);
    w.Key("before");
    w.Uint64(m.before ? m.before->id() : 0);
    w.Key("after");
    w.Uint64(m.after ? m.after->id() : 0);
    w.Key("before_text");
    Str(&w, m.before ? PrintNode(*m.before) : std::string());
    w.Key("after_text");
    Str(&w, m.after ? PrintNode(*m.after) : std::string());
    w.Key("removed");
    if (i < kMaxDiffedMatches) {
      Diff(&w, m.before, in_ids, out_ids);
    } else {
      w.StartArray();
      w.EndArray();
    }
    w.Key("added");
    if (i < kMaxDiffedMatches) {
      Diff(&w, m.after, out_ids, in_ids);
    } else {
      w.StartArray();
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Done(b);
}

std::string TimelineJson() {
  const std::vector<LoggedKernel> kernels = KernelLog::Get().Kernels();
  int64_t origin = 0;
  for (const LoggedKernel& k : kernels) {
    for (const LoggedLaunch& l : k.launches) {
      if (origin == 0 || l.start_ns < origin) origin = l.start_ns;
    }
  }
  rapidjson::StringBuffer b;
  Writer w(b);
  w.StartObject();
  w.Key("traceEvents");
  w.StartArray();
  for (const LoggedKernel& k : kernels) {
    for (const LoggedLaunch& l : k.launches) {
      if (l.seconds < 0) continue;
      w.StartObject();
      w.Key("name");
      Str(&w, k.name);
      w.Key("cat");
      w.String("kernel");
      w.Key("ph");
      w.String("X");
      w.Key("ts");
      w.Double(static_cast<double>(l.start_ns - origin) / 1e3);
      w.Key("dur");
      w.Double(l.seconds * 1e6);
      w.Key("pid");
      w.Int(1);
      w.Key("tid");
      w.Int(1);
      w.Key("args");
      w.StartObject();
      w.Key("kernel_id");
      w.Int64(k.id);
      w.Key("device");
      Str(&w, k.device);
      w.Key("label");
      Str(&w, k.label);
      w.Key("bytes");
      w.Int64(k.bytes);
      w.Key("flops");
      w.Int64(k.flops);
      w.EndObject();
      w.EndObject();
    }
  }
  w.EndArray();
  w.Key("displayTimeUnit");
  w.String("ms");
  w.EndObject();
  return Done(b);
}

std::string HighlightJs() {
  static const std::string* const script = [] {
    std::ifstream f("/usr/share/javascript/highlight.js/highlight.min.js", std::ios::binary);
    std::stringstream ss;
    if (f) ss << f.rdbuf();
    return new std::string(ss.str());
  }();
  return *script;
}

}  // namespace kiln::api::viz
