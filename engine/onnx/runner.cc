#include "engine/onnx/runner.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/base/env.h"
#include "engine/base/status.h"
#include "engine/realize/realize.h"

namespace kiln::onnx {

// Name -> Value bindings of one graph; lookups fall through to the enclosing graph's scope.
class Scope {
 public:
  explicit Scope(const Scope* parent) : parent_(parent) {}
  const Value* Find(const std::string& name) const {
    auto it = values_.find(name);
    if (it != values_.end()) return &it->second;
    return parent_ != nullptr ? parent_->Find(name) : nullptr;
  }
  void Bind(const std::string& name, Value v) { values_[name] = std::move(v); }

 private:
  const Scope* parent_;
  absl::flat_hash_map<std::string, Value> values_;
};

namespace {

// KILN_ONNX_TRACE=1 prints each node with its output shapes ("h": known on the host) to stderr.
bool TraceNodes() {
  static const bool on = EnvFlagOn("KILN_ONNX_TRACE");
  return on;
}

// A device tensor holding `host`: a CONST for one element (so it folds into kernels), else a buffer.
Tensor Materialize(const HostArrayPtr& host, bool persistent, const RunOptions& options) {
  const HostArray& a = *host;
  if (a.numel() == 0) return Tensor::Zeros(a.shape, a.dtype, options.device);
  if (a.numel() == 1) {
    Scalar s;
    if (a.dtype.IsFloat()) {
      s = Scalar(a.GetDouble(0));
    } else if (a.dtype.IsBool()) {
      s = Scalar(a.GetInt(0) != 0);
    } else {
      s = Scalar(a.GetInt(0));
    }
    return Tensor::Full(a.shape, s, a.dtype, options.device);
  }
  if (persistent && options.weights != nullptr) return options.weights->Get(host, options.device);
  return Tensor::FromHost(a.bytes.data(), a.dtype, a.shape, options.device);
}

absl::StatusOr<HostArrayPtr> ReadDevice(const Tensor& t) {
  HostArray a;
  a.dtype = t.dtype();
  a.shape = t.shape();
  a.bytes.resize(static_cast<size_t>(a.numel() * a.dtype.ItemSize()));
  if (a.numel() > 0) KILN_RETURN_IF_ERROR(t.CopyToHost(a.bytes.data(), a.bytes.size()));
  return std::make_shared<const HostArray>(std::move(a));
}

absl::Status CheckInput(const ValueInfo& vi, const Value& v, std::map<std::string, int64_t>* dims) {
  const std::string what = absl::StrCat("input '", vi.name.substr(0, 96), "'");
  if (vi.kind == ValueInfo::Kind::kTensor) {
    if (!v.is_tensor()) return absl::InvalidArgumentError(absl::StrCat(what, ": expected a tensor"));
  } else if (vi.kind == ValueInfo::Kind::kSequence) {
    if (!v.is_sequence()) return absl::InvalidArgumentError(absl::StrCat(what, ": expected a sequence"));
    return absl::OkStatus();
  } else {
    return absl::OkStatus();  // optional: anything (or nothing)
  }
  if (vi.onnx_type != 0 && v.dtype() != vi.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dtype is ", v.dtype().Name(), ", the model declares ", vi.dtype.Name()));
  }
  if (!vi.has_shape) return absl::OkStatus();
  const Shape s = v.shape();
  if (s.size() != vi.dims.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank is ", s.size(), ", the model declares ", vi.dims.size()));
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (vi.dims[i] >= 0 && s[i] != vi.dims[i]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": dim ", i, " is ", s[i], ", the model declares ",
                                                     vi.dims[i]));
    }
    if (vi.dims[i] < 0 && !vi.dim_params[i].empty()) {
      auto [it, inserted] = dims->emplace(vi.dim_params[i], s[i]);
      if (!inserted && it->second != s[i]) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": dim ", i, " ('", vi.dim_params[i].substr(0, 64),
                                                       "') is ", s[i], " but another input binds it to ", it->second));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOutputs(const Node& node, std::vector<Value>& outs) {
  if (outs.size() < node.outputs.size()) {
    // Trailing optional outputs an implementation does not produce must not be requested.
    for (size_t i = outs.size(); i < node.outputs.size(); ++i) {
      if (!node.outputs[i].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(node.Describe(), ": output ", i, " ('", node.outputs[i].substr(0, 64),
                         "') is not produced by kiln's implementation"));
      }
    }
  }
  for (Value& v : outs) {
    if (v.is_tensor() && !v.host && !v.tensor.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": ", v.tensor.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::Status RunNodes(const Graph& graph, Scope* scope, const RunOptions& options, RunResult* result) {
  for (const auto& [name, host] : graph.initializers) {
    if (scope->Find(name) != nullptr && graph.overridable_inputs.size() > 0) {
      bool overridden = false;
      for (const ValueInfo& vi : graph.overridable_inputs) overridden = overridden || vi.name == name;
      if (overridden) continue;
    }
    Value v = Value::Constant(host);
    v.persistent = true;
    scope->Bind(name, std::move(v));
  }
  for (const Node& node : graph.nodes) {
    std::vector<const Value*> inputs;
    inputs.reserve(node.inputs.size());
    for (const std::string& in : node.inputs) {
      if (in.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      const Value* v = scope->Find(in);
      if (v == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": input '", in.substr(0, 96),
                                                       "' has no value"));
      }
      inputs.push_back(v);
    }
    if (node.def == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": operator is not supported by kiln"));
    }
    if (++result->node_runs > kMaxNodeRuns) {
      return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": the model runs more than ", kMaxNodeRuns,
                                                     " nodes (loop bodies counted per iteration)"));
    }
    std::vector<Value> outs;
    if (std::optional<std::vector<Value>> folded = FoldOnHost(node, inputs)) {
      outs = *std::move(folded);
    } else {
      OpContext ctx(node, inputs, scope, options, result);
      absl::StatusOr<std::vector<Value>> r = node.def->impl(ctx);
      if (!r.ok()) {
        const std::string msg(r.status().message());
        if (msg.rfind("node '", 0) == 0) return r.status();
        return absl::Status(r.status().code(), absl::StrCat(node.Describe(), ": ", msg));
      }
      outs = *std::move(r);
    }
    KILN_RETURN_IF_ERROR(CheckOutputs(node, outs));
    if (TraceNodes()) {
      std::string line = node.Describe();
      for (size_t i = 0; i < outs.size() && i < node.outputs.size(); ++i) {
        absl::StrAppend(&line, " ", node.outputs[i].substr(0, 48), "=");
        if (outs[i].is_tensor()) {
          absl::StrAppend(&line, ShapeString(outs[i].shape()), outs[i].host ? "h" : "");
        } else {
          absl::StrAppend(&line, outs[i].is_sequence() ? "seq" : "none");
        }
      }
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    for (size_t i = 0; i < node.outputs.size() && i < outs.size(); ++i) {
      if (!node.outputs[i].empty()) scope->Bind(node.outputs[i], std::move(outs[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HostArrayPtr> ValueToHost(const Value& v) {
  if (!v.is_tensor()) return absl::InvalidArgumentError("not a tensor value");
  if (v.host) return v.host;
  if (!v.tensor.ok()) return v.tensor.status();
  return ReadDevice(v.tensor);
}

Tensor WeightCache::Get(const HostArrayPtr& host, const std::string& device) {
  absl::MutexLock lock(&mu_);
  auto key = std::make_pair(host.get(), device);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.second;
  Tensor t = Tensor::FromHost(host->bytes.data(), host->dtype, host->shape, device);
  if (!t.ok()) return t;
  // Nothing writes an initializer (ONNX has no in-place ops): a JIT trace runs the kernels that read only weights
  // (a conv weight's channels-last copy) once, at capture (ExecPlan's constant calls).
  if (absl::Status st = MarkConstant(t.uop()); !st.ok()) return Tensor::FromStatus(st);
  cache_.emplace(key, std::make_pair(host, t));
  return t;
}

uint64_t WeightCache::bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t n = 0;
  for (const auto& [key, entry] : cache_) n += entry.first->bytes.size();
  return n;
}

void WeightCache::CollectTensors(std::vector<Tensor>* out) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, entry] : cache_) out->push_back(entry.second);
}

OpContext::OpContext(const Node& node, std::vector<const Value*> inputs, Scope* scope, const RunOptions& options,
                     RunResult* result)
    : node_(node), inputs_(std::move(inputs)), scope_(scope), options_(options), result_(result) {}

absl::Status OpContext::Error(const std::string& msg) const {
  return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": ", msg));
}

