// Fuzz target: a kiln.v1.Graph in protobuf binary form (a kiln.v1.Engine request's graph, a
// model.graph file) through every check kilnd runs on it before anything is compiled:
//   CheckGraphStructure (model files), CheckGraphSize + GraphSpecFromProto (requests),
//   DecodeGraph (names, allowlist, limits, topological order), then BuildOutputs through
//   UOp::Create over placeholder inputs (CheckBuild for static shapes; -1 dims bound to 1 and 3
//   as a request would bind them), and CheckInputs on host tensors of exactly the right size.
// Oracles: DecodeGraph accepting a graph implies CheckGraphStructure accepts it (the model-file
// check is a subset of the engine's); every output of a built graph exists and has the limits'
// element count; CheckInputs accepts inputs that match the graph.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/api/decode.h"
#include "engine/schedule/schedule.h"
#include "server/core/graph_spec_codec.h"
#include "server/core/model_artifact.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_configs.h"

namespace {

using kiln::api::DecodedGraph;
using kiln::api::GraphLimits;

// An input's shape with every -1 bound to `bind`, and its element count; false when the count
// exceeds the limit (Engine::Run refuses such inputs in CheckInputs before building anything).
bool Bind(const kiln::api::DecodedInput& in, int64_t bind, const GraphLimits& limits,
          std::vector<int64_t>* shape, int64_t* numel) {
  int64_t n = 1;
  for (int64_t d : in.shape) {
    shape->push_back(d == -1 ? bind : d);
    if (shape->back() != 0 && n > limits.max_elements / shape->back()) return false;
    n *= shape->back();
  }
  *numel = n;
  return true;
}

// Placeholder inputs as CheckBuild makes them (no memory), with every -1 bound to `bind`.
bool Placeholders(const DecodedGraph& g, const GraphLimits& limits, int64_t bind,
                  std::vector<kiln::UOpPtr>* out) {
  for (const kiln::api::DecodedInput& in : g.inputs) {
    std::vector<int64_t> shape;
    int64_t n = 0;
    if (!Bind(in, bind, limits, &shape, &n)) return false;
    kiln::UOpPtr b = kiln::NewBuffer(in.dtype, n, "CPU");
    if (shape.size() != 1) {
      b = kiln::UOp::Make(kiln::Op::RESHAPE, in.dtype, {b},
                          kiln::IntVec(shape.begin(), shape.end()));
    }
    out->push_back(std::move(b));
  }
  return true;
}

void CheckBuilt(const DecodedGraph& g, const GraphLimits& limits,
                const absl::StatusOr<std::vector<kiln::UOpPtr>>& built) {
  if (!built.ok()) return;
  FUZZ_CHECK(built->size() == g.outputs.size(), "BuildOutputs returned the wrong output count");
  for (const kiln::UOpPtr& u : *built) {
    FUZZ_CHECK(u != nullptr, "BuildOutputs returned a null output");
    if (!u->has_shape()) continue;
    int64_t n = 1;
    for (int64_t d : u->shape()) {
      FUZZ_CHECK(d >= 0, "an output has a negative dim");
      FUZZ_CHECK(d == 0 || n <= limits.max_elements / d, "an output exceeds max_elements");
      n *= d;
    }
  }
}

void BuildAndCheck(const DecodedGraph& g, const GraphLimits& limits, int64_t bind) {
  std::vector<kiln::UOpPtr> inputs;
  if (!Placeholders(g, limits, bind, &inputs)) return;
  CheckBuilt(g, limits, kiln::api::BuildOutputs(g, limits, inputs));
}

// Host tensors matching the graph's inputs (-1 bound to `bind`), when they are small.
void CheckMatchingInputs(const DecodedGraph& g, const GraphLimits& limits, int64_t bind) {
  std::vector<std::string> storage;
  std::vector<kiln::api::HostTensorView> views;
  storage.reserve(g.inputs.size());
  int64_t total = 0;
  for (const kiln::api::DecodedInput& in : g.inputs) {
    kiln::api::HostTensorView v;
    v.dtype = kiln::api::WireDTypeName(in.dtype);
    int64_t n = 0;
    if (!Bind(in, bind, limits, &v.shape, &n)) return;
    total += n * in.dtype.ItemSize();
    if (total > (1 << 20)) return;  // keep the harness fast; the limits are DecodeGraph's job
    storage.emplace_back(static_cast<size_t>(n * in.dtype.ItemSize()), '\0');
    v.data = storage.back();
    views.push_back(std::move(v));
  }
  absl::Status st = kiln::api::CheckInputs(g, limits, views);
  FUZZ_CHECK(st.ok(), "CheckInputs rejected inputs that match the graph: " + st.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::v1::Graph graph;
  if (!graph.ParseFromArray(data, static_cast<int>(size))) return 0;
  const absl::Status structure = kiln::server::CheckGraphStructure(graph);
  if (!kiln::server::CheckGraphSize(graph).ok()) return 0;
  const kiln::api::GraphSpec spec = kiln::server::GraphSpecFromProto(graph);
  GraphLimits limits;
  limits.max_nodes = kiln::server::kMaxGraphNodes;
  absl::StatusOr<DecodedGraph> g = kiln::api::DecodeGraph(spec, limits);
  if (!g.ok()) return 0;
  FUZZ_CHECK(structure.ok(),
             "DecodeGraph accepted a graph CheckGraphStructure rejects: " + structure.ToString());
  if (g->all_static) {
    (void)kiln::api::CheckBuild(*g, limits, "CPU");
    BuildAndCheck(*g, limits, 1);
    CheckMatchingInputs(*g, limits, 1);
    return 0;
  }
  for (int64_t bind : {1, 3}) {
    BuildAndCheck(*g, limits, bind);
    CheckMatchingInputs(*g, limits, bind);
  }
  return 0;
}
