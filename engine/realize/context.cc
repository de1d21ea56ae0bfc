// RealizeContext (realize.h): the memo, the loaded-kernel cache and the statistics one engine realizes against.
#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/realize/realize.h"
#include "engine/realize/realize_internal.h"

namespace kiln {
namespace {

std::atomic<size_t> g_default_kernel_entries{2048};
std::atomic<size_t> g_default_kernel_bytes{size_t{128} << 20};

// Live contexts, for InvalidateMemo (buffers are process-wide; see realize_internal.h). Registration only: no
// context state lives here.
struct Registry {
  absl::Mutex mu;
  std::vector<RealizeContext*> live ABSL_GUARDED_BY(mu);
};
Registry& Contexts() {
  static Registry* r = new Registry();
  return *r;
}

thread_local RealizeContext* t_context = nullptr;  // input scope (ScopedRealizeContext), never a result

}  // namespace

// ---- Memo ----

namespace realize_internal {

UOpPtr Memo::Lookup(const Digest& key) {
  absl::MutexLock l(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  UOpPtr v = it->second.result.Lock();
  if (v == nullptr) map_.erase(it);
  return v;
}

void Memo::Insert(const Digest& key, const UOpPtr& result, std::vector<const UOp*> reads) {
  if (AnyVolatile(reads)) return;  // an ExecPlan overwrites one of them on every Run
  auto weak = WeakView::Of(result);
  if (!weak.ok()) return;
  absl::MutexLock l(&mu_);
  if (map_.size() >= kPruneAt) Prune();
  std::vector<uint64_t> ids;
  for (const UOp* b : reads) ids.push_back(b->id());
  map_[key] = MemoEntry{*std::move(weak), std::move(ids)};
}

void Memo::Invalidate(const UOp* buffer) {
  absl::MutexLock l(&mu_);
  for (auto it = map_.begin(); it != map_.end();) {
    auto cur = it++;
    const auto& r = cur->second.reads;
    if (std::find(r.begin(), r.end(), buffer->id()) != r.end()) map_.erase(cur);
  }
}

void Memo::Prune() {
  for (auto it = map_.begin(); it != map_.end();) {
    auto cur = it++;
    if (!cur->second.result.Alive()) map_.erase(cur);
  }
  while (map_.size() >= kPruneAt) map_.erase(map_.begin());
}

void InvalidateMemo(const UOp* buffer) {
  Registry& r = Contexts();
  absl::MutexLock l(&r.mu);
  for (RealizeContext* c : r.live) c->impl().memo.Invalidate(buffer);
}

}  // namespace realize_internal

// ---- RealizeContext::Impl ----

std::shared_ptr<realize_internal::LoadedKernel> RealizeContext::Impl::GetKernel(const std::string& key) {
  absl::MutexLock l(&mu);
  const auto* k = kernels.Get(key);
  return k == nullptr ? nullptr : *k;
}

bool RealizeContext::Impl::HasKernel(const std::string& key) const {
  absl::MutexLock l(&mu);
  return kernels.Contains(key);
}

void RealizeContext::Impl::PutKernel(const std::string& key, std::shared_ptr<realize_internal::LoadedKernel> k) {
  absl::MutexLock l(&mu);
  const size_t bytes = k->bytes;
  kernels.Put(key, std::move(k), bytes);
}

void RealizeContext::Impl::NoteCompile(double seconds) {
  absl::MutexLock l(&mu);
  counters.kernels_compiled += 1;
  counters.compile_seconds += seconds;
  if (recording) {
    recorded.compiled += 1;
    recorded.compile_seconds += seconds;
  }
}

void RealizeContext::Impl::Finish(const RealizeStats& stats) {
  absl::MutexLock l(&mu);
  counters.realizes += 1;
  counters.schedules += stats.schedules;
  counters.kernels_scheduled += stats.kernels;
  counters.launches += static_cast<int64_t>(stats.launches.size());
  last = stats;
  if (recording) {
    recorded.kernels += stats.kernels;
    recorded.schedules += stats.schedules;
    recorded.seconds += stats.seconds;
    recorded.launches.insert(recorded.launches.end(), stats.launches.begin(), stats.launches.end());
    recorded.estimate = stats.estimate;
  }
}

// ---- RealizeContext ----

RealizeContext::RealizeContext()
    : impl_(std::make_unique<Impl>(g_default_kernel_entries.load(), g_default_kernel_bytes.load())) {
  Registry& r = Contexts();
  absl::MutexLock l(&r.mu);
  r.live.push_back(this);
}

RealizeContext::~RealizeContext() {
  Registry& r = Contexts();
  absl::MutexLock l(&r.mu);
  r.live.erase(std::remove(r.live.begin(), r.live.end(), this), r.live.end());
}

RealizeContext& RealizeContext::Default() {
  static RealizeContext* c = new RealizeContext();
  return *c;
}

KernelCacheStats RealizeContext::kernel_cache_stats() const {
  absl::MutexLock l(&impl_->mu);
  const LruCacheStats s = impl_->kernels.stats();
  KernelCacheStats out;
  out.entries = s.entries;
  out.bytes = s.bytes;
  out.hits = s.hits;
  out.misses = s.misses;
  out.evictions = s.evictions;
  out.max_entries = s.max_entries;
  out.max_bytes = s.max_bytes;
  return out;
}

void RealizeContext::SetKernelCacheLimits(size_t max_entries, size_t max_bytes) {
  absl::MutexLock l(&impl_->mu);
  impl_->kernels.SetLimits(max_entries, max_bytes);
}

RealizeCounters RealizeContext::counters() const {
  absl::MutexLock l(&impl_->mu);
  return impl_->counters;
}

RealizeStats RealizeContext::last_stats() const {
  absl::MutexLock l(&impl_->mu);
  return impl_->last;
}

void RealizeContext::StartRecording() {
  absl::MutexLock l(&impl_->mu);
  impl_->recording = true;
  impl_->recorded = RealizeStats{};
}

RealizeStats RealizeContext::TakeRecording() {
  absl::MutexLock l(&impl_->mu);
  impl_->recording = false;
  return std::exchange(impl_->recorded, RealizeStats{});
}

void RealizeContext::SetPassHooks(std::shared_ptr<const codegen::PassHooks> hooks) {
  absl::MutexLock l(&impl_->mu);
  impl_->hooks = std::move(hooks);
  impl_->kernels.Clear();
}

std::shared_ptr<const codegen::PassHooks> RealizeContext::pass_hooks() const {
  absl::MutexLock l(&impl_->mu);
  return impl_->hooks;
}

RewriteStats& RealizeContext::rewrite_stats() const { return impl_->rewrite_stats; }

void SetDefaultKernelCacheLimits(size_t max_entries, size_t max_bytes) {
  g_default_kernel_entries = std::max<size_t>(1, max_entries);
  g_default_kernel_bytes = max_bytes;
  RealizeContext::Default().SetKernelCacheLimits(max_entries, max_bytes);
}

RealizeContext& CurrentRealizeContext() { return t_context != nullptr ? *t_context : RealizeContext::Default(); }

ScopedRealizeContext::ScopedRealizeContext(RealizeContext& ctx) : prev_(t_context) { t_context = &ctx; }
ScopedRealizeContext::~ScopedRealizeContext() { t_context = prev_; }

RealizeStats LastRealizeStats() { return CurrentRealizeContext().last_stats(); }
KernelCacheStats GetKernelCacheStats() { return CurrentRealizeContext().kernel_cache_stats(); }
void SetKernelCacheLimits(size_t max_entries, size_t max_bytes) {
  CurrentRealizeContext().SetKernelCacheLimits(max_entries, max_bytes);
}

}  // namespace kiln
