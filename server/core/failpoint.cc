#include "server/core/failpoint.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace kiln::server::failpoint {
namespace {

constexpr std::string_view kPoints[] = {
    "checkpoint.after_temp_write", "checkpoint.after_temp_fsync", "checkpoint.after_rename",
    "checkpoint.after_manifest",   "publish.after_intent",        "publish.after_version_write",
    "publish.after_mark",          "infer.execute",               "graph.execute",
};

struct Point {
  bool kill = true;              // else: throw (or sleep when sleep_ms > 0)
  int64_t sleep_ms = 0;          // sleep<ms>: hold the thread that long, then go on
  int64_t fire_at = 1;           // the hit that fires; 0 = every hit (sleep without @n)
  std::atomic<int64_t> hits{0};  // hits so far
};

// Parsed once; never modified afterwards except the atomic counters.
struct Table {
  std::map<std::string, Point, std::less<>> points;
};

Table* Parse() {
  const char* env = std::getenv("KILN_FAILPOINTS");
  if (env == nullptr || *env == '\0') return nullptr;
  auto* table = new Table;  // lives for the process
  for (absl::string_view item : absl::StrSplit(env, ',', absl::SkipEmpty())) {
    const std::string text(item);
    const size_t eq = text.find('=');
    const std::string name = text.substr(0, eq);
    std::string action = eq == std::string::npos ? "" : text.substr(eq + 1);
    int64_t at = 1;
    bool explicit_at = false;
    if (const size_t a = action.find('@'); a != std::string::npos) {
      if (!absl::SimpleAtoi(action.substr(a + 1), &at) || at < 1) at = -1;
      action = action.substr(0, a);
      explicit_at = true;
    }
    int64_t sleep_ms = 0;
    const bool sleep = action.rfind("sleep", 0) == 0 && absl::SimpleAtoi(action.substr(5), &sleep_ms) &&
                       sleep_ms > 0 && sleep_ms <= 600000;
    if (!IsKnown(name) || (action != "kill" && action != "throw" && !sleep) || at < 1) {
      spdlog::error(
          "KILN_FAILPOINTS: ignoring '{}' (want <point>=kill|throw|sleep<ms>[@n], n >= 1, ms in "
          "[1, 600000], point one of {})",
          text,
          absl::StrJoin(kPoints, ", ",
                        [](std::string* out, std::string_view p) { out->append(p); }));
      continue;
    }
    table->points[name].fire_at = sleep && !explicit_at ? 0 : at;
    table->points[name].kill = action == "kill";
    table->points[name].sleep_ms = sleep ? sleep_ms : 0;
    spdlog::warn("KILN_FAILPOINTS: {} armed: {} at hit {}", name, action,
                 sleep && !explicit_at ? std::string("every") : std::to_string(at));
  }
  if (table->points.empty()) {
    delete table;
    return nullptr;
  }
  return table;
}

Table* GetTable() {
  static Table* const table = Parse();
  return table;
}

}  // namespace

bool IsKnown(std::string_view name) {
  for (std::string_view p : kPoints) {
    if (p == name) return true;
  }
  return false;
}

bool Armed() {
  static const bool armed = GetTable() != nullptr;
  return armed;
}

void Hit(std::string_view name) {
  Table* table = GetTable();
  if (table == nullptr) return;
  auto it = table->points.find(name);
  if (it == table->points.end()) return;
  const int64_t hit = it->second.hits.fetch_add(1) + 1;
  if (it->second.fire_at != 0 && hit != it->second.fire_at) return;
  if (it->second.sleep_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(it->second.sleep_ms));
    return;
  }
  if (!it->second.kill) {
    spdlog::warn("failpoint {}: throw (hit {})", std::string(name), hit);
    throw std::runtime_error(absl::StrCat("failpoint ", std::string(name), " fired"));
  }
  spdlog::warn("failpoint {}: kill (hit {})", std::string(name), hit);
  spdlog::default_logger()->flush();
  ::raise(SIGKILL);
}

}  // namespace kiln::server::failpoint
