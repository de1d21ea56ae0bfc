// Clock helpers for code above the engine (server/*), which may include only engine/api.
// Re-exports kiln::NanosSince and kiln::SteadyNowNs (engine/base/clock.h).
#pragma once

#include "engine/base/clock.h"
