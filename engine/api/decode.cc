// GraphSpec decoding and graph building for engine/api. See decode.h.
#include "engine/api/decode.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/dtype/dtype_names.h"
#include "engine/schedule/schedule.h"

namespace kiln::api {
namespace {

// Tensor-level ops a graph from outside kiln may use (besides the pseudo-op INPUT).
bool AllowedOp(Op op) {
  if (op == Op::MULACC || op == Op::THREEFRY) return false;  // kernel-level / internal uses
  if (IsALU(op)) return true;
  switch (op) {
    case Op::CAST:
    case Op::CONST:
    case Op::RESHAPE:
    case Op::PERMUTE:
    case Op::EXPAND:
    case Op::PAD:
    case Op::SHRINK:
    case Op::FLIP:
    case Op::REDUCE_AXIS:
    case Op::CONTIGUOUS:
      return true;
    default:
      return false;
  }
}

absl::Status Invalid(const std::string& field, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", msg));
}

const char* KindName(NodeArgSpec::Kind k) {
  switch (k) {
    case NodeArgSpec::Kind::kNone: return "none";
    case NodeArgSpec::Kind::kInt: return "int_value";
    case NodeArgSpec::Kind::kFloat: return "float_value";
    case NodeArgSpec::Kind::kBool: return "bool_value";
    case NodeArgSpec::Kind::kString: return "string_value";
    case NodeArgSpec::Kind::kInts: return "ints";
    case NodeArgSpec::Kind::kReduce: return "reduce";
  }
  return "?";
}

// Element count of `shape` under the limits; error names `field`.
absl::StatusOr<int64_t> CheckedNumel(const std::string& field, absl::Span<const int64_t> shape,
                                     const GraphLimits& limits) {
  if (static_cast<int>(shape.size()) > limits.max_rank) {
    return Invalid(field, absl::StrCat("rank ", shape.size(), " exceeds the limit ", limits.max_rank));
  }
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) return Invalid(field, absl::StrCat("dim ", d, " is negative (", shape[d], ")"));
    if (shape[d] > limits.max_dim) {
      return Invalid(field, absl::StrCat("dim ", d, " = ", shape[d], " exceeds the limit ", limits.max_dim));
    }
    if (shape[d] != 0 && n > limits.max_elements / shape[d]) {
      return Invalid(field, absl::StrCat("element count of shape (", absl::StrJoin(shape, ", "),
                                         ") exceeds the limit ", limits.max_elements));
    }
    n *= shape[d];
  }
  if (n > limits.max_elements) {
    return Invalid(field, absl::StrCat("element count ", n, " exceeds the limit ", limits.max_elements));
  }
  return n;
}

absl::StatusOr<Arg> DecodeArg(const std::string& field, Op op, DType dtype, const NodeArgSpec& a,
                              const GraphLimits& limits) {
  using Kind = NodeArgSpec::Kind;
  auto want = [&](Kind k) -> absl::Status {
    if (a.kind == k) return absl::OkStatus();
    return Invalid(field + ".arg", absl::StrCat(std::string(OpName(op)), " needs ", KindName(k), ", got ", KindName(a.kind)));
  };
  switch (op) {
    case Op::CONST:
      switch (a.kind) {
        case Kind::kInt: return UOp::ConstArg(dtype, a.int_value);
        case Kind::kFloat: return UOp::ConstArg(dtype, a.float_value);
        case Kind::kBool: return UOp::ConstArg(dtype, static_cast<int64_t>(a.bool_value));
        default:
          return Invalid(field + ".arg", absl::StrCat("CONST needs int_value, float_value or bool_value, got ",
                                                      KindName(a.kind)));
      }
    case Op::RESHAPE:
    case Op::EXPAND:
    case Op::PERMUTE:
    case Op::FLIP:
    case Op::PAD:
    case Op::SHRINK: {
      KILN_RETURN_IF_ERROR(want(Kind::kInts));
      const size_t cap = static_cast<size_t>(limits.max_rank) * ((op == Op::PAD || op == Op::SHRINK) ? 2 : 1);
      if (a.ints.size() > cap) {
        return Invalid(field + ".arg.ints", absl::StrCat(a.ints.size(), " values exceed the rank limit ",
                                                         limits.max_rank));
      }
      return Arg(IntVec(a.ints.begin(), a.ints.end()));
    }
    case Op::REDUCE_AXIS: {
      KILN_RETURN_IF_ERROR(want(Kind::kReduce));
      std::optional<Op> rop = ParseOp(a.reduce_op);
      if (!rop || !IsReduceOp(*rop)) {
        return Invalid(field + ".arg.reduce.op", absl::StrCat("'", a.reduce_op.substr(0, 64),
                                                              "' is not ADD, MUL or MAX"));
      }
      IntVec axes(a.reduce_axes.begin(), a.reduce_axes.end());
      std::sort(axes.begin(), axes.end());
      if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
        return Invalid(field + ".arg.reduce.axes", "duplicate axis");
      }
      if (!axes.empty() && (axes.front() < 0 || axes.back() >= limits.max_rank)) {
        return Invalid(field + ".arg.reduce.axes", "axis out of range");
      }
      return Arg(ReduceArg{*rop, std::move(axes)});
    }
    default:
      KILN_RETURN_IF_ERROR(want(Kind::kNone));
      return Arg();
  }
}

