#include "server/core/model_artifact.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/text_format.h"
#include "server/core/limits.h"
#include "server/core/model_config.h"

namespace kiln::server {
namespace {

constexpr const char* kBuiltinArchitectures[] = {"mnist_cnn", "mlp"};

// Reads a regular file of at most kMaxArtifactBytes. `shown` is the name used in messages
// (relative to the model folder; never the absolute path).
absl::StatusOr<std::string> ReadArtifact(const std::filesystem::path& path,
                                         const std::string& shown) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("model file ", shown, " is missing"));
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("model file ", shown, " is unreadable"));
  if (static_cast<int64_t>(size) > kMaxArtifactBytes) {
    return absl::InvalidArgumentError(absl::StrCat("model file ", shown, ": ", size,
                                                   " bytes exceed the limit ", kMaxArtifactBytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream data;
  data << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::NotFoundError(absl::StrCat("model file ", shown, " is unreadable"));
  }
  return data.str();
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

absl::Status CheckGraphModel(const inference::ModelConfig& config,
                             const std::filesystem::path& version_dir,
                             const std::string& version_name, kiln::v1::Graph* graph_out) {
  std::string file = DefaultModelFilename(config);
  const bool explicit_name = !config.default_model_filename().empty();
  std::error_code ec;
  if (!explicit_name && !std::filesystem::exists(version_dir / file, ec) &&
      std::filesystem::exists(version_dir / "model.graph.pbtxt", ec)) {
    file = "model.graph.pbtxt";
  }
  const std::string shown = absl::StrCat(version_name, "/", file);
  absl::StatusOr<std::string> read = ReadArtifact(version_dir / file, shown);
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

absl::Status CheckBuiltinModel(const inference::ModelConfig& config,
                               const std::filesystem::path& version_dir,
                               const std::string& version_name) {
  auto it = config.parameters().find("architecture");
  if (it == config.parameters().end()) {
    return absl::InvalidArgumentError(
        "config parameters: kiln_builtin needs parameters { key: \"architecture\" }");
  }
  const std::string& arch = it->second.string_value();
  bool known = false;
  for (const char* a : kBuiltinArchitectures) known = known || arch == a;
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("config parameters[architecture]: unknown architecture '", arch,
                     "' (known: ", absl::StrJoin(kBuiltinArchitectures, ", "), ")"));
  }
  const std::string file = DefaultModelFilename(config);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(version_dir / file, ec)) {
    return absl::NotFoundError(absl::StrCat("model file ", version_name, "/", file, " is missing"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckGraphStructure(const kiln::v1::Graph& graph) {
  if (graph.nodes_size() > kMaxGraphNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: ", graph.nodes_size(), " nodes exceed the limit ", kMaxGraphNodes));
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

absl::Status CheckModelArtifact(const inference::ModelConfig& config,
                                const std::filesystem::path& version_dir,
                                kiln::v1::Graph* graph) {
  const std::string version_name = version_dir.filename().string();
  if (config.platform() == kPlatformGraph) {
    return CheckGraphModel(config, version_dir, version_name, graph);
  }
  if (config.platform() == kPlatformBuiltin) {
    return CheckBuiltinModel(config, version_dir, version_name);
  }
  const std::string file = DefaultModelFilename(config);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(version_dir / file, ec)) {
    return absl::NotFoundError(absl::StrCat("model file ", version_name, "/", file, " is missing"));
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
