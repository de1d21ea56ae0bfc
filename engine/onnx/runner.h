// The runner: turns a loaded Model (model.h) plus concrete inputs into lazy kiln Tensor ops, one node at a time in
// topological order, so that fusion, codegen and TinyJit apply to the whole graph unchanged.
//
// Shapes are concrete per run: a `dim_param` (symbolic dim) is bound to the input's actual size, and every input
// shape builds its own graph (engine/api keys a JIT trace per input signature). Shape arithmetic on values known
// without input data (Shape, Constant, initializers) is folded on the host (value.h), so the ops that need concrete
// values (Reshape's shape, Slice's starts, ...) read them without touching the device.
//
// Where an op needs the concrete values of a graph input (a Reshape whose shape is an input), the input's host data
// is read and the input is reported in RunResult::value_inputs: the graph then depends on those values, so a cache
// of traces must key on them. Where it needs values computed on the device from inputs, the runner realizes them when
// RunOptions::allow_device_reads is set (eager use: the CLI, the conformance tests) and fails otherwise (under a JIT
// capture a device read is impossible).
//
// Errors (InvalidArgument, or the tensor error of the failing op) name the node, its op and opset. Not thread-safe
// per call; different calls may run at once (the WeightCache is internally locked).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/onnx/model.h"
#include "engine/onnx/op_registry.h"
#include "engine/onnx/value.h"

namespace kiln::onnx {

// Device copies of a model's large host constants (initializers), made once per device and reused by every run, so
// weights are uploaded once and a JIT trace bakes in the same buffers. Thread-safe.
class WeightCache {
 public:
  Tensor Get(const HostArrayPtr& host, const std::string& device);
  // Bytes held on devices.
  uint64_t bytes() const;
  void CollectTensors(std::vector<Tensor>* out) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<const HostArray*, std::string>, std::pair<HostArrayPtr, Tensor>> cache_ ABSL_GUARDED_BY(mu_);
};

struct RunOptions {
  std::string device = "CPU";
  bool allow_device_reads = true;
  WeightCache* weights = nullptr;  // optional; without it initializers are uploaded per run
};

// Node executions one Run may make, subgraphs (Loop / Scan / If bodies, every iteration) included: a bound on the
// host work of a model whose loops multiply (a Loop inside a Loop), not only on one loop's trip count.
inline constexpr int64_t kMaxNodeRuns = int64_t{1} << 18;

struct RunResult {
  std::vector<Value> outputs;       // in graph output order (lazy tensors)
  std::vector<int> value_inputs;    // graph inputs whose data the graph depends on (sorted, unique)
  int64_t node_runs = 0;            // nodes executed so far (<= kMaxNodeRuns)
};

// Runs `model` on `inputs` (name -> value; every graph input must be given, tensors with the declared dtype and rank;
// a tensor input should carry `host` data when ops may need its values).
absl::StatusOr<RunResult> Run(const Model& model, const std::map<std::string, Value>& inputs,
                              const RunOptions& options);

// A tensor value's elements on the host: its host data, or the device tensor realized and copied out.
absl::StatusOr<HostArrayPtr> ValueToHost(const Value& v);

class Scope;  // runner.cc: name -> Value bindings of one graph (with its enclosing graphs)

// What an op implementation sees of its node.
class OpContext {
 public:
  OpContext(const Node& node, std::vector<const Value*> inputs, Scope* scope, const RunOptions& options,
            RunResult* result);

  const Node& node() const { return node_; }
  int64_t opset() const { return node_.opset; }
  const std::string& device() const { return options_.device; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  // Whether output i is wanted (present and non-empty name).
  bool WantsOutput(size_t i) const { return i < node_.outputs.size() && !node_.outputs[i].empty(); }
  bool Has(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr && !inputs_[i]->is_none(); }
  const Value& In(size_t i) const { return *inputs_[i]; }

  // Input i as a device Tensor (built from host data when needed). Missing input -> error.
  absl::StatusOr<Tensor> T(size_t i);
  std::optional<Tensor> OptT(size_t i);  // nullopt when absent; an error tensor when it cannot be built
  // Input i's values on the host (host data, or a device read when allowed); records value inputs.
  absl::StatusOr<HostArrayPtr> Host(size_t i);
  absl::StatusOr<std::vector<int64_t>> Ints(size_t i);
  absl::StatusOr<std::vector<double>> Doubles(size_t i);
  // A device Tensor for an arbitrary value (sequence elements, subgraph outputs).
  absl::StatusOr<Tensor> ToTensor(const Value& v);
  absl::StatusOr<HostArrayPtr> ToHost(const Value& v);

  // Attributes (defaults when absent).
  bool HasAttr(const std::string& name) const { return node_.Find(name) != nullptr; }
  int64_t Int(const std::string& name, int64_t def) const;
  double Float(const std::string& name, double def) const;
  std::string String(const std::string& name, const std::string& def) const;
  std::optional<std::vector<int64_t>> Ints(const std::string& name) const;
  std::optional<std::vector<double>> Floats(const std::string& name) const;
  std::optional<std::vector<std::string>> Strings(const std::string& name) const;
  HostArrayPtr TensorAttr(const std::string& name) const;
  std::shared_ptr<const Graph> GraphAttr(const std::string& name) const;

  // Runs a nested graph (If/Loop/Scan bodies) with `inputs` bound to its declared inputs, in this node's scope.
  absl::StatusOr<std::vector<Value>> RunSubgraph(const Graph& graph, const std::vector<Value>& inputs);

  // InvalidArgument naming the node: "node 'n' (Op, opset 13): <msg>".
  absl::Status Error(const std::string& msg) const;
  // A Value for a tensor result (errors are reported by the runner with the node's name).
  static Value Out(Tensor t) { return Value::Of(std::move(t)); }

 private:
  const Node& node_;
  std::vector<const Value*> inputs_;
  Scope* scope_;
  const RunOptions& options_;
  RunResult* result_;
};

// Folds a node on the host when every present input is a host constant and the op is shape arithmetic (Shape, Size,
// Gather, Concat, Slice, Unsqueeze, Add, ...) with a small result; nullopt when it does not apply (host_fold.cc).
std::optional<std::vector<Value>> FoldOnHost(const Node& node, const std::vector<const Value*>& inputs);

}  // namespace kiln::onnx