absl::StatusOr<Tensor> OpContext::ToTensor(const Value& v) {
  if (!v.is_tensor()) return Error("expected a tensor value");
  if (v.has_tensor()) return v.tensor;
  if (v.host) return Materialize(v.host, v.persistent, options_);
  return v.tensor.status().ok() ? Error("value has no tensor") : v.tensor.status();
}

absl::StatusOr<Tensor> OpContext::T(size_t i) {
  if (!Has(i)) return Error(absl::StrCat("input ", i, " is required"));
  KILN_ASSIGN_OR_RETURN(Tensor t, ToTensor(In(i)));
  if (!t.ok()) return t.status();
  return t;
}

std::optional<Tensor> OpContext::OptT(size_t i) {
  if (!Has(i)) return std::nullopt;
  absl::StatusOr<Tensor> t = ToTensor(In(i));
  if (!t.ok()) return Tensor::FromStatus(t.status());
  return *t;
}

absl::StatusOr<HostArrayPtr> OpContext::ToHost(const Value& v) {
  if (!v.is_tensor()) return Error("expected a tensor value");
  if (v.host) {
    if (!v.host_constant && v.input_index >= 0) result_->value_inputs.push_back(v.input_index);
    return v.host;
  }
  if (!options_.allow_device_reads) {
    return Error("needs the values of a tensor computed from the inputs at trace time (data-dependent shape), "
                 "which a JIT trace cannot capture");
  }
  return ReadDevice(v.tensor);
}

