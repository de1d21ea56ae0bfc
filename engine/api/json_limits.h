// JSON limits for code above the engine (server/*), which may include only engine/api.
// Re-exports kiln::JsonLimits (engine/base/json_limits.h): the SAX filter bounding nesting depth
// and value count that the REST gateway and safetensors headers share.
#pragma once

#include "engine/base/json_limits.h"
