#include "engine/rewrite/graph_rewrite.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/base/check.h"
#include "engine/base/status.h"
#include "engine/base/env.h"
#include "engine/rewrite/stats_internal.h"
#include "engine/rewrite/trace.h"

namespace kiln {
namespace {

// Owner ids for UOp::rewrite_mark. A live rewrite holds slot id % kSlots of a global table, so
// any rewrite can tell whether a mark's owner is still running (and must not be overwritten).
// With every slot busy a rewrite runs without marks (id 0: hash map only).
class RewriteOwner {
 public:
  static constexpr uint32_t kSlots = 4096;
  RewriteOwner() {
    for (int tries = 0; tries < 64; ++tries) {
      uint32_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
      if (id == 0) continue;
      uint32_t expected = 0;
      if (live_[id % kSlots].compare_exchange_strong(expected, id, std::memory_order_acq_rel)) {
        id_ = id;
        return;
      }
    }
  }
  ~RewriteOwner() {
    if (id_ != 0) live_[id_ % kSlots].store(0, std::memory_order_release);
  }
  RewriteOwner(const RewriteOwner&) = delete;
  RewriteOwner& operator=(const RewriteOwner&) = delete;
  uint32_t id() const { return id_; }
  static bool IsLive(uint32_t id) {
    return id != 0 && live_[id % kSlots].load(std::memory_order_acquire) == id;
  }

 private:
  uint32_t id_ = 0;
  static inline std::atomic<uint32_t> next_id_{1};
  static inline std::atomic<uint32_t> live_[kSlots] = {};
};

// Per node: `key` keeps the node alive while it is known (a freed node's address could be reused
// by a different node); `result` is its final replacement, null while in progress.
struct Entry {
  UOpPtr key;
  UOpPtr result;
};

class Rewriter {
 public:
  Rewriter(const PatternMatcher* pm, const PatternMatcher* bpm, const RewriteOptions& opts,
           int track, int64_t pass_id)
      : pm_(pm), bpm_(bpm), opts_(opts), track_(track), pass_id_(pass_id) {}

  absl::StatusOr<UOpPtr> FixedPoint(const UOpPtr& root);
  UOpPtr Walk(const UOpPtr& root);

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // Work items address memo entries by index, so only discovering a node hashes it.
  struct Item {
    UOpPtr n;        // stage 0: the node to process; stages 1-2: unused (null)
    uint32_t idx;    // memo index of the node whose replacement this item computes
    uint8_t stage;
    int64_t depth;   // consecutive rewrites leading to the node (fixed-point iterations)
    // stage 1: n after bpm (held by its memo entry if it differs from n) and the offset of its
    //          sources' memo indices in arena_;
    // stage 2: the memo index of the node n was rewritten or rebuilt to.
    const UOp* new_n = nullptr;
    uint32_t aux = 0;
    // Stages 1-2 after bpm rewrote n: the memo index of the bpm fixed point, which gets n's
    // final result too (so it is not offered to bpm again when a rebuilt parent reaches it).
    uint32_t alias = kNone;
  };

