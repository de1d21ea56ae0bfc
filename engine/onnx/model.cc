#include "engine/onnx/model.h"

#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/onnx/op_registry.h"
#include "engine/onnx/tensor_proto.h"
#include "onnx/onnx-ml.pb.h"

namespace kiln::onnx {
namespace {

constexpr int kMaxGraphDepth = 16;

// Domains kiln knows and the opset range each may be imported at.
struct DomainRange {
  const char* name;
  int64_t max;
};
constexpr DomainRange kDomains[] = {
    {"", kMaxOnnxOpset}, {"ai.onnx.ml", 5}, {"ai.onnx.preview.training", 1}, {"ai.onnx.preview", 1}};

std::string Trunc(const std::string& s) { return s.size() > 96 ? s.substr(0, 96) + "..." : s; }

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

struct Ctx {
  const std::map<std::string, int64_t>* opsets;
  ExternalDataPolicy policy;
  LoadOptions options;
  std::map<std::tuple<std::string, std::string, int64_t>, int>* uses;
};

absl::StatusOr<ValueInfo> DecodeValueInfo(const ::onnx::ValueInfoProto& vi, const std::string& role) {
  ValueInfo out;
  out.name = vi.name();
  const std::string what = absl::StrCat(role, " '", Trunc(vi.name()), "'");
  const ::onnx::TypeProto* type = &vi.type();
  if (type->has_optional_type()) {
    out.kind = ValueInfo::Kind::kOptional;
    type = &type->optional_type().elem_type();
  }
  if (type->has_sequence_type()) {
    if (out.kind != ValueInfo::Kind::kOptional) out.kind = ValueInfo::Kind::kSequence;
    type = &type->sequence_type().elem_type();
  }
  if (!vi.has_type()) return out;  // untyped (allowed for outputs of nested graphs)
  if (!type->has_tensor_type()) {
    if (type->has_map_type()) return Invalid(absl::StrCat(what, ": map values are not supported"));
    if (type->has_sparse_tensor_type()) return Invalid(absl::StrCat(what, ": sparse tensors are not supported"));
    if (type->has_sequence_type()) return Invalid(absl::StrCat(what, ": nested sequences are not supported"));
    return out;
  }
  const auto& tt = type->tensor_type();
  out.onnx_type = tt.elem_type();
  if (tt.elem_type() != 0) {
    absl::StatusOr<DType> dt = OnnxToDType(tt.elem_type());
    if (!dt.ok()) return Invalid(absl::StrCat(what, ": ", dt.status().message()));
    out.dtype = *dt;
  }
  if (tt.has_shape()) {
    out.has_shape = true;
    Shape static_dims;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        if (d.dim_value() < 0) return Invalid(absl::StrCat(what, ": negative dim ", d.dim_value()));
        out.dims.push_back(d.dim_value());
        out.dim_params.emplace_back();
        static_dims.push_back(d.dim_value());
      } else {
        out.dims.push_back(-1);
        out.dim_params.push_back(d.dim_param());
      }
    }
    absl::StatusOr<int64_t> n = CheckedNumel(static_dims, kMaxElements);
    if (!n.ok()) return Invalid(absl::StrCat(what, ": ", n.status().message()));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Graph>> DecodeGraph(const ::onnx::GraphProto& gp, const Ctx& ctx,
                                                         const absl::flat_hash_set<std::string>& outer, int depth);

// Names a graph reads from enclosing scopes (inputs of its nodes, nested graphs included, that it does not define).
void FreeNames(const ::onnx::GraphProto& g, absl::flat_hash_set<std::string>* out, int depth) {
  if (depth > kMaxGraphDepth) return;
  absl::flat_hash_set<std::string> defined;
  for (const auto& i : g.input()) defined.insert(i.name());
  for (const auto& i : g.initializer()) defined.insert(i.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) defined.insert(o);
  }
  absl::flat_hash_set<std::string> reads;
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) reads.insert(i);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) FreeNames(a.g(), &reads, depth + 1);
      for (const auto& sub : a.graphs()) FreeNames(sub, &reads, depth + 1);
    }
  }
  for (const auto& o : g.output()) reads.insert(o.name());
  for (const std::string& r : reads) {
    if (!r.empty() && !defined.count(r)) out->insert(r);
  }
}

