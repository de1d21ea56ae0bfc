#include "server/core/log_settings.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/sinks/sink.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

struct Switches {
  std::atomic<bool> info{true};
  std::atomic<bool> warning{true};
  std::atomic<bool> error{true};
  std::atomic<int64_t> verbose{0};
};

Switches& Live() {
  static Switches* s = new Switches;
  return *s;
}

// Drops the lines whose level is switched off, forwards the rest to the wrapped sink.
class LevelFilterSink final : public spdlog::sinks::sink {
 public:
  explicit LevelFilterSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override {
    if (Allowed(msg.level)) inner_->log(msg);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  static bool Allowed(spdlog::level::level_enum level) {
    const Switches& s = Live();
    switch (level) {
      case spdlog::level::trace: return s.verbose.load(std::memory_order_relaxed) >= 2;
      case spdlog::level::debug: return s.verbose.load(std::memory_order_relaxed) >= 1;
      case spdlog::level::info: return s.info.load(std::memory_order_relaxed);
      case spdlog::level::warn: return s.warning.load(std::memory_order_relaxed);
      case spdlog::level::err:
      case spdlog::level::critical: return s.error.load(std::memory_order_relaxed);
      default: return true;
    }
  }
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

struct State {
  absl::Mutex mu;
  bool initialized ABSL_GUARDED_BY(mu) = false;
  std::string format ABSL_GUARDED_BY(mu) = "default";
};

State& Shared() {
  static State* s = new State;
  return *s;
}

void ApplyLevel(int64_t verbose) {
  spdlog::set_level(verbose >= 2 ? spdlog::level::trace
                    : verbose >= 1 ? spdlog::level::debug
                                   : spdlog::level::info);
}

void ApplyFormat(const std::string& format) {
  if (format == "ISO8601") {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v", spdlog::pattern_time_type::utc);
  } else {
    spdlog::set_pattern("%+", spdlog::pattern_time_type::local);  // spdlog's default
  }
}

absl::Status WrongType(const std::string& key, const char* want) {
  return absl::InvalidArgumentError(absl::StrCat("settings.", key, ": expected ", want));
}

}  // namespace

void InitLogSettings(int64_t verbose_level, const std::string& format) {
  State& state = Shared();
  absl::MutexLock lock(&state.mu);
  if (!state.initialized) {
    for (auto& sink : spdlog::default_logger()->sinks()) {
      sink = std::make_shared<LevelFilterSink>(sink);
    }
    state.initialized = true;
  }
  Live().verbose.store(verbose_level < 0 ? 0 : verbose_level);
  state.format = format == "ISO8601" ? "ISO8601" : "default";
  ApplyLevel(Live().verbose.load());
  ApplyFormat(state.format);
}

absl::StatusOr<LogSettingList> UpdateLogSettings(const LogSettingList& updates) {
  State& state = Shared();
  Switches& live = Live();
  absl::MutexLock lock(&state.mu);
  if (!state.initialized) return absl::UnavailableError("logging: the log settings are not set up");
  // Checked whole first: nothing changes unless every update is valid.
  std::map<std::string, const LogSettingValue*> by_key;
  for (const auto& [key, value] : updates) {
    const bool is_bool = std::holds_alternative<bool>(value);
    const bool is_int = std::holds_alternative<int64_t>(value);
    const bool is_string = std::holds_alternative<std::string>(value);
    if (key == "log_info" || key == "log_warning" || key == "log_error") {
      if (!is_bool) return WrongType(key, "a boolean");
    } else if (key == "log_verbose_level") {
      if (!is_int) return WrongType(key, "a non-negative integer");
      const int64_t n = std::get<int64_t>(value);
      if (n < 0 || n > UINT32_MAX) {
        return absl::InvalidArgumentError(
            absl::StrCat("settings.log_verbose_level: ", n, " is outside [0, ", UINT32_MAX, "]"));
      }
    } else if (key == "log_format") {
      if (!is_string) return WrongType(key, "a string (default or ISO8601)");
      const std::string& f = std::get<std::string>(value);
      if (f != "default" && f != "ISO8601") {
        return absl::InvalidArgumentError(absl::StrCat(
            "settings.log_format: '", f.substr(0, 64), "' is not a log format (default, ISO8601)"));
      }
    } else if (key == "log_file") {
      if (!is_string) return WrongType(key, "a string");
      if (!std::get<std::string>(value).empty()) {
        return absl::InvalidArgumentError(
            "settings.log_file: cannot be changed through the API (kilnd logs to stderr; redirect "
            "it when starting kilnd)");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "settings.", key.substr(0, 64),
          ": unknown log setting (log_file, log_info, log_warning, log_error, log_verbose_level, "
          "log_format)"));
    }
    by_key[key] = &value;
  }
  for (const auto& [key, value] : by_key) {
    if (key == "log_info") live.info.store(std::get<bool>(*value));
    if (key == "log_warning") live.warning.store(std::get<bool>(*value));
    if (key == "log_error") live.error.store(std::get<bool>(*value));
    if (key == "log_verbose_level") {
      live.verbose.store(std::get<int64_t>(*value));
      ApplyLevel(live.verbose.load());
    }
    if (key == "log_format" && std::get<std::string>(*value) != state.format) {
      state.format = std::get<std::string>(*value);
      ApplyFormat(state.format);
    }
  }
  return LogSettingList{
      {"log_error", live.error.load()},
      {"log_file", std::string()},
      {"log_format", state.format},
      {"log_info", live.info.load()},
      {"log_verbose_level", live.verbose.load()},
      {"log_warning", live.warning.load()},
  };
}

}  // namespace kiln::server
