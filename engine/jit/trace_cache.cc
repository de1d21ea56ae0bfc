// TraceCache: see trace_cache.h.
#include "engine/jit/trace_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace kiln::jit {

TraceCache::TraceCache(size_t capacity, size_t max_bytes)
    : capacity_(capacity == 0 ? 1 : capacity), max_bytes_(max_bytes) {}

void TraceCache::SetLimits(size_t capacity, size_t max_bytes) {
  absl::MutexLock l(&mu_);
  capacity_ = capacity == 0 ? 1 : capacity;
  max_bytes_ = max_bytes;
  EvictLocked(nullptr);
}

void TraceCache::EvictLocked(const Entry* keep) {
  auto over = [&] {
    return lru_.size() > capacity_ || (max_bytes_ > 0 && stats_.bytes > static_cast<int64_t>(max_bytes_));
  };
  for (auto it = lru_.end(); over() && it != lru_.begin();) {
    --it;
    if (it->get() == keep) continue;
    stats_.bytes -= (*it)->bytes;
    index_.erase((*it)->key);
    it = lru_.erase(it);
    ++stats_.evictions;
  }
  stats_.size = static_cast<int64_t>(lru_.size());
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
  return key;
}

absl::StatusOr<std::vector<Tensor>> TraceCache::Run(const std::string& model, const JitArgs& args,
                                                    const JitFunction& fn, TraceRunInfo* info) {
  KILN_ASSIGN_OR_RETURN(std::string key, KeyOf(model, args));
  std::shared_ptr<Entry> entry;
  bool hit = false;
  {
    absl::MutexLock l(&mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      ++stats_.hits;
      hit = true;
      lru_.splice(lru_.begin(), lru_, it->second);
      entry = *it->second;
    } else {
      ++stats_.misses;
      entry = std::make_shared<Entry>();
      entry->key = key;
      entry->model = model;
      {
        absl::MutexLock el(&entry->mu);
        entry->jit = std::make_unique<TinyJit>(fn);
      }
      lru_.push_front(entry);
      index_[key] = lru_.begin();
      EvictLocked(entry.get());
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
    out = entry->jit->Call(args);
    if (info != nullptr && entry->jit->plan() != nullptr) info->plan_kernels = entry->jit->plan()->KernelNames();
    if (entry->jit->plan() != nullptr) bytes = entry->jit->plan()->allocated_bytes();
  }
  absl::MutexLock l(&mu_);
  if (auto it = index_.find(entry->key); it != index_.end() && it->second->get() == entry.get()) {
    stats_.bytes += bytes - entry->bytes;  // still cached: account its (new) size
    entry->bytes = bytes;
    EvictLocked(entry.get());
  }
  return out;
}

TraceCacheStats TraceCache::stats() const {
  absl::MutexLock l(&mu_);
  TraceCacheStats s = stats_;
  s.max_bytes = static_cast<int64_t>(max_bytes_);
  return s;
}

void TraceCache::CollectBuffers(const std::string& model,
                                std::vector<const runtime::Buffer*>* out) const {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock l(&mu_);
    for (const auto& e : lru_) {
      if (e->model == model) entries.push_back(e);
    }
  }
  // Outside mu_: a running entry is waited for, the rest of the cache is not blocked.
  for (const auto& e : entries) {
    absl::MutexLock el(&e->mu);
    if (e->jit != nullptr) e->jit->CollectBuffers(out);
  }
}

int TraceCache::Erase(const std::string& model) {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (auto it = lru_.begin(); it != lru_.end();) {
    if ((*it)->model == model) {
      stats_.bytes -= (*it)->bytes;
      index_.erase((*it)->key);
      it = lru_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  stats_.size = static_cast<int64_t>(lru_.size());
  return n;
}

void TraceCache::Clear() {
  absl::MutexLock l(&mu_);
  lru_.clear();
  index_.clear();
  stats_.size = 0;
  stats_.bytes = 0;
}

}  // namespace kiln::jit