absl::StatusOr<HostArrayPtr> OpContext::Host(size_t i) {
  if (!Has(i)) return Error(absl::StrCat("input ", i, " is required"));
  return ToHost(In(i));
}

absl::StatusOr<std::vector<int64_t>> OpContext::Ints(size_t i) {
  KILN_ASSIGN_OR_RETURN(HostArrayPtr h, Host(i));
  if (!h->dtype.IsInt() && !h->dtype.IsBool()) return Error(absl::StrCat("input ", i, " must be integers"));
  return h->Ints();
}

absl::StatusOr<std::vector<double>> OpContext::Doubles(size_t i) {
  KILN_ASSIGN_OR_RETURN(HostArrayPtr h, Host(i));
  return h->Doubles();
}

int64_t OpContext::Int(const std::string& name, int64_t def) const {
  const Attribute* a = node_.Find(name);
  if (a == nullptr) return def;
  if (a->type == Attribute::Type::kFloat) return static_cast<int64_t>(a->f);
  return a->i;
}

double OpContext::Float(const std::string& name, double def) const {
  const Attribute* a = node_.Find(name);
  if (a == nullptr) return def;
  if (a->type == Attribute::Type::kInt) return static_cast<double>(a->i);
  return a->f;
}

std::string OpContext::String(const std::string& name, const std::string& def) const {
  const Attribute* a = node_.Find(name);
  return a == nullptr ? def : a->s;
}