absl::StatusOr<Attribute> DecodeAttribute(const ::onnx::AttributeProto& ap, const Node& node, const Ctx& ctx,
                                          const absl::flat_hash_set<std::string>& visible, int depth) {
  Attribute a;
  a.name = ap.name();
  const std::string what = absl::StrCat(node.Describe(), " attribute '", Trunc(ap.name()), "'");
  if (!ap.ref_attr_name().empty()) return Invalid(absl::StrCat(what, ": attribute references are not supported"));
  using T = ::onnx::AttributeProto;
  switch (ap.type()) {
    case T::FLOAT: a.type = Attribute::Type::kFloat; a.f = ap.f(); break;
    case T::INT: a.type = Attribute::Type::kInt; a.i = ap.i(); break;
    case T::STRING: a.type = Attribute::Type::kString; a.s = ap.s(); break;
    case T::TENSOR: {
      a.type = Attribute::Type::kTensor;
      KILN_ASSIGN_OR_RETURN(HostArray t, DecodeTensorProto(ap.t(), ctx.policy, what));
      a.t = std::make_shared<const HostArray>(std::move(t));
      break;
    }
    case T::GRAPH: {
      a.type = Attribute::Type::kGraph;
      KILN_ASSIGN_OR_RETURN(a.g, DecodeGraph(ap.g(), ctx, visible, depth + 1));
      break;
    }
    case T::FLOATS: a.type = Attribute::Type::kFloats; a.floats.assign(ap.floats().begin(), ap.floats().end()); break;
    case T::INTS: a.type = Attribute::Type::kInts; a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
    case T::STRINGS: a.type = Attribute::Type::kStrings; a.strings.assign(ap.strings().begin(), ap.strings().end()); break;
    case T::TENSORS: {
      a.type = Attribute::Type::kTensors;
      for (const auto& tp : ap.tensors()) {
        KILN_ASSIGN_OR_RETURN(HostArray t, DecodeTensorProto(tp, ctx.policy, what));
        a.tensors.push_back(std::make_shared<const HostArray>(std::move(t)));
      }
      break;
    }
    case T::GRAPHS: {
      a.type = Attribute::Type::kGraphs;
      for (const auto& g : ap.graphs()) {
        KILN_ASSIGN_OR_RETURN(auto sub, DecodeGraph(g, ctx, visible, depth + 1));
        a.graphs.push_back(std::move(sub));
      }
      break;
    }
    case T::UNDEFINED:
      // Pre-IR-3 files may omit the type: infer it from the field that is set.
      if (ap.has_f()) { a.type = Attribute::Type::kFloat; a.f = ap.f(); }
      else if (ap.has_i()) { a.type = Attribute::Type::kInt; a.i = ap.i(); }
      else if (ap.has_s()) { a.type = Attribute::Type::kString; a.s = ap.s(); }
      else if (ap.ints_size() > 0) { a.type = Attribute::Type::kInts; a.ints.assign(ap.ints().begin(), ap.ints().end()); }
      else if (ap.floats_size() > 0) {
        a.type = Attribute::Type::kFloats;
        a.floats.assign(ap.floats().begin(), ap.floats().end());
      } else {
        return Invalid(absl::StrCat(what, ": attribute has no type"));
      }
      break;
    default:
      return Invalid(absl::StrCat(what, ": attribute type ", static_cast<int>(ap.type()), " is not supported"));
  }
  return a;
}

