#include "engine/base/logging.h"

#include <string>

#include "engine/base/env.h"
#include "spdlog/spdlog.h"

namespace kiln {

void InitLogging(std::string_view level) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  if (DebugLevel() >= 2 && lvl > spdlog::level::debug) lvl = spdlog::level::debug;
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%t] %v");
}

}  // namespace kiln
