#include "engine/rewrite/pattern_matcher.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/base/env.h"
#include "engine/rewrite/stats_internal.h"
#include "engine/rewrite/trace.h"

namespace kiln {

namespace internal {

inline constexpr int kMaxPatSrc = 8;

// A pattern node compiled for matching: names resolved to slots, sources as raw pointers.
struct CPat {
  using SrcKind = UPatData::SrcKind;
  OpSet ops;
  bool any_op = true;
  absl::InlinedVector<DType, 2> dtypes;
  bool has_arg = false;
  Arg arg;
  bool has_const = false;
  bool const_is_int = false;
  int64_t const_int = 0;
  double const_float = 0.0;
  int slot = -1;
  SrcKind kind = SrcKind::kNone;
  int nsrc = 0;
  const CPat* src[kMaxPatSrc] = {};
  bool allow_any_len = false;
  std::vector<std::function<bool(const UOp&)>> preds;
  std::vector<const CPat*> any;
  // No alternatives, permutations or names anywhere below: matches at most one way, binds nothing.
  bool flat = false;
  OpSet early_reject;  // ops that must appear among a matched node's direct sources
};

struct CompiledRule {
  std::vector<std::unique_ptr<CPat>> nodes;  // owns every CPat of this rule
  const CPat* root = nullptr;
  std::vector<std::string> names;            // slot -> name
  RewriteFn fn;
  std::string name;                          // rule name (or pattern description)
  std::string matcher;                       // owning matcher's name at construction
  bool all_ops = false;                      // root can match any op
  OpSet root_ops;
  RuleCounters* counters = nullptr;
};

namespace {

bool SingleOp(const OpSet& s, Op* out) {
  int count = 0;
  for (int i = 0; i < kNumOps && count < 2; ++i) {
    if (s.Contains(static_cast<Op>(i))) {
      *out = static_cast<Op>(i);
      ++count;
    }
  }
  return count == 1;
}

class Compiler {
 public:
  explicit Compiler(CompiledRule* rule) : rule_(rule) {}

  const CPat* Compile(const UPat& pat) {
    const UPatData& d = pat.data();
    auto owned = std::make_unique<CPat>();
    CPat* c = owned.get();
    rule_->nodes.push_back(std::move(owned));
    for (const UPat& a : d.any) c->any.push_back(Compile(a));
    if (!d.any.empty()) {
      c->flat = false;
      return c;
    }
    c->ops = d.ops;
    c->any_op = d.ops.Empty();
    c->dtypes.assign(d.dtypes.begin(), d.dtypes.end());
    if (d.arg.has_value()) {
      c->has_arg = true;
      c->arg = *d.arg;
    }
    c->has_const = d.has_const;
    c->const_is_int = d.const_is_int;
    c->const_int = d.const_int;
    c->const_float = d.const_float;
    if (!d.name.empty()) c->slot = Slot(d.name);
    c->kind = d.src_kind;
    KILN_CHECK_MSG(d.src.size() <= kMaxPatSrc, "UPat source tuple wider than 8");
    c->nsrc = static_cast<int>(d.src.size());
    bool flat = c->slot < 0 && c->kind != CPat::SrcKind::kPerm;
    for (int i = 0; i < c->nsrc; ++i) {
      c->src[i] = Compile(d.src[i]);
      flat = flat && c->src[i]->flat;
    }
    c->flat = flat;
    c->allow_any_len = d.allow_any_len;
    c->preds = d.preds;
    if (c->kind == CPat::SrcKind::kExact || c->kind == CPat::SrcKind::kPerm) {
      for (int i = 0; i < c->nsrc; ++i) {
        Op op;
        if (c->src[i]->any.empty() && !c->src[i]->any_op && SingleOp(c->src[i]->ops, &op)) {
          c->early_reject.Add(op);
        }
      }
    }
    return c;
  }

