// MemoryPlanner (internal to engine/schedule): buffers for a schedule's intermediates, planned once the whole
// schedule's lifetimes are known (tinygrad's memory planner, reference/tinygrad.md §3.5, without the arena).
//
// The scheduler walks its items in order, calling Acquire for each intermediate an item writes (a placeholder BUFFER
// node that the items refer to meanwhile) and Release after the last item that reads it. Finish then assigns the
// placeholders to real buffers "greedy by size": largest request first, each into the smallest existing buffer of
// its device and dtype that is large enough and whose other tenants' lifetimes do not overlap its own, else a new
// buffer of its size. Buffers whose lifetimes do not overlap share memory. Planning online (each Acquire taking a
// released buffer at once) kept the Fashion-MNIST training step at 437 MB for a 303 MB peak of live intermediates: a
// small tensor took a large released buffer that a later large one needed; planned at the end, 323 MB.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/uop/uop.h"
#include "engine/uop/uop_key.h"

namespace kiln::schedule {

class MemoryPlanner {
 public:
  // A placeholder BUFFER of `numel` elements, live from now until Release.
  UOpPtr Acquire(DType dtype, int64_t numel, const std::string& device);
  // `buffer` (from Acquire) is read by no later item.
  void Release(const UOpPtr& buffer);
  // Placeholder -> the planned buffer that holds it (at least as large, same device and dtype). Call once, after
  // the last Acquire and Release.
  UOpMap<UOpPtr> Finish();

  int64_t requested_bytes() const { return requested_bytes_; }  // sum of every Acquire's size
  int64_t allocated_bytes() const { return allocated_bytes_; }  // sum of the planned buffers' sizes (after Finish)

 private:
  struct Request {
    UOpPtr placeholder;
    std::string device;
    int64_t start = 0;   // event counter at Acquire
    int64_t end = -1;    // at Release; -1: never released (live to the end)
  };
  std::vector<Request> requests_;
  UOpMap<size_t> index_of_;  // placeholder -> its request
  int64_t clock_ = 0;
  int64_t requested_bytes_ = 0;
  int64_t allocated_bytes_ = 0;
};

}  // namespace kiln::schedule