// Makes `x` shape `target` (numpy broadcasting: left-pad with 1s, then expand).
absl::StatusOr<UOpPtr> BroadcastTo(const UOpPtr& x, const Shape& target) {
  if (x->shape() == target) return x;
  UOpPtr v = x;
  if (v->shape().size() < target.size()) {
    IntVec s(target.size() - v->shape().size(), 1);
    s.insert(s.end(), v->shape().begin(), v->shape().end());
    KILN_ASSIGN_OR_RETURN(v, UOp::Create(Op::RESHAPE, v->dtype(), {v}, s));
  }
  if (v->shape() == target) return v;
  return UOp::Create(Op::EXPAND, v->dtype(), {v}, IntVec(target.begin(), target.end()));
}

}  // namespace

bool IsAllowedOp(std::string_view op) {
  if (op == "INPUT") return true;
  std::optional<Op> o = ParseOp(op);
  return o.has_value() && AllowedOp(*o);
}

std::string WireDTypeName(DType d) {
  // Value dtypes by engine/dtype's long name (the one name table); others as DType::Name().
  if (!d.is_ptr && d.count == 1 && d.scalar != ScalarType::kVoid && d.scalar != ScalarType::kIndex) {
    return std::string(ScalarLongName(d.scalar));
  }
  return d.Name();
}

std::optional<DType> ParseWireDType(std::string_view name) {
  std::optional<DType> d = ParseDType(name);
  if (!d || d->is_ptr || d->count != 1 || d->scalar == ScalarType::kVoid || d->scalar == ScalarType::kIndex) {
    return std::nullopt;
  }
  return d;
}

int64_t DTypeItemSize(std::string_view dtype) {
  std::optional<DType> d = ParseWireDType(dtype);
  return d ? d->ItemSize() : 0;
}

