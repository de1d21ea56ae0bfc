#include "server/core/model_artifact.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/api/architectures.h"
#include "google/protobuf/text_format.h"
#include "server/core/limits.h"
#include "server/core/model_config.h"

namespace kiln::server {
namespace {

// The last component of "<model>/<version>": what messages show of a version folder.
std::string VersionName(const std::string& version_dir) {
  const size_t slash = version_dir.rfind('/');
  return slash == std::string::npos ? version_dir : version_dir.substr(slash + 1);
}

// OK if `rel` is a readable regular file of the repository (no link, one name).
absl::Status CheckFile(const RepositoryFiles& files, const std::string& rel, const std::string& shown) {
  return files.Open(rel, shown).status();
}

template <typename Tensors>
absl::Status MatchNames(std::string_view what, const Tensors& config_tensors,
                        const std::set<std::string>& graph_names) {
  std::set<std::string> config_names;
  for (const auto& t : config_tensors) config_names.insert(t.name());
  if (config_names != graph_names) {
    return absl::InvalidArgumentError(absl::StrCat("graph ", std::string(what), " [",
                                                   absl::StrJoin(graph_names, ", "),
                                                   "] differ from the config ", std::string(what),
                                                   " [", absl::StrJoin(config_names, ", "), "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckGraphModel(const RepositoryFiles& files, const inference::ModelConfig& config,
                             const std::string& version_dir, kiln::v1::Graph* graph_out) {
  const std::string version_name = VersionName(version_dir);
  std::string file = DefaultModelFilename(config);
  const bool explicit_name = !config.default_model_filename().empty();
  if (!explicit_name && files.Stat(version_dir + "/" + file) == RepositoryFiles::Kind::kMissing &&
      files.Stat(version_dir + "/model.graph.pbtxt") != RepositoryFiles::Kind::kMissing) {
    file = "model.graph.pbtxt";
  }
  const std::string shown = absl::StrCat(version_name, "/", file);
  absl::StatusOr<std::string> read =
      files.Read(version_dir + "/" + file, kMaxArtifactBytes, absl::StrCat("model file ", shown));
  if (!read.ok()) return read.status();
  const std::string& data = *read;
  kiln::v1::Graph graph;
  const bool text = file.size() > 6 && file.substr(file.size() - 6) == ".pbtxt";
  const bool parsed = text ? google::protobuf::TextFormat::ParseFromString(data, &graph)
                           : graph.ParseFromString(data);
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat("model file ", shown, " is not a ",
                                                   text ? "text" : "binary", " kiln.v1.Graph"));
  }
  absl::Status status = CheckGraphStructure(graph);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model file ", shown, ": ", std::string(status.message())));
  }
  std::set<std::string> inputs;
  std::set<std::string> outputs;
  for (const auto& in : graph.inputs()) inputs.insert(in.name());
  for (const auto& out : graph.outputs()) outputs.insert(out.name());
  if (absl::Status s = MatchNames("inputs", config.input(), inputs); !s.ok()) return s;
  if (absl::Status s = MatchNames("outputs", config.output(), outputs); !s.ok()) return s;
  if (graph_out != nullptr) *graph_out = std::move(graph);
  return absl::OkStatus();
}

absl::Status CheckBuiltinModel(const RepositoryFiles& files, const inference::ModelConfig& config,
                               const std::string& version_dir) {
  const std::string version_name = VersionName(version_dir);
  auto it = config.parameters().find("architecture");
  if (it == config.parameters().end()) {
    return absl::InvalidArgumentError(
        "config parameters: kiln_builtin needs parameters { key: \"architecture\" }");
  }
  const std::string& arch = it->second.string_value();
  if (api::FindArchitecture(arch) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("config parameters[architecture]: unknown architecture '", arch,
                     "' (known: ", api::KnownArchitectures(), ")"));
  }
  const std::string file = DefaultModelFilename(config);
  return CheckFile(files, version_dir + "/" + file, absl::StrCat("model file ", version_name, "/", file));
}

}  // namespace

absl::Status CheckGraphStructure(const kiln::v1::Graph& graph) {
  if (graph.nodes_size() > kMaxGraphNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: ", graph.nodes_size(), " nodes exceed the limit ", kMaxGraphNodes));
  }
  if (graph.inputs_size() > kMaxGraphInputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: ", graph.inputs_size(), " inputs exceed the limit ", kMaxGraphInputs));
  }
  if (graph.outputs_size() > kMaxGraphOutputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("outputs: ", graph.outputs_size(), " outputs exceed the limit ", kMaxGraphOutputs));
  }
  if (graph.nodes_size() == 0) return absl::InvalidArgumentError("nodes: the graph is empty");
  if (graph.outputs_size() == 0) return absl::InvalidArgumentError("outputs: none given");
  std::set<std::string> names;
  for (int i = 0; i < graph.inputs_size(); ++i) {
    const auto& in = graph.inputs(i);
    if (in.name().empty() || !names.insert(in.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[", i, "].name: empty or duplicate name '", in.name(), "'"));
    }
    if (in.shape_size() > kMaxTensorRank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "].shape: rank ", in.shape_size(), " exceeds the limit ", kMaxTensorRank));
    }
    for (int d = 0; d < in.shape_size(); ++d) {
      if (in.shape(d) < -1) {
        return absl::InvalidArgumentError(
            absl::StrCat("inputs[", i, "].shape[", d, "]: ", in.shape(d), " is negative"));
      }
    }
  }
  for (int i = 0; i < graph.nodes_size(); ++i) {
    const auto& node = graph.nodes(i);
    if (node.op().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("nodes[", i, "].op: empty"));
    }
    if (node.op() == "CUSTOM" || node.op() == "CUSTOMI") {
      return absl::InvalidArgumentError(absl::StrCat("nodes[", i, "].op: ", node.op(),
                                                     " carries source text and is not accepted"));
    }
    for (int s = 0; s < node.src_size(); ++s) {
      if (node.src(s) >= static_cast<uint32_t>(i)) {
        return absl::InvalidArgumentError(
            absl::StrCat("nodes[", i, "].src[", s, "]: ", node.src(s),
                         " is not an earlier node (nodes are in topological order)"));
      }
    }
    if (node.op() == "INPUT") {
      if (!node.arg().has_int_value() || node.arg().int_value() < 0 ||
          node.arg().int_value() >= graph.inputs_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "nodes[", i, "].arg: an INPUT node needs int_value in 0..", graph.inputs_size() - 1));
      }
    }
  }
  std::set<std::string> output_names;
  for (int i = 0; i < graph.outputs_size(); ++i) {
    const auto& out = graph.outputs(i);
    if (out.name().empty() || !output_names.insert(out.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("outputs[", i, "].name: empty or duplicate name '", out.name(), "'"));
    }
    if (out.node() >= static_cast<uint32_t>(graph.nodes_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("outputs[", i, "].node: ", out.node(), " is not a node index"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckModelArtifact(const RepositoryFiles& files, const inference::ModelConfig& config,
                                const std::string& version_dir, kiln::v1::Graph* graph) {
  if (config.platform() == kPlatformGraph) return CheckGraphModel(files, config, version_dir, graph);
  if (config.platform() == kPlatformBuiltin) return CheckBuiltinModel(files, config, version_dir);
  const std::string file = DefaultModelFilename(config);
  return CheckFile(files, version_dir + "/" + file,
                   absl::StrCat("model file ", VersionName(version_dir), "/", file));
}

}  // namespace kiln::server
