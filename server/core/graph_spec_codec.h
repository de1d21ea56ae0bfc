// kiln.v1.Graph (wire) -> api::GraphSpec (the engine facade's plain struct). A field-for-field
// copy: no validation here (Engine::Prepare validates and names fields as the proto does).
#pragma once

#include "absl/status/status.h"
#include "engine/api/graph_spec.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::server {

api::GraphSpec GraphSpecFromProto(const kiln::v1::Graph& graph);

// The cheap checks to run on a wire graph before copying it: INVALID_ARGUMENT "graph.nodes: N
// nodes exceed the limit kMaxGraphNodes" (likewise inputs and outputs, model_artifact.h), so a
// huge graph is refused before any per-node or per-name work.
absl::Status CheckGraphSize(const kiln::v1::Graph& graph);

}  // namespace kiln::server
