// UOpKey: a node named by its address in a map or set, checked against address reuse.
//
// The stable-key rule (docs/architecture.md §4): a cache or memo keyed by nodes either holds them (UOpPtr keys, or
// values that hold the nodes) or keys them by something that is never reused. A raw `const UOp*` key is a trap:
// interned nodes die with their last UOpPtr, the allocator hands the address to the next node, and an entry made for
// the dead node then answers for the new one (issue #17: the kernel builder's memo returned values computed at a
// dead index node for a different index built at the same address).
//
// UOpKey keeps the address (for hashing) and the node's id (UOp::id(), process-wide, never reused). Two keys with
// the same address and different ids name a dead node and its successor: in debug and test builds (NDEBUG unset,
// which includes the release preset) comparing them is a KILN_CHECK failure, which turns a silently stale entry into
// a crash at the lookup that would have used it; with NDEBUG they simply compare unequal (the stale entry is never
// found). A UOpKey does not keep its node alive, so it is for maps whose keys are held elsewhere (a graph the caller
// holds while the map lives); get() on a key whose node died returns a dangling pointer.
#pragma once

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/base/check.h"
#include "engine/uop/uop.h"

namespace kiln {

class UOpKey {
 public:
  UOpKey(const UOp* u) : p_(u), id_(u == nullptr ? 0 : u->id()) {}  // NOLINT(google-explicit-constructor)
  UOpKey(const UOpPtr& u) : UOpKey(u.get()) {}                      // NOLINT(google-explicit-constructor)

  const UOp* get() const { return p_; }
  const UOp* operator->() const { return p_; }
  uint64_t id() const { return id_; }

  friend bool operator==(const UOpKey& a, const UOpKey& b) {
    if (a.p_ != b.p_) return false;
#ifndef NDEBUG
    KILN_CHECK_MSG(a.id_ == b.id_, "stale UOpKey: a map holds the address of a dead node that now names another");
#endif
    return a.id_ == b.id_;
  }
  friend bool operator!=(const UOpKey& a, const UOpKey& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const UOpKey& k) {
    return H::combine(std::move(h), k.p_);
  }

 private:
  const UOp* p_;
  uint64_t id_;
};

template <typename V>
using UOpMap = absl::flat_hash_map<UOpKey, V>;
using UOpSet = absl::flat_hash_set<UOpKey>;

}  // namespace kiln
