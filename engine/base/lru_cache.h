// LruCache<K, V>: the one bounded least-recently-used map of the engine (loaded kernels, prepared
// graphs, compiled binaries in memory). Bounded by entries and, optionally, by bytes (each entry
// carries its own estimate); counts hits, misses and evictions.
//
// Contract:
//  - Get() counts a hit (and makes the entry the most recent) or a miss; Peek() and Contains() count
//    nothing and do not reorder.
//  - Put() of an existing key keeps the old value (first writer wins; returns it) unless `replace`;
//    then the cache evicts least-recent entries while over a bound. The newest entry always stays,
//    so a value larger than the byte bound is still usable once.
//  - max_entries >= 1 (0 is treated as 1); max_bytes 0 = no byte bound.
// Not thread-safe: every owner holds it under its own mutex (the bound checks and the counters are
// one critical section with the owner's other state).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace kiln {

struct LruCacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t max_entries = 0;
  int64_t max_bytes = 0;  // 0 = no byte bound
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
};

template <typename K, typename V>
class LruCache {
 public:
  LruCache(size_t max_entries, size_t max_bytes) { SetLimits(max_entries, max_bytes); }

  // The value of `key` (most recent now), or nullptr; counted as a hit or a miss.
  const V* Get(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return &it->second->value;
  }
  // Like Get without counting or reordering.
  const V* Peek(const K& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->value;
  }
  bool Contains(const K& key) const { return index_.contains(key); }

  // Inserts `value` (estimated `bytes`) as the most recent entry, then evicts down to the bounds.
  // An existing key keeps its value unless `replace`. Returns the value now held for `key`.
  const V& Put(const K& key, V value, size_t bytes, bool replace = false) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      if (replace) {
        bytes_ -= it->second->bytes;
        it->second->value = std::move(value);
        it->second->bytes = bytes;
        bytes_ += bytes;
        Evict();
      }
      return it->second->value;
    }
    lru_.push_front(Entry{key, std::move(value), bytes});
    index_.emplace(key, lru_.begin());
    bytes_ += bytes;
    Evict();
    return lru_.front().value;
  }
  // Removes `key`; whether it was there (not counted as an eviction).
  bool Erase(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
    return true;
  }
  void Clear() {
    lru_.clear();
    index_.clear();
    bytes_ = 0;
  }
  // New bounds; evicts down to them at once.
  void SetLimits(size_t max_entries, size_t max_bytes) {
    max_entries_ = std::max<size_t>(1, max_entries);
    max_bytes_ = max_bytes;
    Evict();
  }

  size_t size() const { return lru_.size(); }
  size_t bytes() const { return bytes_; }
  size_t max_entries() const { return max_entries_; }
  size_t max_bytes() const { return max_bytes_; }
  LruCacheStats stats() const {
    return {static_cast<int64_t>(lru_.size()), static_cast<int64_t>(bytes_),
            static_cast<int64_t>(max_entries_), static_cast<int64_t>(max_bytes_),
            hits_, misses_, evictions_};
  }
  // Visits entries most recent first: fn(const K&, const V&).
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Entry& e : lru_) fn(e.key, e.value);
  }

 private:
  struct Entry {
    K key;
    V value;
    size_t bytes;
  };
  void Evict() {
    while (lru_.size() > 1 && (lru_.size() > max_entries_ || (max_bytes_ > 0 && bytes_ > max_bytes_))) {
      bytes_ -= lru_.back().bytes;
      index_.erase(lru_.back().key);
      lru_.pop_back();
      ++evictions_;
    }
  }

  size_t max_entries_ = 1;
  size_t max_bytes_ = 0;
  size_t bytes_ = 0;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
  int64_t evictions_ = 0;
  std::list<Entry> lru_;  // most recent first
  absl::flat_hash_map<K, typename std::list<Entry>::iterator> index_;
};

}  // namespace kiln
