// MemoryPlanner (internal to engine/schedule): hands out BUFFER nodes for intermediates, reusing a released buffer
// of the same device and dtype that is at least as large (smallest fit), so buffers whose lifetimes do not overlap
// share memory (tinygrad's memory planner, reference/tinygrad.md §3.5, without the arena).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/uop/uop.h"

namespace kiln::schedule {

class MemoryPlanner {
 public:
  // A buffer of at least `numel` elements; a released one when one fits, else a new BUFFER node.
  UOpPtr Acquire(DType dtype, int64_t numel, const std::string& device);
  // `buffer` (from Acquire) may be handed out again.
  void Release(const UOpPtr& buffer);

  int64_t requested_bytes() const { return requested_bytes_; }  // sum of every Acquire's size
  int64_t allocated_bytes() const { return allocated_bytes_; }  // sum of the new buffers' sizes

 private:
  struct Free {
    UOpPtr buffer;
    std::string device;
  };
  std::vector<Free> free_;
  int64_t requested_bytes_ = 0;
  int64_t allocated_bytes_ = 0;
};

}  // namespace kiln::schedule
