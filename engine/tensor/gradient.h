// Autograd: reverse-mode gradients over tensor-level UOp graphs (tinygrad mixin/gradient.py).
//
// Rules are data: GradientRules() is a PatternMatcher with one rule per differentiable op. A rule
// matches the forward node `ret` and, given the upstream gradient (the rewrite ctx), returns a TUPLE
// with one entry per source of `ret`: that source's gradient contribution, or NoGradient() (a
// void NOOP) when the source gets none (comparisons, DETACH, WHERE's condition, RESHAPE of ints...).
//
// ComputeGradient(root, root_grad, targets):
//   1. toposort the graph (iteratively) and mark the nodes on a path to some target; DETACH blocks
//      the path (its source is never visited), and only float nodes carry gradients;
//   2. walk the marked nodes from the root in reverse topological order, rewrite each with the rules
//      and add the contributions into its sources' gradients (multiple contributions are summed);
//      a contribution whose shape differs from its source's (broadcast) is summed back over the
//      broadcast axes;
//   3. return the accumulated gradient of each target (zeros when a target is not reachable).
// A marked float node with no rule is an Unimplemented error naming the op.
//
// Tensor::Backward() (tensor.h) uses an explicit requires_grad flag, set by engine/nn parameters
// (Tensor::RequiresGrad): every live Tensor object with the flag, a float dtype and a current UOp
// in the loss graph gets its Grad() filled (accumulated if it already has one), as tinygrad fills
// every live tensor. The registry of such objects is process-wide and guarded by a mutex.
//
// Gradients are lazy tensor graphs built with the Tensor API: nothing is realized here.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/rewrite/pattern_matcher.h"
#include "engine/tensor/tensor.h"
#include "engine/uop/uop.h"

namespace kiln {

// The per-op gradient rules (see the header comment). Thread-safe, built once.
const PatternMatcher& GradientRules();

// The "no gradient" marker a rule returns for a source.
const UOpPtr& NoGradient();

// Gradients of `root` (any shape) w.r.t. `targets`, seeded with `root_grad` (same shape as root).
// `device` names the device of the gradient tensors. One entry per target, in order.
absl::StatusOr<std::vector<UOpPtr>> ComputeGradient(const UOpPtr& root, const UOpPtr& root_grad,
                                                    absl::Span<const UOpPtr> targets,
                                                    const std::string& device = "CPU");

// Tensor form: d(loss)/d(targets); `grad` defaults to ones (loss must then have one element).
absl::StatusOr<std::vector<Tensor>> Gradient(const Tensor& loss, absl::Span<const Tensor> targets,
                                             const std::optional<Tensor>& grad = std::nullopt);

// Number of live tensor objects with requires_grad (for tests).
size_t LiveRequiresGradCount();

// A gradient override: the sources' contributions for a node, computed by the function instead of by the rules over
// the node's subgraph. Given the node and its upstream gradient, it returns (node in the subgraph, contribution)
// pairs; ComputeGradient adds each to that node's gradient when it is on a path to a target, and the subgraph between
// is not differentiated. Conv2d registers its output this way so the input gradient is a transposed convolution
// rather than the col2im of the pooling view (a 25x larger intermediate). Keyed by the node's structural Key(), so it
// holds no UOp alive; a bounded table (cleared past 4096 entries: a cleared override falls back to the rules).
using GradientOverrideFn = std::function<absl::StatusOr<std::vector<std::pair<UOpPtr, UOpPtr>>>(
    const UOpPtr& node, const Tensor& grad, const std::string& device)>;
void RegisterGradientOverride(const UOpPtr& node, GradientOverrideFn fn);
// ComputeGradient with the root's own override ignored (for an override that wants the rules' answer for some
// sources, e.g. Conv2d's weight gradient).
absl::StatusOr<std::vector<UOpPtr>> ComputeGradientByRules(const UOpPtr& root, const UOpPtr& root_grad,
                                                           absl::Span<const UOpPtr> targets,
                                                           const std::string& device = "CPU");

}  // namespace kiln
