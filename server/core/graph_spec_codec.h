// kiln.v1.Graph (wire) -> api::GraphSpec (the engine facade's plain struct). A field-for-field
// copy: no validation here (Engine::Prepare validates and names fields as the proto does).
#pragma once

#include "engine/api/graph_spec.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::server {

api::GraphSpec GraphSpecFromProto(const kiln::v1::Graph& graph);

}  // namespace kiln::server
