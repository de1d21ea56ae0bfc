// Internal to engine/api: GraphSpec -> DecodedGraph (names parsed, allowlist and limits checked,
// topological order enforced) and DecodedGraph + bound inputs -> UOps through UOp::Create.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/api/engine.h"
#include "engine/api/graph_spec.h"
#include "engine/dtype/dtype.h"
#include "engine/uop/uop.h"

namespace kiln::api {

struct DecodedInput {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // -1 = bound per run
  std::vector<std::string> dim_names;  // empty, or one per dim ("" = unnamed)
};

struct DecodedNode {
  bool is_input = false;
  int input_index = 0;
  Op op = Op::NOOP;
  DType dtype;
  Arg arg;
  std::vector<uint32_t> src;
};

struct DecodedOutput {
  std::string name;
  uint32_t node = 0;
};

struct DecodedGraph {
  std::vector<DecodedInput> inputs;
  std::vector<DecodedNode> nodes;
  std::vector<DecodedOutput> outputs;
  bool all_static = true;  // no -1 in any input shape
  // all_static graphs: the outputs' shapes, in order (filled by CheckBuild).
  std::vector<Shape> static_output_shapes;
};

// The kiln wire name of a dtype ("float32", "int32", "bool", ...).
std::string WireDTypeName(DType d);
// Parses a wire dtype name; only value dtypes (no void, index, vector or pointer).
std::optional<DType> ParseWireDType(std::string_view name);

absl::StatusOr<DecodedGraph> DecodeGraph(const GraphSpec& spec, const GraphLimits& limits);

// Checks the run's inputs against the graph: count, dtype, rank, dims (-1 wildcards), limits,
// byte sizes (overflow-checked).
absl::Status CheckInputs(const DecodedGraph& g, const GraphLimits& limits,
                         absl::Span<const HostTensorView> inputs);

// Builds every node over `inputs` (one realized view per graph input) through UOp::Create and
// returns the output values, in order. Errors name the node ("nodes[4]: ...").
absl::StatusOr<std::vector<UOpPtr>> BuildOutputs(const DecodedGraph& g, const GraphLimits& limits,
                                                 absl::Span<const UOpPtr> inputs);

// BuildOutputs over placeholder buffers (no memory) for a graph with static shapes; records the
// output shapes in g->static_output_shapes.
absl::Status CheckBuild(DecodedGraph& g, const GraphLimits& limits, const std::string& device);

// The output shapes of a run over `inputs` (already checked by CheckInputs), from a build over
// placeholder buffers of their shapes: nothing is allocated.
absl::StatusOr<std::vector<Shape>> OutputShapes(const DecodedGraph& g, const GraphLimits& limits,
                                                absl::Span<const HostTensorView> inputs,
                                                const std::string& device);

// Estimated heap bytes of a spec and of its decoded form (for the prepared-graph cache's bound).
int64_t SpecBytes(const GraphSpec& spec);
int64_t DecodedBytes(const DecodedGraph& g);

}  // namespace kiln::api
