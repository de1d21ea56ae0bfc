// KernelBuilder (internal to engine/schedule): lowers a group of realized tensor nodes of one output shape into one
// kernel AST (docs/kernel-ir.md §2), and reports what the fusion pass needs to decide what else to realize.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/uop/uop.h"
#include "engine/uop/uop_key.h"

namespace kiln::schedule {

// The fusion state a kernel is built against. Nodes named by raw pointers here and in KernelBuild are nodes of the
// scheduled graph, which the caller of CreateSchedule holds for the whole schedule.
struct GraphInfo {
  // Nodes stored to a buffer (kernel outputs, ASSIGNs, copies). Consumers load them.
  UOpSet realized;
  // Nodes whose dim 0 counts rows bounded by a Variable (Tensor::Rows), mapped to that BIND: a kernel storing one
  // loops over dim 0 up to the Variable, a runtime argument.
  UOpMap<const UOp*> rows;
};

// One use of a REDUCE_AXIS inside a kernel.
struct ReduceUse {
  const UOp* reduce = nullptr;
  // Index expressions + validity (pointer identity = structural identity). Held: they are built during the kernel
  // build and compared with other builds' keys after it, when nothing else may hold them.
  std::vector<UOpPtr> key;
  // The index misses a range open at the use (the result is broadcast back), the reduce is large and nested in
  // another reduce's loops, or it is a second large reduce beside the kernel's first (another loop nest): the fusion
  // pass realizes it (or, when only nested, its epilogue: Scheduler::EpilogueTop).
  bool broadcast = false;
  bool nested = false;        // large and nested in another reduce's loops
  bool another_nest = false;  // large, at the top level, with another input shape or axes than a reduce before it
};

struct KernelBuild {
  UOpPtr sink;                       // SINK(arg = name) with RANGE ids renumbered from 0
  std::vector<const UOp*> outputs;   // realized nodes stored, by slot
  // Slots after the outputs: a BUFFER node (existing memory) or a realized node (its buffer), by slot.
  std::vector<const UOp*> inputs;
  std::vector<const UOp*> deps;      // realized nodes whose kernels must run first (loads and ASSIGN results)
  std::vector<ReduceUse> reduce_uses;
  bool war_hazard = false;           // an ASSIGN output's value reads the target buffer at another index
  // A broadcast use of an unrealized reduce was replaced by a placeholder: the sink is incomplete and the fusion
  // pass must realize that reduce and build the kernel again.
  bool pruned = false;
  std::vector<const UOp*> realize;  // elementwise nodes the fusion pass must realize (expensive, broadcast in a reduce)
  std::vector<std::pair<std::string, int64_t>> binds;  // bound Variables seen
  // The reduces at the kernel's top level (not nested in another reduce's loops), as "input shape / axes": a kernel
  // built with several outputs runs the top-level reduces of one signature over one shared loop nest.
  std::vector<std::string> top_reduces;
};

// Lowers `outputs` (realized nodes of one shape; ASSIGNs are lowered into their target's buffer) into one kernel.
absl::StatusOr<KernelBuild> BuildKernel(const GraphInfo& g, absl::Span<const UOp* const> outputs);

// Rebuilds `root` with every node in `subst` replaced (iterative; interned).
UOpPtr Substitute(const UOpPtr& root, const absl::flat_hash_map<const UOp*, UOpPtr>& subst);

}  // namespace kiln::schedule
