// PatternMatcher: an ordered table of rewrite rules (UPat, callback, name), dispatched by the
// matched node's op (tinygrad's PatternMatcher / pdict).
//
// Construction compiles every rule: pattern names become small integer slots (at most
// kMaxBindings per rule), and each rule gets an early-reject set (ops that must appear among the
// node's direct sources, from single-op child patterns) that is checked before matching.
// Rewrite(u) tries the rules registered for u->op() in table order and returns the first result
// that is non-null and differs from u; each rule's callback is offered every complete binding of
// its pattern until it returns non-null. Matching allocates nothing on the heap.
//
// Stats: when TRACK_MATCH_STATS >= 1 every rule counts attempts (pattern tried), hits (callback
// returned a replacement) and time, aggregated process-wide by (matcher name, rule name). When
// TRACK_MATCH_STATS >= 2 every hit is also recorded in the rewrite trace (trace.h). With the knob
// at 0 the cost is one branch per Rewrite.
//
// Thread safety: a PatternMatcher is immutable after construction and may be used from many
// threads at once (stats counters are atomic). Callbacks must be thread-safe if so used.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/check.h"
#include "engine/rewrite/upat.h"
#include "engine/uop/uop.h"

namespace kiln {

namespace internal {
struct CompiledRule;
}  // namespace internal

// Maximum number of distinct names one rule's pattern may bind.
inline constexpr int kMaxBindings = 16;

// Captured names -> nodes, passed to callbacks. Valid only during the callback.
class Bindings {
 public:
  // The node bound to `name`; KILN_CHECKs that the pattern binds that name.
  const UOpPtr& operator[](std::string_view name) const;
  // The node bound to `name`, or nullptr if the pattern has no such name or it is unbound (a name
  // inside a UPat::Any alternative that did not match).
  const UOpPtr* Find(std::string_view name) const;
  // The ctx pointer passed to the rewrite (may be null).
  template <typename T>
  T* ctx() const {
    return static_cast<T*>(ctx_);
  }
  // The node the rule's root pattern matched (kiln addition; tinygrad passes it as a named var).
  const UOpPtr& root() const { return *root_; }

 private:
  friend class PatternMatcher;
  friend struct MatchState;
  const UOpPtr* slots_[kMaxBindings];
  const std::vector<std::string>* names_ = nullptr;
  void* ctx_ = nullptr;
  const UOpPtr* root_ = nullptr;
};

// A callback returns the replacement, or a null UOpPtr for "no match". Captureless lambdas are
// the norm.
using RewriteFn = std::function<UOpPtr(const Bindings&)>;

struct Rule {
  UPat pat;
  RewriteFn fn;
  std::string name;  // the trailing algebra comment, e.g. "x*1 -> x"
};

class PatternMatcher {
 public:
  // KILN_CHECKs that each pattern binds at most kMaxBindings names and nests sources at most
  // 8 wide in Src/SrcPerm tuples (both are properties of kiln's own rule tables).
  explicit PatternMatcher(std::vector<Rule> rules, std::string name = "");
  PatternMatcher(const PatternMatcher&) = default;
  PatternMatcher& operator=(const PatternMatcher&) = default;
  PatternMatcher(PatternMatcher&&) = default;
  PatternMatcher& operator=(PatternMatcher&&) = default;
  ~PatternMatcher();

  // Tries the rules for u->op() in order; returns the first non-null result that differs from u,
  // else null.
  UOpPtr Rewrite(const UOpPtr& u, void* ctx = nullptr) const;
  // Concatenation: a's rules, then b's (compiled rules and their stats are shared, not copied).
  // The result is named "a+b".
  friend PatternMatcher operator+(const PatternMatcher& a, const PatternMatcher& b);

  const std::string& name() const { return name_; }
  size_t num_rules() const { return rules_.size(); }

  // Internal: Rewrite with the TRACK_MATCH_STATS level already read (GraphRewrite reads the knob
  // once per pass). `pass_id` tags trace entries (0 = none). When `hit_rule` is non-null it receives the
  // rule that produced the result (untouched when the result is null).
  UOpPtr RewriteTracked(const UOpPtr& u, void* ctx, int track_level, int64_t pass_id,
                        const internal::CompiledRule** hit_rule = nullptr) const;

 private:
  PatternMatcher() = default;
  void Index();
  std::string name_;
  std::vector<std::shared_ptr<const internal::CompiledRule>> rules_;
  // Per op, the rules whose root pattern can match that op, in table order.
  std::array<std::vector<const internal::CompiledRule*>, kNumOps> by_op_;
  // Per op, whether any rule for it has a non-empty early-reject set.
  std::array<bool, kNumOps> needs_src_ops_{};
};

// ---- rule statistics (TRACK_MATCH_STATS >= 1) ----
struct RuleStats {
  std::string matcher;      // PatternMatcher name ("" if unnamed)
  std::string rule;         // Rule name, or the pattern's description if the rule is unnamed
  int64_t attempts = 0;     // times the pattern was tried (after early reject)
  int64_t hits = 0;         // times the callback returned a replacement
  int64_t time_ns = 0;      // total time in matching and callbacks
  int64_t hit_time_ns = 0;  // time of the attempts that hit
};
// A snapshot of every rule's counters, sorted by time_ns descending (rules never attempted are
// included with zeros).
std::vector<RuleStats> GetMatchStats();
// Zeroes every counter.
void ResetMatchStats();
// The stats as a text table sorted by time (top `limit` rows, 0 = all), with a total line.
std::string FormatMatchStats(size_t limit = 0);
// Writes FormatMatchStats() to stderr. Called at process exit when TRACK_MATCH_STATS >= 1 and
// DEBUG >= 2 (registered on first tracked rewrite).
void PrintMatchStats(size_t limit = 0);

}  // namespace kiln