// Resolves a node's op against the registry and checks its attributes.
absl::Status ResolveOp(Node& node, const Ctx& ctx) {
  auto& uses = *ctx.uses;
  ++uses[{node.domain, node.op, node.opset}];
  const OpDef* def = FindOp(node.domain, node.op, node.opset);
  if (def == nullptr) {
    if (!ctx.options.require_supported_ops) return absl::OkStatus();
    const std::string dom = node.domain.empty() ? "ai.onnx" : node.domain;
    if (!KnowsOp(node.domain, node.op)) {
      return Invalid(absl::StrCat(node.Describe(), ": operator ", Trunc(node.op), " of domain ", Trunc(dom),
                                  " is not supported by kiln"));
    }
    return Invalid(absl::StrCat(node.Describe(), ": kiln does not implement ", node.op, " at opset ", node.opset));
  }
  node.def = def;
  for (const Attribute& a : node.attributes) {
    if (std::find(def->attrs.begin(), def->attrs.end(), a.name) == def->attrs.end()) {
      if (!ctx.options.require_supported_ops) continue;
      return Invalid(absl::StrCat(node.Describe(), ": attribute '", Trunc(a.name), "' is not supported by kiln"));
    }
  }
  if (def->check && ctx.options.require_supported_ops) {
    absl::Status st = def->check(node);
    if (!st.ok()) return Invalid(absl::StrCat(node.Describe(), ": ", st.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Graph>> DecodeGraph(const ::onnx::GraphProto& gp, const Ctx& ctx,
                                                         const absl::flat_hash_set<std::string>& outer, int depth) {
  if (depth > kMaxGraphDepth) return Invalid(absl::StrCat("graphs nest deeper than ", kMaxGraphDepth, " levels"));
  auto g = std::make_shared<Graph>();
  g->name = gp.name();
  absl::flat_hash_set<std::string> known = outer;
  for (const auto& init : gp.initializer()) {
    const std::string what = absl::StrCat("initializer '", Trunc(init.name()), "'");
    KILN_ASSIGN_OR_RETURN(HostArray a, DecodeTensorProto(init, ctx.policy, what));
    g->initializers[init.name()] = std::make_shared<const HostArray>(std::move(a));
    known.insert(init.name());
  }
  if (gp.sparse_initializer_size() > 0) return Invalid("sparse initializers are not supported");
  for (const auto& in : gp.input()) {
    KILN_ASSIGN_OR_RETURN(ValueInfo vi, DecodeValueInfo(in, "graph input"));
    if (g->initializers.count(in.name())) {
      g->overridable_inputs.push_back(std::move(vi));
    } else {
      g->inputs.push_back(std::move(vi));
    }
    known.insert(in.name());
  }
  for (const auto& out : gp.output()) {
    KILN_ASSIGN_OR_RETURN(ValueInfo vi, DecodeValueInfo(out, "graph output"));
    g->outputs.push_back(std::move(vi));
  }

  // Nodes, then a topological sort (Kahn) over the names they produce.
  std::vector<Node> nodes;
  nodes.reserve(gp.node_size());
  absl::flat_hash_map<std::string, int> producer;
  for (int i = 0; i < gp.node_size(); ++i) {
    const auto& np = gp.node(i);
    Node n;
    n.name = np.name().empty() ? absl::StrCat("#", i) : np.name();
    n.op = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    auto it = ctx.opsets->find(n.domain);
    if (it == ctx.opsets->end()) {
      return Invalid(absl::StrCat("node '", Trunc(n.name), "' (", Trunc(n.op), "): domain '",
                                  Trunc(n.domain.empty() ? "ai.onnx" : n.domain), "' is not imported by the model"));
    }
    n.opset = it->second;
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const std::string& o : n.outputs) {
      if (o.empty()) continue;
      if (!producer.emplace(o, i).second || g->initializers.count(o)) {
        return Invalid(absl::StrCat(n.Describe(), ": output '", Trunc(o), "' is produced twice"));
      }
    }
    nodes.push_back(std::move(n));
  }
  for (const auto& [name, index] : producer) known.insert(name);
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<int>> users(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::set<int> deps;
    std::vector<std::string> reads = nodes[i].inputs;
    {  // names the node's subgraphs read from this graph order the node too
      absl::flat_hash_set<std::string> free;
      for (const auto& a : gp.node(static_cast<int>(i)).attribute()) {
        if (a.has_g()) FreeNames(a.g(), &free, depth + 1);
        for (const auto& sub : a.graphs()) FreeNames(sub, &free, depth + 1);
      }
      for (const std::string& f : free) {
        if (producer.count(f)) reads.push_back(f);
      }
    }
    for (const std::string& in : reads) {
      if (in.empty()) continue;
      auto it = producer.find(in);
      if (it != producer.end()) {
        deps.insert(it->second);
      } else if (!known.count(in)) {
        return Invalid(absl::StrCat(nodes[i].Describe(), ": input '", Trunc(in),
                                    "' is not produced by any node, graph input or initializer"));
      }
    }
    for (int d : deps) {
      if (d == static_cast<int>(i)) {
        return Invalid(absl::StrCat("the graph has a cycle: ", nodes[i].Describe(), " consumes its own output"));
      }
      users[d].push_back(static_cast<int>(i));
    }
    pending[i] = static_cast<int>(deps.size());
  }
  std::vector<int> order, ready;
  for (size_t i = nodes.size(); i-- > 0;) {
    if (pending[i] == 0) ready.push_back(static_cast<int>(i));
  }
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (auto u = users[i].rbegin(); u != users[i].rend(); ++u) {
      if (--pending[*u] == 0) ready.push_back(*u);
    }
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (pending[i] > 0) return Invalid(absl::StrCat("the graph has a cycle through ", nodes[i].Describe()));
    }
  }
  for (const ValueInfo& out : g->outputs) {
    if (!known.count(out.name)) {
      return Invalid(absl::StrCat("graph output '", Trunc(out.name), "' is not produced by any node or input"));
    }
  }
  // Attributes (nested graphs see every name of this graph) and op resolution, in execution order.
  for (int i : order) {
    Node& n = nodes[i];
    const auto& np = gp.node(i);
    for (const auto& ap : np.attribute()) {
      KILN_ASSIGN_OR_RETURN(Attribute a, DecodeAttribute(ap, n, ctx, known, depth));
      n.attributes.push_back(std::move(a));
    }
    KILN_RETURN_IF_ERROR(ResolveOp(n, ctx));
    g->nodes.push_back(std::move(n));
  }
  return std::shared_ptr<const Graph>(std::move(g));
}

absl::StatusOr<std::shared_ptr<const Model>> Decode(const ::onnx::ModelProto& mp, const std::string& base_dir,
                                                    const LoadOptions& options) {
  auto model = std::make_shared<Model>();
  model->ir_version = mp.ir_version();
  if (model->ir_version < kMinIrVersion || model->ir_version > kMaxIrVersion) {
    return Invalid(absl::StrCat("IR version ", model->ir_version, " is not supported (kiln reads IR versions ",
                                kMinIrVersion, " to ", kMaxIrVersion, ")"));
  }
  model->producer_name = mp.producer_name();
  model->producer_version = mp.producer_version();
  for (const auto& op : mp.opset_import()) {
    const std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    for (const DomainRange& d : kDomains) {
      if (domain == d.name && (op.version() < 1 || op.version() > d.max)) {
        return Invalid(absl::StrCat("opset ", op.version(), " of domain '", domain.empty() ? "ai.onnx" : domain,
                                    "' is not supported (kiln reads 1 to ", d.max, ")"));
      }
    }
    model->opsets[domain] = op.version();
  }
  if (model->opsets.empty()) model->opsets[""] = 1;  // IR 3 files without imports mean ai.onnx v1
  if (mp.functions_size() > 0) {
    // Nodes calling a model-local function fail as unknown ops; functions that are never called are harmless.
  }
  if (!mp.has_graph()) return Invalid("the model has no graph");
  std::map<std::tuple<std::string, std::string, int64_t>, int> uses;
  Ctx ctx{&model->opsets, ExternalDataPolicy{base_dir}, options, &uses};
  KILN_ASSIGN_OR_RETURN(model->graph, DecodeGraph(mp.graph(), ctx, {}, 0));
  for (const auto& [key, count] : uses) {
    model->op_uses.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), count});
  }
  return std::shared_ptr<const Model>(std::move(model));
}

}  // namespace

