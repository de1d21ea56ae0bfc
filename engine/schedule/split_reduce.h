// Splitting long float sums into partial sums (tinygrad's split_reduceop / multi-stage reduce idea), run by
// CreateSchedule on the tensor graph before fusion.
//
// A float32 accumulator that adds n terms one at a time loses about sqrt(n) roundings' worth on random data (a
// relative error near 3e-8 * sqrt(n / 3)) and stops growing altogether at 2^24 when the terms are ones, whatever the
// backend's vector width. So a REDUCE_AXIS(ADD) of a float dtype that adds at least kSplitReduceAt elements per
// output is rewritten into
//   stage 1: the reduced elements cut into S groups of at most kSplitPartMax, each group summed (S partials per
//            output, stored: CONTIGUOUS), then
//   stage 2: the S partials summed, itself cut into groups of at most kSplitFanIn while S is larger (stage 3, ...).
// Every accumulator then adds at most kSplitPartMax terms. The partials' independent rounding errors average out
// (stage 1 contributes its per-group error / sqrt(S)), so the error is set by the last stage, which adds at most
// kSplitFanIn terms: about 3e-8 * sqrt(64 / 3), 1.5e-7, whatever the length. The partials are independent outputs,
// which the codegen heuristics spread over threads and work-groups. The groups come from one reduced axis that a
// divisor S cuts evenly (the outermost such axis, so inner contiguous runs stay whole); when no axis has a fitting
// divisor, the reduced axes are flattened and zero-padded to a multiple of S.
//
// The rewrite is structural (the same graph on every backend), so CPU, INTERP and GPUs sum the same groups.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/uop/uop.h"

namespace kiln::schedule {

// A float sum of at least this many elements per output is split. Below it the sums stay one kernel, as the Fashion-MNIST
// training step's do (its largest add 512 x 24 x 24 = 294912 elements: conv1's weight and bias gradients), so
// training numerics and speed are those measured without splitting (docs/architecture.md, "Long sums").
inline constexpr int64_t kSplitReduceAt = int64_t{1} << 19;
// The most elements a stage-1 partial sum adds.
inline constexpr int64_t kSplitPartMax = 4096;
// The most partials a later stage adds.
inline constexpr int64_t kSplitFanIn = 64;

// `roots` with every long float sum under them split as above (the same nodes when there is none). Shapes, dtypes
// and the order of the roots are unchanged.
std::vector<UOpPtr> SplitLongReduces(absl::Span<const UOpPtr> roots);

}  // namespace kiln::schedule