  // The memo index of u, or kNone if u is not known to this rewrite. The node's rewrite_mark is
  // a hint (owner id, index), verified against the entry's key, so stale or foreign marks are
  // harmless; nodes whose mark another live rewrite owns are kept in fallback_.
  uint32_t Known(const UOp* u, uint64_t m) const {
    uint32_t idx = static_cast<uint32_t>(m);
    if ((m >> 32) == owner_.id() && idx < entries_.size() && entries_[idx].key.get() == u) return idx;
    if (!fallback_.empty()) {
      auto it = fallback_.find(u);
      if (it != fallback_.end()) return it->second;
    }
    return kNone;
  }
  uint32_t Known(const UOp* u) const {
    return Known(u, u->rewrite_mark().load(std::memory_order_relaxed));
  }
  // The memo index of u, adding it (in progress) if new.
  uint32_t Mark(const UOpPtr& u, bool* inserted = nullptr) {
    uint64_t m = u->rewrite_mark().load(std::memory_order_relaxed);
    uint32_t idx = Known(u.get(), m);
    if (inserted != nullptr) *inserted = idx == kNone;
    if (idx != kNone) return idx;
    idx = static_cast<uint32_t>(entries_.size());
    entries_.push_back(Entry{u, nullptr});
    uint32_t owner = static_cast<uint32_t>(m >> 32);
    if (owner_.id() != 0 && (owner == owner_.id() || !RewriteOwner::IsLive(owner)) &&
        u->rewrite_mark().compare_exchange_strong(m, (uint64_t{owner_.id()} << 32) | idx,
                                                  std::memory_order_relaxed)) {
      return idx;
    }
    fallback_.emplace(u.get(), idx);
    return idx;
  }
  void Finish(uint32_t idx, UOpPtr result, uint32_t alias) {
    if (alias != kNone && !entries_[alias].result) entries_[alias].result = result;
    entries_[idx].result = std::move(result);
  }
  UOpPtr Apply(const PatternMatcher* m, const UOpPtr& u) {
    if (opts_.stats == nullptr) return m->RewriteTracked(u, opts_.ctx, track_, pass_id_);
    const internal::CompiledRule* hit = nullptr;
    UOpPtr r = m->RewriteTracked(u, opts_.ctx, track_, pass_id_, &hit);
    if (r) ++hits_[hit];
    return r;
  }

 public:
  // Adds this run's pass row and rule hits to opts.stats (no-op without a sink).
  void FlushStats(const PatternMatcher& pm) const {
    if (opts_.stats == nullptr) return;
    int64_t total = 0;
    for (const auto& [rule, n] : hits_) total += n;
    opts_.stats->AddPass(opts_.name, pm.name(), total);
    // Rules in the matcher's table order would need the table; first-hit order is not kept by the map, so sort
    // by (matcher, rule) names for a deterministic listing.
    std::vector<std::pair<const internal::CompiledRule*, int64_t>> rows(hits_.begin(), hits_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      const std::string &ma = internal::RuleMatcher(a.first), &mb = internal::RuleMatcher(b.first);
      return ma != mb ? ma < mb : internal::RuleName(a.first) < internal::RuleName(b.first);
    });
    for (const auto& [rule, n] : rows) {
      opts_.stats->AddHits(opts_.name, internal::RuleMatcher(rule), internal::RuleName(rule), n);
    }
  }

 private:
  absl::Status LoopError(const std::string& why) const {
    return absl::InternalError(absl::StrCat("infinite loop in graph_rewrite",
                                            opts_.name.empty() ? "" : " '", opts_.name,
                                            opts_.name.empty() ? "" : "'", " (", why, ")"));
  }
  absl::Status CountRewrite(int64_t depth) {
    if (depth > opts_.step_limit) {
      return LoopError(absl::StrCat("a node was rewritten more than ", opts_.step_limit,
                                    " times without reaching a fixed point"));
    }
    if (++total_rewrites_ > 16 * opts_.step_limit) {
      return LoopError(absl::StrCat("more than ", 16 * opts_.step_limit, " rewrites in total"));
    }
    return absl::OkStatus();
  }

