// Internal to engine/rewrite: the process-wide per-rule counters behind GetMatchStats().
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace kiln::internal {

struct RuleCounters {
  std::string matcher;
  std::string rule;
  std::atomic<int64_t> attempts{0};
  std::atomic<int64_t> hits{0};
  std::atomic<int64_t> time_ns{0};
  std::atomic<int64_t> hit_time_ns{0};
};

// The counters for (matcher, rule), created on first request and never freed (one entry per
// distinct name pair, so PatternMatchers rebuilt with the same names share counters).
RuleCounters* GetRuleCounters(const std::string& matcher, const std::string& rule);

struct CompiledRule;
// A compiled rule's name and the name of the matcher it was built in (for RewriteStats rows).
const std::string& RuleName(const CompiledRule* r);
const std::string& RuleMatcher(const CompiledRule* r);

// Registers PrintMatchStats at exit (once) when DEBUG >= 2.
void MaybeRegisterExitPrint();

}  // namespace kiln::internal