 private:
  int Slot(const std::string& name) {
    for (size_t i = 0; i < rule_->names.size(); ++i) {
      if (rule_->names[i] == name) return static_cast<int>(i);
    }
    KILN_CHECK_MSG(rule_->names.size() < kMaxBindings, "UPat binds more than kMaxBindings names");
    rule_->names.push_back(name);
    return static_cast<int>(rule_->names.size()) - 1;
  }
  CompiledRule* rule_;
};

// Root ops of a compiled pattern; false = any op.
bool RootOps(const CPat* p, OpSet* out) {
  if (!p->any.empty()) {
    for (const CPat* a : p->any) {
      if (!RootOps(a, out)) return false;
    }
    return true;
  }
  if (p->any_op) return false;
  *out = out->Union(p->ops);
  return true;
}

}  // namespace
}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Matching: continuation-passing over an on-stack chain of goals, so every way a pattern can match
// is offered to the callback (tinygrad semantics) without heap allocation.

struct MatchState {
  Bindings b;
  const internal::CompiledRule* rule = nullptr;
  UOpPtr result;
  const UOpPtr*& slot(int i) { return b.slots_[i]; }
  const UOpPtr& root() const { return *b.root_; }
  void Start(const internal::CompiledRule* r, const UOpPtr& u, void* ctx) {
    rule = r;
    b.names_ = &r->names;
    b.ctx_ = ctx;
    b.root_ = &u;
    for (size_t i = 0; i < r->names.size(); ++i) b.slots_[i] = nullptr;
  }
};

namespace {

using internal::CPat;

// A pending piece of matching work: one (pattern, node) pair, or a run of a parent's sources.
struct Goal {
  bool seq = false;
  const CPat* p = nullptr;           // one: the pattern
  const UOpPtr* u = nullptr;         // one: the node
  const UOp* parent = nullptr;       // seq: whose sources
  const CPat* const* pats = nullptr; // seq: per-position patterns (null: repeat `p`)
  int i = 0, n = 0;                  // seq: next position, end
  const Goal* next = nullptr;
};

bool ConstEquals(const CPat* p, const UOp& n) {
  const Arg& a = n.arg();
  if (const int64_t* i = std::get_if<int64_t>(&a)) {
    return p->const_is_int ? *i == p->const_int : static_cast<double>(*i) == p->const_float;
  }
  if (const ConstFloat* f = std::get_if<ConstFloat>(&a)) return f->value == p->const_float;
  if (const bool* b = std::get_if<bool>(&a)) return (*b ? 1.0 : 0.0) == p->const_float;
  return false;
}

inline bool LocalMatch(const CPat* p, const UOp& n) {
  if (!p->any_op && !p->ops.Contains(n.op())) return false;
  if (!p->dtypes.empty()) {
    DType d = n.dtype();
    bool ok = false;
    for (DType x : p->dtypes) {
      if (x == d || (d.count > 1 && !d.is_ptr && x == d.Scalar())) {
        ok = true;
        break;
      }
    }
    if (!ok) return false;
  }
  if (p->has_const && (n.op() != Op::CONST || !ConstEquals(p, n))) return false;
  if (p->has_arg && !(n.arg() == p->arg)) return false;
  for (const auto& pred : p->preds) {
    if (!pred(n)) return false;
  }
  return true;
}

bool LenOk(const CPat* p, size_t ns) {
  return p->allow_any_len ? ns >= static_cast<size_t>(p->nsrc) : ns == static_cast<size_t>(p->nsrc);
}

// Matches a flat pattern (at most one way, no bindings).
bool MatchFlat(const CPat* p, const UOp& n) {
  if (!LocalMatch(p, n)) return false;
  switch (p->kind) {
    case CPat::SrcKind::kNone:
      return true;
    case CPat::SrcKind::kExact:
      if (!LenOk(p, n.num_src())) return false;
      for (int i = 0; i < p->nsrc; ++i) {
        if (!MatchFlat(p->src[i], *n.src(i))) return false;
      }
      return true;
    case CPat::SrcKind::kRepeat:
      for (const UOpPtr& s : n.src()) {
        if (!MatchFlat(p->src[0], *s)) return false;
      }
      return true;
    case CPat::SrcKind::kPerm:
      return false;  // never flat
  }
  return false;
}

bool Solve(const Goal* g, MatchState& st);

bool Accept(MatchState& st) {
  UOpPtr r = st.rule->fn(st.b);
  if (r && r != st.root()) {
    st.result = std::move(r);
    return true;
  }
  return false;
}

bool SolveSrc(const CPat* p, const UOp& n, const Goal* next, MatchState& st) {
  size_t ns = n.num_src();
  switch (p->kind) {
    case CPat::SrcKind::kNone:
      return Solve(next, st);
    case CPat::SrcKind::kExact: {
      if (!LenOk(p, ns)) return false;
      if (p->nsrc == 0) return Solve(next, st);
      Goal seq;
      seq.seq = true;
      seq.parent = &n;
      seq.pats = p->src;
      seq.n = p->nsrc;
      seq.next = next;
      return Solve(&seq, st);
    }
    case CPat::SrcKind::kPerm: {
      if (!LenOk(p, ns)) return false;
      if (p->nsrc == 0) return Solve(next, st);
      uint8_t perm[internal::kMaxPatSrc];
      for (int i = 0; i < p->nsrc; ++i) perm[i] = static_cast<uint8_t>(i);
      const CPat* pats[internal::kMaxPatSrc];
      do {
        for (int i = 0; i < p->nsrc; ++i) pats[i] = p->src[perm[i]];
        Goal seq;
        seq.seq = true;
        seq.parent = &n;
        seq.pats = pats;
        seq.n = p->nsrc;
        seq.next = next;
        if (Solve(&seq, st)) return true;
      } while (std::next_permutation(perm, perm + p->nsrc));
      return false;
    }
    case CPat::SrcKind::kRepeat: {
      if (ns == 0) return Solve(next, st);
      if (p->src[0]->flat) {
        for (const UOpPtr& s : n.src()) {
          if (!MatchFlat(p->src[0], *s)) return false;
        }
        return Solve(next, st);
      }
      Goal seq;
      seq.seq = true;
      seq.parent = &n;
      seq.p = p->src[0];
      seq.n = static_cast<int>(ns);
      seq.next = next;
      return Solve(&seq, st);
    }
  }
  return false;
}

bool SolveOne(const CPat* p, const UOpPtr* u, const Goal* next, MatchState& st) {
  if (!p->any.empty()) {
    for (const CPat* a : p->any) {
      if (SolveOne(a, u, next, st)) return true;
    }
    return false;
  }
  if (p->flat) return MatchFlat(p, **u) && Solve(next, st);
  if (!LocalMatch(p, **u)) return false;
  bool bound_here = false;
  if (p->slot >= 0) {
    const UOpPtr* cur = st.slot(p->slot);
    if (cur != nullptr) {
      if (*cur != *u) return false;
    } else {
      st.slot(p->slot) = u;
      bound_here = true;
    }
  }
  bool r = SolveSrc(p, **u, next, st);
  if (bound_here) st.slot(p->slot) = nullptr;
  return r;
}

bool Solve(const Goal* g, MatchState& st) {
  if (g == nullptr) return Accept(st);
  if (!g->seq) return SolveOne(g->p, g->u, g->next, st);
  if (g->i == g->n) return Solve(g->next, st);
  Goal rest = *g;
  ++rest.i;
  const CPat* p = g->pats != nullptr ? g->pats[g->i] : g->p;
  return SolveOne(p, &g->parent->src(static_cast<size_t>(g->i)), &rest, st);
}

inline bool TryRule(const internal::CompiledRule* rule, const UOpPtr& u, void* ctx,
                    MatchState& st) {
  st.Start(rule, u, ctx);
  return SolveOne(rule->root, &u, nullptr, st);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

const UOpPtr& Bindings::operator[](std::string_view name) const {
  const UOpPtr* p = Find(name);
  KILN_CHECK_MSG(p != nullptr, "Bindings: name not bound by the pattern");
  return *p;
}

const UOpPtr* Bindings::Find(std::string_view name) const {
  if (names_ == nullptr) return nullptr;
  for (size_t i = 0; i < names_->size(); ++i) {
    if ((*names_)[i] == name) return slots_[i];
  }
  return nullptr;
}

PatternMatcher::PatternMatcher(std::vector<Rule> rules, std::string name) : name_(std::move(name)) {
  rules_.reserve(rules.size());
  for (Rule& r : rules) {
    auto cr = std::make_shared<internal::CompiledRule>();
    internal::Compiler compiler(cr.get());
    cr->root = compiler.Compile(r.pat);
    cr->fn = std::move(r.fn);
    cr->name = r.name.empty() ? r.pat.ToString() : std::move(r.name);
    cr->matcher = name_;
    cr->all_ops = !internal::RootOps(cr->root, &cr->root_ops);
    cr->counters = internal::GetRuleCounters(cr->matcher, cr->name);
    rules_.push_back(std::move(cr));
  }
  Index();
}

PatternMatcher::~PatternMatcher() = default;

void PatternMatcher::Index() {
  for (auto& v : by_op_) v.clear();
  needs_src_ops_.fill(false);
  for (const auto& r : rules_) {
    for (int i = 0; i < kNumOps; ++i) {
      Op op = static_cast<Op>(i);
      if (r->all_ops || r->root_ops.Contains(op)) {
        by_op_[i].push_back(r.get());
        if (!r->root->early_reject.Empty()) needs_src_ops_[i] = true;
      }
    }
  }
}

PatternMatcher operator+(const PatternMatcher& a, const PatternMatcher& b) {
  PatternMatcher out;
  out.name_ = a.name_.empty() ? b.name_ : b.name_.empty() ? a.name_ : absl::StrCat(a.name_, "+", b.name_);
  out.rules_ = a.rules_;
  out.rules_.insert(out.rules_.end(), b.rules_.begin(), b.rules_.end());
  out.Index();
  return out;
}

UOpPtr PatternMatcher::Rewrite(const UOpPtr& u, void* ctx) const {
  return RewriteTracked(u, ctx, static_cast<int>(GetKnob(Knob::kTrackMatchStats)), 0);
}

const std::string& internal::RuleName(const CompiledRule* r) { return r->name; }
const std::string& internal::RuleMatcher(const CompiledRule* r) { return r->matcher; }

UOpPtr PatternMatcher::RewriteTracked(const UOpPtr& u, void* ctx, int track_level, int64_t pass_id,
                                      const internal::CompiledRule** hit_rule) const {
  const int op = static_cast<int>(u->op());
  const auto& rules = by_op_[op];
  if (rules.empty()) return nullptr;
  OpSet src_ops;
  if (needs_src_ops_[op]) {
    for (const UOpPtr& s : u->src()) src_ops.Add(s->op());
  }
  MatchState st;
  if (track_level <= 0) {
    for (const internal::CompiledRule* r : rules) {
      if (!r->root->early_reject.SubsetOf(src_ops)) continue;
      if (TryRule(r, u, ctx, st)) {
        if (hit_rule != nullptr) *hit_rule = r;
        return std::move(st.result);
      }
    }
    return nullptr;
  }
  internal::MaybeRegisterExitPrint();
  using Clock = std::chrono::steady_clock;
  for (const internal::CompiledRule* r : rules) {
    if (!r->root->early_reject.SubsetOf(src_ops)) continue;
    auto t0 = Clock::now();
    bool hit = TryRule(r, u, ctx, st);
    int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    r->counters->attempts.fetch_add(1, std::memory_order_relaxed);
    r->counters->time_ns.fetch_add(ns, std::memory_order_relaxed);
    if (hit) {
      r->counters->hits.fetch_add(1, std::memory_order_relaxed);
      r->counters->hit_time_ns.fetch_add(ns, std::memory_order_relaxed);
      if (track_level >= 2) {
        RewriteTrace::Get().RecordMatch(pass_id != 0 ? pass_id : RewriteTrace::CurrentPass(),
                                        r->matcher, r->name, u, st.result);
      }
      if (hit_rule != nullptr) *hit_rule = r;
      return std::move(st.result);
    }
  }
  return nullptr;
}

}  // namespace kiln
