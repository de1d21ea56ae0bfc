// Triton's logging extension (kserve-v2-protocol.md "Trace and log settings"; gRPC LogSettings,
// REST GET/POST /v2/logging) on kilnd's spdlog logger:
//
//   log_info, log_warning, log_error   bool     INFO / WARNING / ERROR (and critical) lines on or off
//   log_verbose_level                  uint32   0 = no debug lines; >= 1 debug; >= 2 also trace
//   log_format                         string   "default" (spdlog's) or "ISO8601" (UTC timestamps)
//   log_file                           string   "" (kilnd logs to stderr); read-only: as in current
//                                               Triton, no API sets a path kilnd writes to
//
// An update names only the settings it changes; it is checked whole before anything changes (an
// unknown setting, a wrong type or value, a log_file change: INVALID_ARGUMENT naming the setting)
// and every answer carries all current settings. An empty update reads them.
// The three level switches are independent (log_info off with log_warning on drops INFO lines
// only): InitLogSettings wraps the default logger's sinks in a filter.
// Thread safety: UpdateLogSettings may be called concurrently; InitLogSettings once, before
// other threads log.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::server {

using LogSettingValue = std::variant<bool, int64_t, std::string>;
using LogSettingList = std::vector<std::pair<std::string, LogSettingValue>>;

// Installs the level filter on spdlog's default logger and the start-up settings (--log-verbose,
// --log-format); sets spdlog's level and pattern to match.
void InitLogSettings(int64_t verbose_level, const std::string& format);

// Applies `updates` (see above); returns every setting, sorted by name. UNAVAILABLE before
// InitLogSettings.
absl::StatusOr<LogSettingList> UpdateLogSettings(const LogSettingList& updates);

}  // namespace kiln::server
