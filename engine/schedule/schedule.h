// Scheduler: a tensor graph (docs/kernel-ir.md §1) in, an ordered list of kernels (§2) plus buffers out.
//
// CreateSchedule cuts the graph at the nodes that must be realized (stored to a buffer) and fuses everything else
// into the kernels that consume it (tinygrad's rangeify, reference/tinygrad.md §3.3, simplified):
//  - every root is realized, except a root that already is a contiguous view of a BUFFER (BUFFER or RESHAPE of one);
//  - CONTIGUOUS realizes its source (a no-op when the source already is a contiguous view of a BUFFER);
//  - ASSIGN(target, value) stores value into target's buffer (through target's movement ops); its value is realized
//    first when it reads that buffer at another index (write-after-read hazard);
//  - COPY to another device realizes its source and is a copy item;
//  - elementwise chains fuse; elementwise fuses into reductions and after them; elementwise nodes used at different
//    indices are recomputed;
//  - a REDUCE_AXIS whose result is broadcast back (its index does not use every range open where it is consumed) is
//    realized; one used at two different indices, or by two kernels, is realized too (reductions are never
//    recomputed), except that kernels of the same output shape that use it at the same index and do not depend on
//    each other are merged into one kernel with several outputs.
// Hash-consing makes identical subgraphs one node, so they are computed once.
// These decisions are named rules in two PatternMatcher tables ("schedule realize" before fusion, "schedule fuse" per
// fusion round; docs/architecture.md §5), whose hits go to ScheduleOptions::stats.
//
// Each kernel output gets fresh RANGEs (one per output dim of size > 1); index expressions are mapped back through
// movement ops (indexing.h) and REDUCE_AXIS opens kReduce RANGEs under a REDUCE. A realized node or BUFFER read by a
// kernel becomes LOAD(INDEX(PARAM(slot), flat index[, gate])). RANGE ids are numbered from 0 in order of first
// appearance, and buffers are PARAM slots (outputs first), so identical kernels have identical ASTs (and keys).
//
// Memory: intermediates (realized nodes that are not roots) get new BUFFERs; a buffer whose last reader has run is
// reused by a later intermediate of the same device and dtype and at least the same size.
//
// Thread safety: CreateSchedule is reentrant (it only builds interned UOps).
#pragma once

#include <algorithm>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/uop/uop.h"

namespace kiln {

class RewriteStats;

struct ScheduleItem {
  enum class Kind { kKernel, kCopy };
  Kind kind = Kind::kKernel;
  // kKernel: SINK(arg = name) of END/STORE nodes (docs/kernel-ir.md §2). kCopy: null.
  UOpPtr ast;
  // BUFFER nodes by PARAM slot, outputs first. kCopy: {destination, source}.
  std::vector<UOpPtr> buffers;
  int num_outputs = 0;
  std::string device;  // where the kernel runs (kCopy: the destination device)
  // The buffers the item writes: buffers[0, num_written()).
  size_t num_written() const {
    return std::min(buffers.size(), kind == Kind::kCopy ? size_t{1} : static_cast<size_t>(num_outputs));
  }
};

struct Schedule {
  std::vector<ScheduleItem> items;  // in an order that respects every dependency
  // For each root (same order): the realized value, a BUFFER viewed through a RESHAPE to the root's shape (no RESHAPE
  // when the shape is the BUFFER's own 1-D shape). A root that is already such a view is returned unchanged.
  std::vector<UOpPtr> outputs;
  // Values of bound Variables (BIND nodes) by DEFINE_VAR name.
  absl::flat_hash_map<std::string, int64_t> var_vals;
  // BUFFER nodes every kernel reads that existed before (inputs), for cache invalidation by callers.
  std::vector<UOpPtr> inputs;
  // BUFFER nodes written by ASSIGN (existing buffers whose contents change).
  std::vector<UOpPtr> assigned;
  // Memory plan: bytes of intermediates without reuse, and bytes actually allocated for them.
  int64_t intermediate_bytes = 0;
  int64_t planned_bytes = 0;
};

struct ScheduleOptions {
  // Hits of the fusion rules (passes "schedule realize" and "schedule fuse") are added here when set.
  RewriteStats* stats = nullptr;
};

absl::StatusOr<Schedule> CreateSchedule(absl::Span<const UOpPtr> roots, const ScheduleOptions& options = {});

// The device name of the default device: `DEV` in the environment, else "CPU".
std::string DefaultDevice();

// A new, distinct BUFFER node `BUFFER(UNIQUE(id), DEVICE(device))` of `numel` elements of `dtype`. Ids come from one
// process-wide counter, so no two calls return the same node. Thread-safe.
UOpPtr NewBuffer(DType dtype, int64_t numel, const std::string& device);

// The BUFFER under a chain of movement ops (nullptr if `u` is not a view of a BUFFER), and whether the view is
// contiguous (only RESHAPEs of the whole buffer).
const UOp* BufferOf(const UOp* u, bool* contiguous = nullptr);

}  // namespace kiln
