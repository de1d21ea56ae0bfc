#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/env.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/rewrite/stats_internal.h"

namespace kiln {
namespace internal {
namespace {

struct Registry {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, std::unique_ptr<RuleCounters>> by_key ABSL_GUARDED_BY(mu);
  std::vector<RuleCounters*> order ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

RuleCounters* GetRuleCounters(const std::string& matcher, const std::string& rule) {
  Registry& r = GetRegistry();
  std::string key = absl::StrCat(matcher.size(), ":", matcher, rule);
  absl::MutexLock lock(&r.mu);
  auto& slot = r.by_key[key];
  if (slot == nullptr) {
    slot = std::make_unique<RuleCounters>();
    slot->matcher = matcher;
    slot->rule = rule;
    r.order.push_back(slot.get());
  }
  return slot.get();
}

void MaybeRegisterExitPrint() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit([] {
      if (DebugLevel() >= 2) PrintMatchStats(50);
    });
  });
}

}  // namespace internal

std::vector<RuleStats> GetMatchStats() {
  internal::Registry& r = internal::GetRegistry();
  std::vector<RuleStats> out;
  {
    absl::MutexLock lock(&r.mu);
    out.reserve(r.order.size());
    for (const internal::RuleCounters* c : r.order) {
      RuleStats s;
      s.matcher = c->matcher;
      s.rule = c->rule;
      s.attempts = c->attempts.load(std::memory_order_relaxed);
      s.hits = c->hits.load(std::memory_order_relaxed);
      s.time_ns = c->time_ns.load(std::memory_order_relaxed);
      s.hit_time_ns = c->hit_time_ns.load(std::memory_order_relaxed);
      out.push_back(std::move(s));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const RuleStats& a, const RuleStats& b) { return a.time_ns > b.time_ns; });
  return out;
}

void ResetMatchStats() {
  internal::Registry& r = internal::GetRegistry();
  absl::MutexLock lock(&r.mu);
  for (internal::RuleCounters* c : r.order) {
    c->attempts = 0;
    c->hits = 0;
    c->time_ns = 0;
    c->hit_time_ns = 0;
  }
}

std::string FormatMatchStats(size_t limit) {
  std::vector<RuleStats> stats = GetMatchStats();
  std::string out = absl::StrFormat("%10s %10s %10s %10s  %s\n", "hits", "attempts", "ms",
                                    "hit ms", "matcher: rule");
  int64_t hits = 0, attempts = 0, ns = 0, hit_ns = 0;
  size_t shown = 0;
  for (const RuleStats& s : stats) {
    hits += s.hits;
    attempts += s.attempts;
    ns += s.time_ns;
    hit_ns += s.hit_time_ns;
    if (s.attempts == 0 || (limit != 0 && shown >= limit)) continue;
    ++shown;
    absl::StrAppendFormat(&out, "%10d %10d %10.3f %10.3f  %s: %s\n", s.hits, s.attempts,
                          s.time_ns / 1e6, s.hit_time_ns / 1e6,
                          s.matcher.empty() ? "<unnamed>" : s.matcher, s.rule);
  }
  absl::StrAppendFormat(&out, "%10d %10d %10.3f %10.3f  TOTAL (%d rules)\n", hits, attempts,
                        ns / 1e6, hit_ns / 1e6, stats.size());
  return out;
}

void PrintMatchStats(size_t limit) {
  std::string s = FormatMatchStats(limit);
  std::fwrite(s.data(), 1, s.size(), stderr);
}

}  // namespace kiln
