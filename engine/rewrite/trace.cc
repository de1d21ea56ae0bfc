#include "engine/rewrite/trace.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {
thread_local std::vector<int64_t> open_passes;
thread_local int64_t current_group = 0;
}  // namespace

ScopedTraceGroup::ScopedTraceGroup(int64_t group) : previous_(current_group) { current_group = group; }
ScopedTraceGroup::~ScopedTraceGroup() { current_group = previous_; }

int64_t RewriteTrace::CurrentGroup() { return current_group; }

std::vector<TracedPass> RewriteTrace::PassesOf(int64_t group) const {
  absl::MutexLock lock(&mu_);
  std::vector<TracedPass> out;
  for (const TracedPass& p : passes_) {
    if (p.group == group) out.push_back(p);
  }
  return out;
}

bool RewriteTrace::FindPass(int64_t id, TracedPass* out) const {
  absl::MutexLock lock(&mu_);
  for (auto it = passes_.rbegin(); it != passes_.rend(); ++it) {
    if (it->id == id) {
      *out = *it;
      return true;
    }
    if (it->id < id) break;
  }
  return false;
}

RewriteTrace& RewriteTrace::Get() {
  static RewriteTrace* t = new RewriteTrace();
  return *t;
}

int64_t RewriteTrace::BeginPass(std::string name, std::string matcher, std::string mode,
                                UOpPtr input) {
  TracedPass p;
  p.name = std::move(name);
  p.matcher = std::move(matcher);
  p.mode = std::move(mode);
  p.depth = static_cast<int>(open_passes.size());
  p.group = current_group;
  p.input = std::move(input);
  int64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = p.id = next_id_++;
    passes_.push_back(std::move(p));
    while (passes_.size() > max_passes_) {
      passes_.pop_front();
      ++dropped_passes_;
    }
  }
  open_passes.push_back(id);
  return id;
}

void RewriteTrace::EndPass(int64_t id, UOpPtr output, bool ok, std::string error) {
  if (!open_passes.empty() && open_passes.back() == id) open_passes.pop_back();
  absl::MutexLock lock(&mu_);
  // Passes are ordered by id; search from the back (the pass usually is the newest).
  for (auto it = passes_.rbegin(); it != passes_.rend(); ++it) {
    if (it->id == id) {
      it->output = std::move(output);
      it->ok = ok;
      it->error = std::move(error);
      return;
    }
    if (it->id < id) return;  // dropped
  }
}

int64_t RewriteTrace::CurrentPass() { return open_passes.empty() ? 0 : open_passes.back(); }

void RewriteTrace::RecordMatch(int64_t pass_id, const std::string& matcher,
                               const std::string& rule, UOpPtr before, UOpPtr after) {
  TracedMatch m;
  m.pass_id = pass_id;
  m.matcher = matcher;
  m.rule = rule;
  m.before = std::move(before);
  m.after = std::move(after);
  absl::MutexLock lock(&mu_);
  for (auto it = passes_.rbegin(); it != passes_.rend(); ++it) {
    if (it->id == pass_id) {
      ++it->num_matches;
      break;
    }
    if (it->id < pass_id) break;
  }
  matches_.push_back(std::move(m));
  while (matches_.size() > max_matches_) {
    matches_.pop_front();
    ++dropped_matches_;
  }
}

std::vector<TracedPass> RewriteTrace::Passes() const {
  absl::MutexLock lock(&mu_);
  return std::vector<TracedPass>(passes_.begin(), passes_.end());
}

std::vector<TracedMatch> RewriteTrace::Matches() const {
  absl::MutexLock lock(&mu_);
  return std::vector<TracedMatch>(matches_.begin(), matches_.end());
}

std::vector<TracedMatch> RewriteTrace::MatchesOf(int64_t pass_id) const {
  absl::MutexLock lock(&mu_);
  std::vector<TracedMatch> out;
  for (const TracedMatch& m : matches_) {
    if (m.pass_id == pass_id) out.push_back(m);
  }
  return out;
}

int64_t RewriteTrace::dropped_passes() const {
  absl::MutexLock lock(&mu_);
  return dropped_passes_;
}

int64_t RewriteTrace::dropped_matches() const {
  absl::MutexLock lock(&mu_);
  return dropped_matches_;
}

std::string RewriteTrace::Format(size_t matches_per_pass) const {
  std::vector<TracedPass> passes = Passes();
  std::vector<TracedMatch> matches = matches_per_pass > 0 ? Matches() : std::vector<TracedMatch>{};
  std::string out;
  for (const TracedPass& p : passes) {
    absl::StrAppendFormat(&out, "%*s#%d %s [%s, %s]: %d matches%s\n", 2 * p.depth, "", p.id,
                          p.name.empty() ? "<unnamed>" : p.name, p.matcher, p.mode,
                          p.num_matches, p.ok ? "" : absl::StrCat(" FAILED ", p.error));
    size_t shown = 0;
    for (const TracedMatch& m : matches) {
      if (m.pass_id != p.id || shown >= matches_per_pass) continue;
      ++shown;
      absl::StrAppendFormat(&out, "%*s  %s: %s -> %s\n", 2 * p.depth, "", m.rule,
                            std::string(OpName(m.before->op())),
                            std::string(OpName(m.after->op())));
    }
  }
  return out;
}

absl::StatusOr<UOpPtr> ReplayMatches(const UOpPtr& input, absl::Span<const TracedMatch> matches) {
  UOpPtr graph = input;
  for (size_t step = 0; step < matches.size(); ++step) {
    const TracedMatch& m = matches[step];
    bool found = false;
    absl::flat_hash_map<const UOp*, UOpPtr> now;  // node of the graph so far -> after this step
    for (const UOp* u : Toposort(graph)) {
      if (u == m.before.get()) {
        found = true;
        now[u] = m.after;
        continue;
      }
      UOpVec src;
      bool changed = false;
      for (const UOpPtr& s : u->src()) {
        src.push_back(now.at(s.get()));
        changed = changed || src.back() != s;
      }
      if (!changed) {
        now[u] = UOpPtr::FromRaw(u);
        continue;
      }
      absl::StatusOr<UOpPtr> rebuilt = UOp::Create(u->op(), u->dtype(), src, u->arg(), u->tag());
      if (!rebuilt.ok()) {
        return absl::Status(rebuilt.status().code(),
                            absl::StrCat("replay step ", step, " (", m.rule,
                                         "): ", rebuilt.status().message()));
      }
      now[u] = *std::move(rebuilt);
    }
    if (!found) {
      return absl::FailedPreconditionError(absl::StrCat("replay step ", step, " (", m.rule,
                                                        "): its node ", m.before->id(),
                                                        " is not in the graph"));
    }
    graph = now.at(graph.get());
  }
  return graph;
}

void RewriteTrace::Clear() {
  absl::MutexLock lock(&mu_);
  passes_.clear();
  matches_.clear();
  dropped_passes_ = 0;
  dropped_matches_ = 0;
}

void RewriteTrace::SetCapacity(size_t max_passes, size_t max_matches) {
  absl::MutexLock lock(&mu_);
  max_passes_ = max_passes;
  max_matches_ = max_matches;
  while (passes_.size() > max_passes_) {
    passes_.pop_front();
    ++dropped_passes_;
  }
  while (matches_.size() > max_matches_) {
    matches_.pop_front();
    ++dropped_matches_;
  }
}

}  // namespace kiln