  const PatternMatcher* pm_;
  const PatternMatcher* bpm_;
  const RewriteOptions& opts_;
  int track_;
  int64_t pass_id_;
  int64_t total_rewrites_ = 0;
  RewriteOwner owner_;
  absl::flat_hash_map<const UOp*, uint32_t> fallback_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> arena_;  // sources' memo indices for stage-1 items
  absl::flat_hash_map<const internal::CompiledRule*, int64_t> hits_;  // only with opts.stats
};

absl::StatusOr<UOpPtr> Rewriter::FixedPoint(const UOpPtr& root) {
  // tinygrad's unified_rewrite: stage 0 = (bpm to a fixed point, then) schedule the sources;
  // stage 1 = sources done: rebuild if changed, else apply pm; stage 2 = link n to the final
  // replacement of what it was rewritten to. Items waiting on a node that is still on the stack
  // below them are deferred to the bottom of the stack (front of the deque).
  std::deque<Item> stack;
  uint32_t root_idx = Mark(root);
  stack.push_back(Item{root, root_idx, 0, 0});
  size_t deferred_since_progress = 0;
  auto defer = [&](Item&& it) -> absl::Status {
    stack.push_front(std::move(it));
    if (++deferred_since_progress > stack.size()) {
      return LoopError("a replacement depends on a node that is waiting for it");
    }
    return absl::OkStatus();
  };
  UOpVec srcs;
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    if (entries_[item.idx].result) {
      deferred_since_progress = 0;
      continue;
    }
    if (item.stage == 0) {
      deferred_since_progress = 0;
      int64_t depth = item.depth;
      uint32_t alias = kNone;
      const UOp* nn = item.n.get();
      if (bpm_ != nullptr) {
        UOpPtr new_n = item.n;
        while (UOpPtr r = Apply(bpm_, new_n)) {
          KILN_RETURN_IF_ERROR(CountRewrite(++depth));
          new_n = std::move(r);
        }
        if (new_n != item.n) {
          alias = Mark(new_n);  // holds new_n
          nn = new_n.get();
        }
      }
      uint32_t off = static_cast<uint32_t>(arena_.size());
      const size_t ns = nn->num_src();
      for (size_t i = 0; i < ns; ++i) arena_.push_back(0);
      stack.push_back(Item{nullptr, item.idx, 1, depth, nn, off, alias});
      for (size_t i = ns; i-- > 0;) {
        const UOpPtr& x = nn->src(i);
        bool inserted;
        arena_[off + i] = Mark(x, &inserted);
        if (inserted) stack.push_back(Item{x, arena_[off + i], 0, 0});
      }
    } else if (item.stage == 1) {
      const UOp* nn = item.new_n;
      const size_t ns = nn->num_src();
      bool all_ready = true, changed = false;
      for (size_t i = 0; i < ns; ++i) {
        const UOpPtr& rx = entries_[arena_[item.aux + i]].result;
        if (!rx) {
          all_ready = false;
          break;
        }
        changed = changed || rx != nn->src(i);
      }
      if (!all_ready) {
        KILN_RETURN_IF_ERROR(defer(std::move(item)));
        continue;
      }
      deferred_since_progress = 0;
      UOpPtr next;
      int64_t depth = item.depth;
      if (!changed) {
        UOpPtr self = UOpPtr::FromRaw(nn);
        if (pm_ != nullptr) next = Apply(pm_, self);
        if (!next) {
          Finish(item.idx, std::move(self), item.alias);
          continue;
        }
        KILN_RETURN_IF_ERROR(CountRewrite(++depth));
      } else {
        srcs.clear();
        for (size_t i = 0; i < ns; ++i) srcs.push_back(entries_[arena_[item.aux + i]].result);
        next = nn->WithSrc(srcs);
      }
      bool inserted;
      uint32_t next_idx = Mark(next, &inserted);
      stack.push_back(Item{nullptr, item.idx, 2, depth, nullptr, next_idx, item.alias});
      if (inserted) stack.push_back(Item{std::move(next), next_idx, 0, depth});
    } else {
      const UOpPtr& r = entries_[item.aux].result;
      if (!r) {
        KILN_RETURN_IF_ERROR(defer(std::move(item)));
        continue;
      }
      deferred_since_progress = 0;
      UOpPtr result = r;
      Finish(item.idx, std::move(result), item.alias);
    }
  }
  KILN_CHECK(entries_[root_idx].result);
  return entries_[root_idx].result;
}

