#include "engine/schedule/memory_planner.h"

#include "engine/schedule/schedule.h"

namespace kiln::schedule {

UOpPtr MemoryPlanner::Acquire(DType dtype, int64_t numel, const std::string& device) {
  requested_bytes_ += numel * dtype.ItemSize();
  int best = -1;
  for (int i = 0; i < static_cast<int>(free_.size()); ++i) {
    const UOpPtr& b = free_[i].buffer;
    if (free_[i].device != device || b->dtype() != dtype || b->ArgInt() < numel) continue;
    if (best < 0 || b->ArgInt() < free_[best].buffer->ArgInt()) best = i;
  }
  if (best >= 0) {
    UOpPtr b = free_[best].buffer;
    free_.erase(free_.begin() + best);
    return b;
  }
  allocated_bytes_ += numel * dtype.ItemSize();
  return NewBuffer(dtype, numel, device);
}

void MemoryPlanner::Release(const UOpPtr& buffer) {
  const UOp* dev = buffer->num_src() >= 2 ? buffer->src(1).get() : nullptr;
  free_.push_back({buffer, dev != nullptr && dev->op() == Op::DEVICE ? dev->ArgStr() : DefaultDevice()});
}

}  // namespace kiln::schedule
