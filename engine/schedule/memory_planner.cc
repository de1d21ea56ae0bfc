#include "engine/schedule/memory_planner.h"

#include <algorithm>
#include <numeric>

#include "engine/schedule/schedule.h"

namespace kiln::schedule {

UOpPtr MemoryPlanner::Acquire(DType dtype, int64_t numel, const std::string& device) {
  requested_bytes_ += numel * dtype.ItemSize();
  UOpPtr placeholder = NewBuffer(dtype, numel, device);
  index_of_[placeholder] = requests_.size();
  requests_.push_back({placeholder, device, clock_++, -1});
  return placeholder;
}

void MemoryPlanner::Release(const UOpPtr& buffer) {
  auto it = index_of_.find(buffer);
  if (it != index_of_.end() && requests_[it->second].end < 0) requests_[it->second].end = clock_++;
}

UOpMap<UOpPtr> MemoryPlanner::Finish() {
  // Largest first (ties: earliest first, so the plan does not depend on sort stability).
  std::vector<size_t> order(requests_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto bytes = [&](size_t i) {
    const UOpPtr& p = requests_[i].placeholder;
    return p->ArgInt() * p->dtype().ItemSize();
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return bytes(a) != bytes(b) ? bytes(a) > bytes(b) : requests_[a].start < requests_[b].start;
  });
  struct Shared {
    UOpPtr buffer;
    std::string device;
    std::vector<std::pair<int64_t, int64_t>> lives;  // [start, end] of its tenants, end inclusive
  };
  std::vector<Shared> shared;
  UOpMap<UOpPtr> out;
  for (size_t i : order) {
    const Request& r = requests_[i];
    const UOpPtr& p = r.placeholder;
    const int64_t end = r.end < 0 ? clock_ : r.end;
    int best = -1;
    for (int s = 0; s < static_cast<int>(shared.size()); ++s) {
      const Shared& sh = shared[s];
      if (sh.device != r.device || sh.buffer->dtype() != p->dtype() || sh.buffer->ArgInt() < p->ArgInt()) continue;
      bool overlaps = false;
      for (const auto& [a, b] : sh.lives) overlaps |= a <= end && r.start <= b;
      if (overlaps) continue;
      if (best < 0 || sh.buffer->ArgInt() < shared[best].buffer->ArgInt()) best = s;
    }
    if (best < 0) {
      allocated_bytes_ += bytes(i);
      shared.push_back({p, r.device, {}});  // the largest tenant's placeholder becomes the buffer itself
      best = static_cast<int>(shared.size()) - 1;
    }
    shared[best].lives.emplace_back(r.start, end);
    out[p] = shared[best].buffer;
  }
  return out;
}

}  // namespace kiln::schedule
