// TraceCache: see trace_cache.h.
#include "engine/jit/trace_cache.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/realize/beam.h"

namespace kiln::jit {

TraceCache::TraceCache(size_t capacity, size_t max_bytes) : cache_(capacity, max_bytes) {}

void TraceCache::SetLimits(size_t capacity, size_t max_bytes) {
  absl::MutexLock l(&mu_);
  cache_.SetLimits(capacity, max_bytes);
}

absl::StatusOr<std::string> TraceCache::KeyOf(const std::string& model, const JitArgs& args) {
  std::string key = model;
  auto add = [&key](const std::string& name, const Tensor& t) -> absl::Status {
    if (!t.ok()) return t.status();
    absl::StrAppend(&key, "|", name, ":", InputInfo{t.shape(), t.dtype(), t.device()}.ToString());
    return absl::OkStatus();
  };
  for (size_t i = 0; i < args.positional.size(); ++i)
    KILN_RETURN_IF_ERROR(add(absl::StrCat(i), args.positional[i]));
  for (const auto& [name, t] : args.named) KILN_RETURN_IF_ERROR(add(name, t));
  // The call's Variables by name, not value: one trace serves every value (a symbolic batch dim).
  for (const auto& [name, v] : args.vars) absl::StrAppend(&key, "|var:", name);
  // BEAM's background searches: a trace captured before their choices were stored is not replayed after (the next
  // run captures one with the tuned kernels; engine/realize/beam.h).
  if (GetKnob(Knob::kBeam) > 0) absl::StrAppend(&key, "|beam", GetKnob(Knob::kBeam), "g", BeamGeneration());
  return key;
}

absl::StatusOr<std::vector<Tensor>> TraceCache::Run(const std::string& model, const JitArgs& args,
                                                    const JitFunction& fn, TraceRunInfo* info) {
  KILN_ASSIGN_OR_RETURN(std::string key, KeyOf(model, args));
  std::shared_ptr<Entry> entry;
  bool hit = false;
  {
    absl::MutexLock l(&mu_);
    if (const auto* found = cache_.Get(key)) {  // a hit, most recent now
      hit = true;
      entry = *found;
    } else {  // a miss: the new entry is the newest, so it stays while older ones are evicted
      entry = std::make_shared<Entry>();
      entry->key = key;
      entry->model = model;
      {
        absl::MutexLock el(&entry->mu);
        entry->jit = std::make_unique<TinyJit>(fn);
      }
      cache_.Put(key, entry, 0);
    }
  }
  int64_t bytes = 0;
  absl::StatusOr<std::vector<Tensor>> out;
  {
    absl::MutexLock el(&entry->mu);
    if (info != nullptr) {
      info->hit = hit;
      info->call = entry->jit->cnt();
    }
    if (info != nullptr) entry->jit->set_time_launches(info->time_launches);
    out = entry->jit->Call(args);
    if (info != nullptr && entry->jit->plan() != nullptr) {
      info->plan_kernels = entry->jit->plan()->KernelNames();
      info->plan_costs = entry->jit->plan()->CallCosts();
      info->plan_skipped = entry->jit->plan()->SkippedInLastRun();
      if (info->time_launches && info->call >= 1) {
        info->plan_seconds = entry->jit->plan()->call_seconds();
        info->plan_start_ns = entry->jit->plan()->call_start_ns();
      }
    }
    if (entry->jit->plan() != nullptr) bytes = entry->jit->plan()->allocated_bytes();
  }
  absl::MutexLock l(&mu_);
  if (const auto* cached = cache_.Peek(entry->key); cached != nullptr && cached->get() == entry.get()) {
    // Still cached: account its (new) size; as the newest entry it stays while older ones go.
    cache_.Put(entry->key, entry, static_cast<size_t>(bytes), /*replace=*/true);
  }
  return out;
}

TraceCacheStats TraceCache::stats() const {
  absl::MutexLock l(&mu_);
  const LruCacheStats c = cache_.stats();
  TraceCacheStats s;
  s.hits = c.hits;
  s.misses = c.misses;
  s.evictions = c.evictions;
  s.size = c.entries;
  s.bytes = c.bytes;
  s.max_bytes = c.max_bytes;
  return s;
}

void TraceCache::CollectBuffers(const std::string& model,
                                std::vector<const runtime::Buffer*>* out) const {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock l(&mu_);
    cache_.ForEach([&](const std::string&, const std::shared_ptr<Entry>& e) {
      if (e->model == model) entries.push_back(e);
    });
  }
  // Outside mu_: a running entry is waited for, the rest of the cache is not blocked.
  for (const auto& e : entries) {
    absl::MutexLock el(&e->mu);
    if (e->jit != nullptr) e->jit->CollectBuffers(out);
  }
}

bool TraceCache::EraseKey(const std::string& key) {
  absl::MutexLock l(&mu_);
  return cache_.Erase(key);
}

int TraceCache::Erase(const std::string& model) {
  absl::MutexLock l(&mu_);
  std::vector<std::string> keys;
  cache_.ForEach([&](const std::string& key, const std::shared_ptr<Entry>& e) {
    if (e->model == model) keys.push_back(key);
  });
  for (const std::string& key : keys) cache_.Erase(key);
  return static_cast<int>(keys.size());
}

void TraceCache::Clear() {
  absl::MutexLock l(&mu_);
  cache_.Clear();
}

}  // namespace kiln::jit
