// Status helpers for code above the engine (server/*), which may include only engine/api.
// Re-exports KILN_RETURN_IF_ERROR / KILN_ASSIGN_OR_RETURN (engine/base/status.h) and absl::Status.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/base/status.h"