absl::StatusOr<DecodedGraph> DecodeGraph(const GraphSpec& spec, const GraphLimits& limits) {
  DecodedGraph g;
  const int64_t n_nodes = static_cast<int64_t>(spec.nodes.size());
  if (n_nodes > limits.max_nodes) {
    return Invalid("nodes", absl::StrCat(n_nodes, " nodes exceed the limit ", limits.max_nodes));
  }
  if (n_nodes == 0) return Invalid("nodes", "the graph is empty");
  if (spec.outputs.empty()) return Invalid("outputs", "none given");
  if (static_cast<int64_t>(spec.inputs.size()) > limits.max_inputs) {
    return Invalid("inputs", absl::StrCat(spec.inputs.size(), " inputs exceed the limit ", limits.max_inputs));
  }
  if (static_cast<int64_t>(spec.outputs.size()) > limits.max_outputs) {
    return Invalid("outputs", absl::StrCat(spec.outputs.size(), " outputs exceed the limit ", limits.max_outputs));
  }

  absl::flat_hash_set<std::string_view> names;  // uniqueness in one pass (hashing, not pairwise)
  names.reserve(spec.inputs.size());
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const InputSpec& in = spec.inputs[i];
    const std::string field = absl::StrCat("inputs[", i, "]");
    if (in.name.empty()) return Invalid(field + ".name", "empty");
    if (!names.insert(in.name).second) {
      return Invalid(field + ".name", absl::StrCat("duplicate '", in.name.substr(0, 256), "'"));
    }
    std::optional<DType> dt = ParseWireDType(in.dtype);
    if (!dt) return Invalid(field + ".dtype", absl::StrCat("unknown dtype '", in.dtype.substr(0, 64), "'"));
    if (static_cast<int>(in.shape.size()) > limits.max_rank) {
      return Invalid(field + ".shape", absl::StrCat("rank ", in.shape.size(), " exceeds the limit ", limits.max_rank));
    }
    std::vector<int64_t> fixed;
    for (size_t d = 0; d < in.shape.size(); ++d) {
      if (in.shape[d] < -1) {
        return Invalid(absl::StrCat(field, ".shape[", d, "]"), absl::StrCat(in.shape[d], " is negative"));
      }
      if (in.shape[d] == -1) g.all_static = false;
      fixed.push_back(in.shape[d] == -1 ? 1 : in.shape[d]);
    }
    KILN_RETURN_IF_ERROR(CheckedNumel(field + ".shape", fixed, limits).status());
    if (!in.dim_names.empty() && in.dim_names.size() != in.shape.size()) {
      return Invalid(field + ".dim_names",
                     absl::StrCat(in.dim_names.size(), " names for rank ", in.shape.size(), " (none, or one per dim)"));
    }
    for (size_t d = 0; d < in.dim_names.size(); ++d) {
      const std::string& name = in.dim_names[d];
      if (name.empty()) continue;
      const std::string dfield = absl::StrCat(field, ".dim_names[", d, "]");
      if (name.size() > 256) return Invalid(dfield, absl::StrCat(name.size(), " bytes exceed the limit 256"));
      if (in.shape[d] != -1) {
        return Invalid(dfield, absl::StrCat("names shape[", d, "] = ", in.shape[d],
                                            "; a name goes only on a run-time dim (-1)"));
      }
    }
    g.inputs.push_back({in.name, *dt, in.shape, in.dim_names});
  }

  g.nodes.reserve(spec.nodes.size());
  for (int64_t i = 0; i < n_nodes; ++i) {
    const NodeSpec& ns = spec.nodes[i];
    const std::string field = absl::StrCat("nodes[", i, "]");
    DecodedNode node;
    std::optional<DType> dt = ParseWireDType(ns.dtype);
    if (!dt) return Invalid(field + ".dtype", absl::StrCat("unknown dtype '", ns.dtype.substr(0, 64), "'"));
    node.dtype = *dt;
    for (size_t s = 0; s < ns.src.size(); ++s) {
      if (static_cast<int64_t>(ns.src[s]) >= i) {
        return Invalid(absl::StrCat(field, ".src[", s, "]"),
                       absl::StrCat(ns.src[s], " is not an earlier node (nodes are in topological order)"));
      }
    }
    node.src = ns.src;
    if (ns.op == "INPUT") {
      if (!ns.src.empty()) return Invalid(field + ".src", "an INPUT node has no sources");
      if (ns.arg.kind != NodeArgSpec::Kind::kInt || ns.arg.int_value < 0 ||
          ns.arg.int_value >= static_cast<int64_t>(g.inputs.size())) {
        return Invalid(field + ".arg",
                       absl::StrCat("an INPUT node needs int_value in 0..", static_cast<int64_t>(g.inputs.size()) - 1));
      }
      node.is_input = true;
      node.input_index = static_cast<int>(ns.arg.int_value);
      if (g.inputs[node.input_index].dtype != node.dtype) {
        return Invalid(field + ".dtype", absl::StrCat(ns.dtype, " differs from inputs[", node.input_index, "].dtype ",
                                                      WireDTypeName(g.inputs[node.input_index].dtype)));
      }
      g.nodes.push_back(std::move(node));
      continue;
    }
    std::optional<Op> op = ParseOp(ns.op);
    if (!op) return Invalid(field + ".op", absl::StrCat("unknown op '", ns.op.substr(0, 64), "'"));
    if (!AllowedOp(*op)) {
      return Invalid(field + ".op", absl::StrCat(ns.op, IsInternalOnly(*op) ? " carries source text and" : "",
                                                 " is not accepted in a graph from outside kiln"));
    }
    node.op = *op;
    const OpInfo& info = GetOpInfo(*op);
    const int max_src = *op == Op::CONST ? 0 : info.max_src;
    const int n_src = static_cast<int>(ns.src.size());
    if (n_src < info.min_src || (max_src >= 0 && n_src > max_src)) {
      return Invalid(field + ".src", absl::StrCat(ns.op, " takes ", info.min_src,
                                                  max_src == info.min_src ? "" : absl::StrCat("..", max_src),
                                                  " sources, got ", n_src));
    }
    KILN_ASSIGN_OR_RETURN(node.arg, DecodeArg(field, *op, node.dtype, ns.arg, limits));
    g.nodes.push_back(std::move(node));
  }

  names.clear();
  names.reserve(spec.outputs.size());
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    const OutputSpec& o = spec.outputs[i];
    const std::string field = absl::StrCat("outputs[", i, "]");
    if (o.name.empty()) return Invalid(field + ".name", "empty");
    if (!names.insert(o.name).second) {
      return Invalid(field + ".name", absl::StrCat("duplicate '", o.name.substr(0, 256), "'"));
    }
    if (static_cast<int64_t>(o.node) >= n_nodes) {
      return Invalid(field + ".node", absl::StrCat(o.node, " is not a node index"));
    }
    g.outputs.push_back({o.name, o.node});
  }
  return g;
}

