#include "engine/rewrite/rewrite_stats.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {

std::string Key(std::string_view a, std::string_view b, std::string_view c = {}) {
  // absl may have its own string_view type: append the bytes.
  std::string k = absl::StrCat(a.size(), ":");
  k.append(a);
  absl::StrAppend(&k, b.size(), ":");
  k.append(b);
  k.append(c);
  return k;
}

}  // namespace

void RewriteStats::AddPass(std::string_view pass, std::string_view matcher, int64_t rewrites) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = pass_index_.try_emplace(Key(pass, matcher), passes_.size());
  if (inserted) passes_.push_back(PassRow{std::string(pass), std::string(matcher), 0, 0});
  PassRow& row = passes_[it->second];
  ++row.runs;
  if (rewrites < 0 || row.rewrites < 0) {
    row.rewrites = -1;
  } else {
    row.rewrites += rewrites;
  }
}

void RewriteStats::AddHits(std::string_view pass, std::string_view rule_matcher, std::string_view rule,
                           int64_t n) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = rule_index_.try_emplace(Key(pass, rule_matcher, rule), rules_.size());
  if (inserted) rules_.push_back(RuleRow{std::string(pass), std::string(rule_matcher), std::string(rule), 0});
  rules_[it->second].hits += n;
}

int64_t RewriteStats::Hits(std::string_view pass, std::string_view rule) const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const RuleRow& r : rules_) {
    if (r.pass == pass && r.rule == rule) n += r.hits;
  }
  return n;
}

int64_t RewriteStats::PassRewrites(std::string_view pass) const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const PassRow& p : passes_) {
    if (p.pass == pass && p.rewrites > 0) n += p.rewrites;
  }
  return n;
}

bool RewriteStats::Ran(std::string_view pass) const {
  absl::MutexLock lock(&mu_);
  for (const PassRow& p : passes_) {
    if (p.pass == pass) return true;
  }
  return false;
}

void RewriteStats::Merge(const RewriteStats& other) {
  std::vector<PassRow> passes = other.Passes();
  std::vector<RuleRow> rules = other.Rules();
  absl::MutexLock lock(&mu_);
  for (const PassRow& p : passes) {
    auto [it, inserted] = pass_index_.try_emplace(Key(p.pass, p.matcher), passes_.size());
    if (inserted) passes_.push_back(PassRow{p.pass, p.matcher, 0, 0});
    PassRow& row = passes_[it->second];
    row.runs += p.runs;
    row.rewrites = p.rewrites < 0 || row.rewrites < 0 ? -1 : row.rewrites + p.rewrites;
  }
  for (const RuleRow& r : rules) {
    auto [it, inserted] = rule_index_.try_emplace(Key(r.pass, r.matcher, r.rule), rules_.size());
    if (inserted) rules_.push_back(RuleRow{r.pass, r.matcher, r.rule, 0});
    rules_[it->second].hits += r.hits;
  }
}

std::vector<RewriteStats::PassRow> RewriteStats::Passes() const {
  absl::MutexLock lock(&mu_);
  return passes_;
}

std::vector<RewriteStats::RuleRow> RewriteStats::Rules() const {
  absl::MutexLock lock(&mu_);
  return rules_;
}

std::string RewriteStats::Format() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  std::vector<std::string_view> names;  // pass names, first-seen order
  for (const PassRow& p : passes_) {
    if (std::find(names.begin(), names.end(), p.pass) == names.end()) names.push_back(p.pass);
  }
  for (std::string_view name : names) {
    for (const PassRow& p : passes_) {
      if (p.pass != name) continue;
      absl::StrAppendFormat(&out, "pass '%s' [%s]: %d run%s", p.pass, p.matcher.empty() ? "<unnamed>" : p.matcher,
                            p.runs, p.runs == 1 ? "" : "s");
      if (p.rewrites >= 0) absl::StrAppendFormat(&out, ", %d rewrite%s", p.rewrites, p.rewrites == 1 ? "" : "s");
      out += "\n";
    }
    for (const RuleRow& r : rules_) {
      if (r.pass != name) continue;
      absl::StrAppendFormat(&out, "  %10d  %s: %s\n", r.hits, r.matcher.empty() ? "<unnamed>" : r.matcher, r.rule);
    }
  }
  return out;
}

void RewriteStats::Clear() {
  absl::MutexLock lock(&mu_);
  passes_.clear();
  rules_.clear();
  pass_index_.clear();
  rule_index_.clear();
}

}  // namespace kiln