UOpPtr Rewriter::Walk(const UOpPtr& root) {
  // Depth-first, each node expanded once: bpm once before the sources, pm once after them.
  // A source that is still in progress (an ancestor reintroduced by a bpm result) is kept as is.
  struct WalkItem {
    UOpPtr n;
    UOpPtr new_n;  // stage 1: n after bpm
    bool stage1;
  };
  std::vector<WalkItem> stack;
  stack.push_back(WalkItem{root, nullptr, false});
  while (!stack.empty()) {
    WalkItem item = std::move(stack.back());
    stack.pop_back();
    if (!item.stage1) {
      bool inserted;
      Mark(item.n, &inserted);
      if (!inserted) continue;  // done, or in progress
      UOpPtr new_n = item.n;
      if (bpm_ != nullptr) {
        if (UOpPtr r = Apply(bpm_, new_n)) new_n = std::move(r);
      }
      const UOp* nn = new_n.get();
      stack.push_back(WalkItem{std::move(item.n), std::move(new_n), true});
      for (size_t i = nn->num_src(); i-- > 0;) {
        const UOpPtr& x = nn->src(i);
        if (Known(x.get()) == kNone) stack.push_back(WalkItem{x, nullptr, false});
      }
    } else {
      const UOp* nn = item.new_n.get();
      UOpVec srcs;
      bool changed = false;
      for (const UOpPtr& x : nn->src()) {
        uint32_t xi = Known(x.get());
        const UOpPtr* rx = xi != kNone && entries_[xi].result ? &entries_[xi].result : nullptr;
        srcs.push_back(rx != nullptr ? *rx : x);
        changed = changed || srcs.back() != x;
      }
      UOpPtr out = changed ? nn->WithSrc(srcs) : std::move(item.new_n);
      if (pm_ != nullptr) {
        if (UOpPtr r = Apply(pm_, out)) out = std::move(r);
      }
      entries_[Known(item.n.get())].result = std::move(out);
    }
  }
  return entries_[Known(root.get())].result;
}

const char* ModeName(const RewriteOptions& opts) {
  if (opts.walk) return "walk";
  if (opts.bottom_up) return "bottom_up";
  if (opts.bpm != nullptr) return "both";
  return "default";
}

}  // namespace

absl::StatusOr<UOpPtr> GraphRewrite(const UOpPtr& root, const PatternMatcher& pm,
                                    const RewriteOptions& opts) {
  if (opts.bottom_up && opts.bpm != nullptr) {
    return absl::InvalidArgumentError("graph_rewrite: bottom_up and bpm are exclusive");
  }
  if (!root) return absl::InvalidArgumentError("graph_rewrite: null root");
  const PatternMatcher* post = opts.bottom_up ? nullptr : &pm;
  const PatternMatcher* pre = opts.bottom_up ? &pm : opts.bpm;
  int track = static_cast<int>(GetKnob(Knob::kTrackMatchStats));
  int64_t pass_id = 0;
  if (track >= 2 && opts.traced) {
    pass_id = RewriteTrace::Get().BeginPass(opts.name, pm.name(), ModeName(opts), root);
  }
  Rewriter rw(post, pre, opts, track, pass_id);
  absl::StatusOr<UOpPtr> out = opts.walk ? absl::StatusOr<UOpPtr>(rw.Walk(root)) : rw.FixedPoint(root);
  if (out.ok()) rw.FlushStats(pm);
  if (pass_id != 0) {
    RewriteTrace::Get().EndPass(pass_id, out.ok() ? *out : nullptr, out.ok(),
                                out.ok() ? "" : std::string(out.status().message()));
  }
  return out;
}

UOpPtr GraphRewriteOrDie(const UOpPtr& root, const PatternMatcher& pm, const RewriteOptions& opts) {
  absl::StatusOr<UOpPtr> out = GraphRewrite(root, pm, opts);
  KILN_CHECK_MSG(out.ok(), std::string(out.status().message()).c_str());
  return *std::move(out);
}

}  // namespace kiln
