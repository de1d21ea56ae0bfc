// Fuzz target: an ONNX model file (engine/onnx/model.cc LoadModelFromBytes, what kilnd's ONNX
// platform, `kiln onnx` and Engine::LoadOnnx read), then the runner building the model's lazy
// Tensor graph (engine/onnx/runner.cc Run, what the first request to a loaded model does) for
// zero inputs of the declared shapes, on the INTERP device, without device reads and without
// realizing anything. A model from the network must never crash the daemon, at load or at run.
// Oracles:
//   * a strict load (every op implemented) that succeeds implies a lenient load that succeeds with
//     no unsupported op; a lenient load that fails implies a strict load that fails;
//   * a loaded graph, nested graphs included: IR version in range; every node resolved to an
//     implementation; every non-empty node input defined by an earlier node, a graph input, an
//     initializer or an enclosing graph; every initializer holds numel * itemsize bytes within
//     kMaxElements; op_uses count every node once;
//   * a run that succeeds returns one value per graph output, and tensor outputs are valid Tensors
//     whose dtype and shape the Value reports consistently.
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/onnx/model.h"
#include "engine/onnx/runner.h"
#include "engine/onnx/value.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using kiln::onnx::Graph;
using kiln::onnx::HostArray;
using kiln::onnx::Model;
using kiln::onnx::Value;
using kiln::onnx::ValueInfo;

constexpr int64_t kMaxRunInputElements = 1 << 14;  // per run, all inputs together

// Checks `g` and its nested graphs; returns the number of nodes, nested ones included.
int CheckGraph(const Graph& g, std::set<std::string> defined, int depth) {
  FUZZ_CHECK(depth < 64, "graphs nested deeper than 64");
  for (const auto& [name, init] : g.initializers) {
    FUZZ_CHECK(init != nullptr, "null initializer " + name);
    FUZZ_CHECK(init->numel() >= 0 && init->numel() <= kiln::onnx::kMaxElements,
               "initializer over kMaxElements: " + name);
    FUZZ_CHECK(static_cast<int64_t>(init->bytes.size()) == init->numel() * init->dtype.ItemSize(),
               "initializer bytes differ from numel * itemsize: " + name);
    defined.insert(name);
  }
  for (const ValueInfo& in : g.inputs) defined.insert(in.name);
  for (const ValueInfo& in : g.overridable_inputs) defined.insert(in.name);
  int nodes = 0;
  for (const kiln::onnx::Node& node : g.nodes) {
    ++nodes;
    FUZZ_CHECK(node.def != nullptr, node.Describe() + " loaded without an implementation");
    for (const std::string& in : node.inputs) {
      FUZZ_CHECK(in.empty() || defined.count(in) > 0,
                 node.Describe() + " reads '" + in + "' before anything defines it");
    }
    for (const kiln::onnx::Attribute& a : node.attributes) {
      if (a.g != nullptr) nodes += CheckGraph(*a.g, defined, depth + 1);
      for (const auto& sub : a.graphs) {
        if (sub != nullptr) nodes += CheckGraph(*sub, defined, depth + 1);
      }
    }
    for (const std::string& out : node.outputs) {
      if (!out.empty()) defined.insert(out);
    }
  }
  return nodes;
}

// Zero inputs of the declared shapes (a symbolic or unknown dim becomes 2); false when an input
// is not a tensor with a declared shape, or the inputs are too large to build.
bool ZeroInputs(const Graph& g, std::map<std::string, Value>* inputs) {
  int64_t total = 0;
  for (const ValueInfo& vi : g.inputs) {
    if (vi.kind != ValueInfo::Kind::kTensor || !vi.has_shape || vi.dims.size() > 8) return false;
    kiln::Shape shape;
    int64_t numel = 1;
    for (int64_t d : vi.dims) {
      const int64_t size = d < 0 ? 2 : d;
      if (size > kMaxRunInputElements) return false;
      numel *= size;
      if (numel > kMaxRunInputElements) return false;
      shape.push_back(size);
    }
    total += numel;
    if (total > kMaxRunInputElements) return false;
    Value v;
    v.kind = Value::Kind::kTensor;
    v.host = std::make_shared<const HostArray>(HostArray::Zeros(vi.dtype, shape));
    (*inputs)[vi.name] = std::move(v);
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool registered = (kiln::backends::RegisterAllBackends(), true);
  (void)registered;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  kiln::onnx::LoadOptions lenient_options;
  lenient_options.require_supported_ops = false;
  absl::StatusOr<std::shared_ptr<const Model>> lenient =
      kiln::onnx::LoadModelFromBytes(bytes, "", lenient_options);
  absl::StatusOr<std::shared_ptr<const Model>> strict = kiln::onnx::LoadModelFromBytes(bytes, "");
  if (!lenient.ok()) {
    FUZZ_CHECK(!strict.ok(), "the strict load accepts what the lenient load refuses: " +
                                 std::string(lenient.status().message()));
    return 0;
  }
  if (!strict.ok()) return 0;
  FUZZ_CHECK(kiln::onnx::UnsupportedOps(**lenient).empty(),
             "the strict load succeeded but the lenient load lists unsupported ops");
  const Model& model = **strict;
  FUZZ_CHECK(model.ir_version >= kiln::onnx::kMinIrVersion &&
                 model.ir_version <= kiln::onnx::kMaxIrVersion,
             "IR version out of range");
  FUZZ_CHECK(model.graph != nullptr, "a loaded model without a graph");
  const int nodes = CheckGraph(*model.graph, {}, 0);
  int used = 0;
  for (const Model::OpUse& use : model.op_uses) used += use.count;
  FUZZ_CHECK(used == nodes, "op_uses count " + std::to_string(used) + " nodes, the graphs hold " +
                                std::to_string(nodes));

  std::map<std::string, Value> inputs;
  if (!ZeroInputs(*model.graph, &inputs)) return 0;
  kiln::onnx::RunOptions options;
  options.device = "INTERP";
  options.allow_device_reads = false;
  absl::StatusOr<kiln::onnx::RunResult> run = kiln::onnx::Run(model, inputs, options);
  if (!run.ok()) return 0;
  FUZZ_CHECK(run->outputs.size() == model.graph->outputs.size(),
             "a run returned " + std::to_string(run->outputs.size()) + " values for " +
                 std::to_string(model.graph->outputs.size()) + " graph outputs");
  for (const Value& v : run->outputs) {
    if (!v.is_tensor() || v.host != nullptr) continue;
    FUZZ_CHECK(v.tensor.ok(), "a successful run returned a failed tensor");
    FUZZ_CHECK(v.shape().size() <= 64, "an output of rank over 64");
  }
  return 0;
}
