#include "server/core/graph_spec_codec.h"

#include "absl/strings/str_cat.h"
#include "server/core/model_artifact.h"

namespace kiln::server {

api::GraphSpec GraphSpecFromProto(const kiln::v1::Graph& graph) {
  using Kind = api::NodeArgSpec::Kind;
  api::GraphSpec spec;
  spec.name = graph.name();
  spec.inputs.reserve(graph.inputs_size());
  for (const auto& in : graph.inputs()) {
    spec.inputs.push_back({in.name(), in.dtype(), {in.shape().begin(), in.shape().end()},
                           {in.dim_names().begin(), in.dim_names().end()}});
  }
  spec.nodes.reserve(graph.nodes_size());
  for (const auto& n : graph.nodes()) {
    api::NodeSpec node;
    node.op = n.op();
    node.dtype = n.dtype();
    node.src.assign(n.src().begin(), n.src().end());
    const kiln::v1::NodeArg& a = n.arg();
    switch (a.value_case()) {
      case kiln::v1::NodeArg::kIntValue:
        node.arg.kind = Kind::kInt;
        node.arg.int_value = a.int_value();
        break;
      case kiln::v1::NodeArg::kFloatValue:
        node.arg.kind = Kind::kFloat;
        node.arg.float_value = a.float_value();
        break;
      case kiln::v1::NodeArg::kBoolValue:
        node.arg.kind = Kind::kBool;
        node.arg.bool_value = a.bool_value();
        break;
      case kiln::v1::NodeArg::kStringValue:
        node.arg.kind = Kind::kString;
        node.arg.string_value = a.string_value();
        break;
      case kiln::v1::NodeArg::kInts:
        node.arg.kind = Kind::kInts;
        node.arg.ints.assign(a.ints().values().begin(), a.ints().values().end());
        break;
      case kiln::v1::NodeArg::kReduce:
        node.arg.kind = Kind::kReduce;
        node.arg.reduce_op = a.reduce().op();
        node.arg.reduce_axes.assign(a.reduce().axes().begin(), a.reduce().axes().end());
        break;
      case kiln::v1::NodeArg::VALUE_NOT_SET:
        break;
    }
    spec.nodes.push_back(std::move(node));
  }
  spec.outputs.reserve(graph.outputs_size());
  for (const auto& o : graph.outputs()) spec.outputs.push_back({o.name(), o.node()});
  return spec;
}

absl::Status CheckGraphSize(const kiln::v1::Graph& graph) {
  if (graph.nodes_size() > kMaxGraphNodes) {
    return absl::InvalidArgumentError(absl::StrCat("graph.nodes: ", graph.nodes_size(),
                                                   " nodes exceed the limit ", kMaxGraphNodes,
                                                   " (kMaxGraphNodes)"));
  }
  if (graph.inputs_size() > kMaxGraphInputs) {
    return absl::InvalidArgumentError(absl::StrCat("graph.inputs: ", graph.inputs_size(),
                                                   " inputs exceed the limit ", kMaxGraphInputs));
  }
  if (graph.outputs_size() > kMaxGraphOutputs) {
    return absl::InvalidArgumentError(absl::StrCat("graph.outputs: ", graph.outputs_size(),
                                                   " outputs exceed the limit ", kMaxGraphOutputs));
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