std::optional<std::vector<int64_t>> OpContext::Ints(const std::string& name) const {
  const Attribute* a = node_.Find(name);
  if (a == nullptr) return std::nullopt;
  if (a->type == Attribute::Type::kInt) return std::vector<int64_t>{a->i};
  return a->ints;
}

std::optional<std::vector<double>> OpContext::Floats(const std::string& name) const {
  const Attribute* a = node_.Find(name);
  if (a == nullptr) return std::nullopt;
  if (a->type == Attribute::Type::kFloat) return std::vector<double>{a->f};
  return a->floats;
}

std::optional<std::vector<std::string>> OpContext::Strings(const std::string& name) const {
  const Attribute* a = node_.Find(name);
  if (a == nullptr) return std::nullopt;
  return a->strings;
}

HostArrayPtr OpContext::TensorAttr(const std::string& name) const {
  const Attribute* a = node_.Find(name);
  return a == nullptr ? nullptr : a->t;
}

std::shared_ptr<const Graph> OpContext::GraphAttr(const std::string& name) const {
  const Attribute* a = node_.Find(name);
  return a == nullptr ? nullptr : a->g;
}

absl::StatusOr<std::vector<Value>> OpContext::RunSubgraph(const Graph& graph, const std::vector<Value>& inputs) {
  Scope child(scope_);
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    child.Bind(graph.inputs[i].name, i < inputs.size() ? inputs[i] : Value::None());
  }
  KILN_RETURN_IF_ERROR(RunNodes(graph, &child, options_, result_));
  std::vector<Value> outs;
  for (const ValueInfo& o : graph.outputs) {
    const Value* v = child.Find(o.name);
    if (v == nullptr) return Error(absl::StrCat("subgraph output '", o.name.substr(0, 64), "' has no value"));
    outs.push_back(*v);
  }
  return outs;
}

absl::StatusOr<RunResult> Run(const Model& model, const std::map<std::string, Value>& inputs,
                              const RunOptions& options) {
  const Graph& g = *model.graph;
  Scope scope(nullptr);
  RunResult result;
  std::map<std::string, int64_t> dims;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const ValueInfo& vi = g.inputs[i];
    auto it = inputs.find(vi.name);
    if (it == inputs.end()) {
      if (vi.kind == ValueInfo::Kind::kOptional) {
        scope.Bind(vi.name, Value::None());
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat("input '", vi.name.substr(0, 96), "' is missing"));
    }
    KILN_RETURN_IF_ERROR(CheckInput(vi, it->second, &dims));
    Value v = it->second;
    v.input_index = static_cast<int>(i);
    v.host_constant = false;
    v.persistent = false;
    if (v.is_tensor() && !v.has_tensor() && v.host) {
      v.tensor = Materialize(v.host, false, options);
      if (!v.tensor.ok()) return v.tensor.status();
    }
    scope.Bind(vi.name, std::move(v));
  }
  for (const ValueInfo& vi : g.overridable_inputs) {
    auto it = inputs.find(vi.name);
    if (it != inputs.end()) scope.Bind(vi.name, it->second);
  }
  for (const auto& [name, v] : inputs) {
    bool declared = false;
    for (const ValueInfo& vi : g.inputs) declared = declared || vi.name == name;
    for (const ValueInfo& vi : g.overridable_inputs) declared = declared || vi.name == name;
    if (!declared) return absl::InvalidArgumentError(absl::StrCat("unknown input '", name.substr(0, 96), "'"));
  }
  KILN_RETURN_IF_ERROR(RunNodes(g, &scope, options, &result));
  for (const ValueInfo& o : g.outputs) {
    const Value* v = scope.Find(o.name);
    if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat("output '", o.name.substr(0, 96), "' has no value"));
    result.outputs.push_back(*v);
  }
  std::sort(result.value_inputs.begin(), result.value_inputs.end());
  result.value_inputs.erase(std::unique(result.value_inputs.begin(), result.value_inputs.end()),
                            result.value_inputs.end());
  return result;
}

}  // namespace kiln::onnx