const Attribute* Node::Find(const std::string& attr) const {
  for (const Attribute& a : attributes) {
    if (a.name == attr) return &a;
  }
  return nullptr;
}

std::string Node::Describe() const {
  return absl::StrCat("node '", Trunc(name), "' (", Trunc(op), ", opset ", opset, ")");
}

absl::StatusOr<std::shared_ptr<const Model>> LoadModelFromBytes(const std::string& bytes, const std::string& base_dir,
                                                                const LoadOptions& options) {
  ::onnx::ModelProto mp;
  if (!mp.ParseFromString(bytes)) {
    return Invalid("the file is not a valid ONNX model (protobuf parse failed: truncated or corrupt)");
  }
  return Decode(mp, base_dir, options);
}

absl::StatusOr<std::shared_ptr<const Model>> LoadModel(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("model.onnx cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  return LoadModelFromBytes(ss.str(), dir, options);
}

std::vector<std::string> UnsupportedOps(const Model& model) {
  std::vector<std::string> out;
  for (const Model::OpUse& u : model.op_uses) {
    if (FindOp(u.domain, u.op, u.opset) != nullptr) continue;
    const std::string dom = u.domain.empty() ? "ai.onnx" : u.domain;
    out.push_back(KnowsOp(u.domain, u.op)
                      ? absl::StrCat(u.op, " (", dom, ", opset ", u.opset, "): not at this opset")
                      : absl::StrCat(u.op, " (", dom, ", opset ", u.opset, "): not implemented"));
  }
  return out;
}

absl::StatusOr<DType> OnnxToDType(int32_t t) {
  switch (t) {
    case 1: return dtypes::kFloat32;
    case 2: return dtypes::kUInt8;
    case 3: return dtypes::kInt8;
    case 4: return dtypes::kUInt16;
    case 5: return dtypes::kInt16;
    case 6: return dtypes::kInt32;
    case 7: return dtypes::kInt64;
    case 9: return dtypes::kBool;
    case 10: return dtypes::kFloat16;
    case 11: return dtypes::kFloat64;
    case 12: return dtypes::kUInt32;
    case 13: return dtypes::kUInt64;
    case 16: return dtypes::kBFloat16;
    default:
      return Invalid(absl::StrCat("dtype ", OnnxTypeName(t), " is not supported by kiln"));
  }
}

int32_t DTypeToOnnx(DType d) {
  switch (d.scalar) {
    case ScalarType::kFloat32: return 1;
    case ScalarType::kUInt8: return 2;
    case ScalarType::kInt8: return 3;
    case ScalarType::kUInt16: return 4;
    case ScalarType::kInt16: return 5;
    case ScalarType::kInt32: return 6;
    case ScalarType::kInt64: return 7;
    case ScalarType::kBool: return 9;
    case ScalarType::kFloat16: return 10;
    case ScalarType::kFloat64: return 11;
    case ScalarType::kUInt32: return 12;
    case ScalarType::kUInt64: return 13;
    case ScalarType::kBFloat16: return 16;
    default: return 0;
  }
}

std::string OnnxTypeName(int32_t t) {
  static const char* kNames[] = {"UNDEFINED", "FLOAT",   "UINT8",        "INT8",           "UINT16",
                                 "INT16",     "INT32",   "INT64",        "STRING",         "BOOL",
                                 "FLOAT16",   "DOUBLE",  "UINT32",       "UINT64",         "COMPLEX64",
                                 "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                 "FLOAT8E5M2FNUZ", "UINT4", "INT4",     "FLOAT4E2M1",     "FLOAT8E8M0",
                                 "UINT2",     "INT2"};
  if (t >= 0 && t < static_cast<int32_t>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[t];
  return absl::StrCat("UNDEFINED(", t, ")");
}

}  // namespace kiln::onnx
