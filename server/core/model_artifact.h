// Load-time checks of a model version's files, per platform, before the version goes READY.
//
//   kiln_graph    <version>/model.graph (binary kiln.v1.Graph) or model.graph.pbtxt (text);
//                 structure checked by CheckGraphStructure and matched against the config.
//   kiln_builtin  parameters { key: "architecture" } names a known architecture
//                 (mnist_cnn, mlp) and <version>/model.safetensors exists.
//   kiln_onnx     <version>/model.onnx exists.
// Nothing is compiled or executed here (the engine does that later through engine/api).
#pragma once

#include <cstdint>
#include <filesystem>

#include "absl/status/status.h"
#include "inference/model_config.pb.h"
#include "kiln/v1/graph.pb.h"
#include "server/core/repository_files.h"

namespace kiln::server {

// Nodes per graph (model files and kiln.v1 requests); also the engine's GraphLimits::max_nodes.
inline constexpr int64_t kMaxGraphNodes = 1 << 16;
// Inputs and outputs per graph (model files and kiln.v1 requests); also GraphLimits::max_inputs /
// max_outputs of kilnd's engines.
inline constexpr int64_t kMaxGraphInputs = 1 << 12;
inline constexpr int64_t kMaxGraphOutputs = 1 << 12;

// Structural rules of kiln.v1.Graph (proto/kiln/v1/graph.proto): node count <= kMaxGraphNodes,
// input / output counts <= kMaxGraphInputs / kMaxGraphOutputs,
// every src index names an earlier node (so no cycle, no dangling source), INPUT nodes index
// `inputs`, outputs index `nodes`, names unique and non-empty, no op that carries source text.
// INVALID_ARGUMENT naming the field (e.g. "nodes[7].src[1]") on the first violation.
absl::Status CheckGraphStructure(const kiln::v1::Graph& graph);

// Checks the files of one version folder for `config` (already normalized): `version_dir` is
// "<model>/<version>" below the repository root, read through `files` (so no link is followed).
// NOT_FOUND if the model file is missing, INVALID_ARGUMENT if it is malformed or a link.
// For kiln_graph, the parsed graph is stored in `graph` when it is not null.
absl::Status CheckModelArtifact(const RepositoryFiles& files, const inference::ModelConfig& config,
                                const std::string& version_dir, kiln::v1::Graph* graph = nullptr);

}  // namespace kiln::server
