// Logging setup. kiln logs through spdlog; call InitLogging once at program start (kilnd, tools).
// Library code logs with spdlog::info/warn/... directly; without InitLogging spdlog's default
// logger (stderr, info level) is used.
#pragma once

#include <string_view>

namespace kiln {

// Sets the default logger's level ("trace".."off") and pattern. DEBUG>=2 forces "debug".
// Unknown level names fall back to "info". Thread-safe; idempotent.
void InitLogging(std::string_view level = "info");

}  // namespace kiln