absl::Status CheckInputs(const DecodedGraph& g, const GraphLimits& limits, absl::Span<const HostTensorView> inputs) {
  if (inputs.size() != g.inputs.size()) {
    return Invalid("inputs", absl::StrCat("the graph takes ", g.inputs.size(), " inputs, got ", inputs.size()));
  }
  // Named run-time dims: the first input dim seen with each name, and its size in this run.
  struct Named {
    size_t input, dim;
    int64_t size;
  };
  absl::flat_hash_map<std::string_view, Named> named;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DecodedInput& want = g.inputs[i];
    const HostTensorView& t = inputs[i];
    const std::string field = absl::StrCat("inputs[", i, "]");
    std::optional<DType> dt = ParseWireDType(t.dtype);
    if (!dt || *dt != want.dtype) {
      return Invalid(field + ".dtype", absl::StrCat("'", t.dtype.substr(0, 64), "' differs from the graph's ",
                                                    WireDTypeName(want.dtype), " for ", want.name));
    }
    if (t.shape.size() != want.shape.size()) {
      return Invalid(field + ".shape", absl::StrCat("rank ", t.shape.size(), " differs from the graph's rank ",
                                                    want.shape.size(), " for ", want.name));
    }
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (want.shape[d] != -1 && t.shape[d] != want.shape[d]) {
        return Invalid(absl::StrCat(field, ".shape[", d, "]"),
                       absl::StrCat(t.shape[d], " differs from the graph's ", want.shape[d], " for ", want.name));
      }
      if (d >= want.dim_names.size() || want.dim_names[d].empty()) continue;
      auto [it, first] = named.try_emplace(want.dim_names[d], Named{i, d, t.shape[d]});
      if (!first && it->second.size != t.shape[d]) {
        return Invalid(absl::StrCat(field, ".shape[", d, "]"),
                       absl::StrCat(t.shape[d], " differs from inputs[", it->second.input, "].shape[", it->second.dim,
                                    "] = ", it->second.size, ": both are dim '", want.dim_names[d].substr(0, 64),
                                    "'"));
      }
    }
    KILN_ASSIGN_OR_RETURN(int64_t n, CheckedNumel(field + ".shape", t.shape, limits));
    const uint64_t bytes = static_cast<uint64_t>(n) * static_cast<uint64_t>(want.dtype.ItemSize());
    if (t.data.size() != bytes) {
      return Invalid(field + ".raw", absl::StrCat(t.data.size(), " bytes, expected ", bytes, " for shape (",
                                                  absl::StrJoin(t.shape, ", "), ") of ", WireDTypeName(want.dtype)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<UOpPtr>> BuildOutputs(const DecodedGraph& g, const GraphLimits& limits,
                                                 absl::Span<const UOpPtr> inputs) {
  std::vector<UOpPtr> values(g.nodes.size());
  std::vector<UOpPtr> src;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const DecodedNode& n = g.nodes[i];
    if (n.is_input) {
      values[i] = inputs[n.input_index];
      continue;
    }
    const std::string field = absl::StrCat("nodes[", i, "]");
    src.clear();
    for (uint32_t s : n.src) src.push_back(values[s]);
    if (IsALU(n.op) && src.size() > 1) {  // numpy broadcasting between the sources
      Shape target = src[0]->shape();
      for (size_t k = 1; k < src.size(); ++k) {
        absl::StatusOr<Shape> b = BroadcastShapes(target, src[k]->shape());
        if (!b.ok()) return Invalid(field, std::string(b.status().message()));
        target = *std::move(b);
      }
      KILN_RETURN_IF_ERROR(CheckedNumel(field, target, limits).status());
      for (UOpPtr& s : src) {
        absl::StatusOr<UOpPtr> b = BroadcastTo(s, target);
        if (!b.ok()) return Invalid(field, std::string(b.status().message()));
        s = *std::move(b);
      }
    }
    absl::StatusOr<UOpPtr> u = UOp::Create(n.op, n.dtype, src, n.arg);
    if (!u.ok()) return Invalid(field, std::string(u.status().message()));
    if ((*u)->has_shape()) {
      KILN_RETURN_IF_ERROR(CheckedNumel(field, (*u)->shape(), limits).status());
    }
    values[i] = *std::move(u);
  }
  std::vector<UOpPtr> out;
  out.reserve(g.outputs.size());
  for (const DecodedOutput& o : g.outputs) out.push_back(values[o.node]);
  return out;
}

namespace {

// Outputs of a build over placeholder buffers (BUFFER nodes without memory) of the given shapes.
absl::StatusOr<std::vector<Shape>> PlaceholderBuild(const DecodedGraph& g, const GraphLimits& limits,
                                                    const std::vector<std::vector<int64_t>>& shapes,
                                                    const std::string& device) {
  std::vector<UOpPtr> placeholders;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const DType dtype = g.inputs[i].dtype;
    const std::vector<int64_t>& shape = shapes[i];
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // bounded by DecodeGraph / CheckInputs
    UOpPtr b = NewBuffer(dtype, n, device);
    if (shape.size() != 1) b = UOp::Make(Op::RESHAPE, dtype, {b}, IntVec(shape.begin(), shape.end()));
    placeholders.push_back(std::move(b));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> outs, BuildOutputs(g, limits, placeholders));
  std::vector<Shape> out;
  out.reserve(outs.size());
  for (const UOpPtr& o : outs) out.push_back(o->shape());
  return out;
}

int64_t StringHeap(const std::string& s) { return s.capacity() > 15 ? static_cast<int64_t>(s.capacity()) + 1 : 0; }

}  // namespace

absl::Status CheckBuild(DecodedGraph& g, const GraphLimits& limits, const std::string& device) {
  std::vector<std::vector<int64_t>> shapes;
  for (const DecodedInput& in : g.inputs) shapes.push_back(in.shape);
  KILN_ASSIGN_OR_RETURN(g.static_output_shapes, PlaceholderBuild(g, limits, shapes, device));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Shape>> OutputShapes(const DecodedGraph& g, const GraphLimits& limits,
                                                absl::Span<const HostTensorView> inputs,
                                                const std::string& device) {
  std::vector<std::vector<int64_t>> shapes;
  for (const HostTensorView& in : inputs) shapes.push_back(in.shape);
  return PlaceholderBuild(g, limits, shapes, device);
}

int64_t SpecBytes(const GraphSpec& spec) {
  int64_t n = static_cast<int64_t>(sizeof(GraphSpec)) + StringHeap(spec.name);
  for (const InputSpec& in : spec.inputs) {
    n += static_cast<int64_t>(sizeof(InputSpec)) + StringHeap(in.name) + StringHeap(in.dtype) +
         static_cast<int64_t>(in.shape.capacity() * sizeof(int64_t));
  }
  for (const NodeSpec& node : spec.nodes) {
    n += static_cast<int64_t>(sizeof(NodeSpec)) + StringHeap(node.op) + StringHeap(node.dtype) +
         static_cast<int64_t>(node.src.capacity() * sizeof(uint32_t)) + StringHeap(node.arg.string_value) +
         StringHeap(node.arg.reduce_op) +
         static_cast<int64_t>((node.arg.ints.capacity() + node.arg.reduce_axes.capacity()) * sizeof(int64_t));
  }
  for (const OutputSpec& o : spec.outputs) n += static_cast<int64_t>(sizeof(OutputSpec)) + StringHeap(o.name);
  return n;
}

int64_t DecodedBytes(const DecodedGraph& g) {
  int64_t n = static_cast<int64_t>(sizeof(DecodedGraph));
  for (const DecodedInput& in : g.inputs) {
    n += static_cast<int64_t>(sizeof(DecodedInput)) + StringHeap(in.name) +
         static_cast<int64_t>(in.shape.capacity() * sizeof(int64_t));
  }
  for (const DecodedNode& node : g.nodes) {
    n += static_cast<int64_t>(sizeof(DecodedNode)) + static_cast<int64_t>(node.src.capacity() * sizeof(uint32_t));
    if (const IntVec* v = std::get_if<IntVec>(&node.arg)) n += static_cast<int64_t>(v->capacity() * sizeof(int64_t));
    if (const ReduceArg* r = std::get_if<ReduceArg>(&node.arg)) {
      n += static_cast<int64_t>(r->axes.capacity() * sizeof(int64_t));
    }
  }
  for (const DecodedOutput& o : g.outputs) n += static_cast<int64_t>(sizeof(DecodedOutput)) + StringHeap(o.name);
  for (const Shape& s : g.static_output_shapes) n += static_cast<int64_t>(s.capacity() * sizeof(int64_t));
  return n;
}

}  // namespace kiln::api
