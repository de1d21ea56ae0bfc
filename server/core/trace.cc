#include "server/core/trace.h"

#include <cstdio>
#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

// JSON string body (quotes added by the caller).
std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

absl::StatusOr<int64_t> OneInteger(const std::string& key, const std::vector<std::string>& value,
                                   int64_t min) {
  int64_t n = 0;
  if (value.size() != 1 || !absl::SimpleAtoi(value[0], &n) || n < min) {
    return absl::InvalidArgumentError(absl::StrCat(
        "settings.", key, ": expected one integer >= ", min,
        value.empty() ? std::string() : absl::StrCat(", got '", value[0].substr(0, 64), "'")));
  }
  return n;
}

}  // namespace

TraceManager::~TraceManager() { Flush(); }

TraceManager::Effective TraceManager::EffectiveLocked(const std::string& model) const {
  Effective e{global_.on.value_or(false), global_.rate.value_or(1000), global_.count.value_or(-1),
              global_.log_frequency.value_or(0)};
  auto it = models_.find(model);
  if (it != models_.end()) {
    const Setting& m = it->second;
    if (m.on) e.on = *m.on;
    if (m.rate) e.rate = *m.rate;
    if (m.count) e.count = *m.count;
    if (m.log_frequency) e.log_frequency = *m.log_frequency;
  }
  return e;
}

TraceSettingMap TraceManager::AsMapLocked(const std::string& model) const {
  const Effective e = EffectiveLocked(model);
  return {
      {"trace_file", {trace_file_}},
      {"trace_level", {e.on ? "TIMESTAMPS" : "OFF"}},
      {"trace_rate", {std::to_string(e.rate)}},
      {"trace_count", {std::to_string(e.count)}},
      {"log_frequency", {std::to_string(e.log_frequency)}},
      {"trace_mode", {"triton"}},
  };
}

absl::StatusOr<TraceSettingMap> TraceManager::Update(const std::string& model,
                                                     const TraceSettingUpdate& updates) {
  absl::MutexLock lock(&mu_);
  Setting next = model.empty() ? global_ : models_[model];
  for (const auto& [key, value] : updates) {
    const bool clear = !value.has_value() || value->empty();
    if (clear && model.empty() && key != "trace_file") {
      return absl::InvalidArgumentError(
          absl::StrCat("settings.", key.substr(0, 64), ": a global setting cannot be cleared"));
    }
    if (key == "trace_file") {
      if (!clear && (*value != std::vector<std::string>{trace_file_})) {
        return absl::InvalidArgumentError(
            "settings.trace_file: cannot be changed through the API (start kilnd with --trace-file)");
      }
    } else if (key == "trace_mode") {
      if (!clear && *value != std::vector<std::string>{"triton"}) {
        return absl::InvalidArgumentError("settings.trace_mode: only 'triton' is implemented");
      }
    } else if (key == "trace_level") {
      if (clear) {
        next.on.reset();
        continue;
      }
      std::set<std::string> levels(value->begin(), value->end());
      if (levels == std::set<std::string>{"OFF"}) {
        next.on = false;
      } else if (levels == std::set<std::string>{"TIMESTAMPS"}) {
        if (trace_file_.empty()) {
          return absl::InvalidArgumentError(
              "settings.trace_level: tracing needs a trace file (start kilnd with --trace-file)");
        }
        next.on = true;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "settings.trace_level: expected [\"OFF\"] or [\"TIMESTAMPS\"], got '",
            (*value)[0].substr(0, 64), "'", value->size() > 1 ? " and more" : "",
            " (TENSORS is not implemented)"));
      }
    } else if (key == "trace_rate" || key == "trace_count" || key == "log_frequency") {
      std::optional<int64_t>& field =
          key == "trace_rate" ? next.rate : key == "trace_count" ? next.count : next.log_frequency;
      if (clear) {
        field.reset();
        continue;
      }
      absl::StatusOr<int64_t> n = OneInteger(key, *value, key == "trace_rate" ? 1 : key == "trace_count" ? -1 : 0);
      if (!n.ok()) return n.status();
      field = *n;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "settings.", key.substr(0, 64),
          ": unknown trace setting (trace_file, trace_level, trace_rate, trace_count, "
          "log_frequency, trace_mode)"));
    }
  }
  if (model.empty()) {
    global_ = next;
  } else {
    models_[model] = next;
    seen_.erase(model);
  }
  bool on = global_.on.value_or(false);
  for (const auto& [name, s] : models_) on = on || s.on.value_or(false);
  any_on_.store(on, std::memory_order_relaxed);
  return AsMapLocked(model);
}

uint64_t TraceManager::Sample(const std::string& model) {
  if (!any_on_.load(std::memory_order_relaxed)) return 0;
  absl::MutexLock lock(&mu_);
  const Effective e = EffectiveLocked(model);
  if (!e.on || e.count == 0) return 0;
  if (seen_[model]++ % static_cast<uint64_t>(e.rate) != 0) return 0;
  if (e.count > 0) {  // the count of whoever set it: the model's own, else the global one
    auto it = models_.find(model);
    std::optional<int64_t>& count =
        it != models_.end() && it->second.count ? it->second.count : global_.count;
    *count -= 1;
  }
  ++outstanding_;
  return next_id_++;
}

void TraceManager::Record(TraceRecord record) {
  absl::MutexLock lock(&mu_);
  collected_.push_back(std::move(record));
  if (outstanding_ > 0) --outstanding_;
  const Effective e = EffectiveLocked(collected_.back().model_name);
  // A spent count writes once the traces it sampled are all in.
  if ((e.log_frequency > 0 && static_cast<int64_t>(collected_.size()) >= e.log_frequency) ||
      (e.count == 0 && outstanding_ == 0)) {
    WriteLocked(absl::StrCat(trace_file_, ".", file_index_++));
  }
}

void TraceManager::Flush() {
  absl::MutexLock lock(&mu_);
  if (collected_.empty()) return;
  // Into <trace_file> when nothing was written yet, else into the next indexed file.
  WriteLocked(file_index_ > 0 ? absl::StrCat(trace_file_, ".", file_index_++) : trace_file_);
}

void TraceManager::WriteLocked(const std::string& path) {
  if (collected_.empty() || path.empty()) return;
  std::string out = "[";
  bool first = true;
  auto add = [&](const std::string& object) {
    if (!first) out += ",";
    first = false;
    out += object;
  };
  for (const TraceRecord& r : collected_) {
    int64_t version = 0;
    const std::string version_json =
        absl::SimpleAtoi(r.model_version, &version) ? std::to_string(version)
                                                     : absl::StrCat("\"", Escape(r.model_version), "\"");
    add(absl::StrCat("{\"id\":", r.id, ",\"model_name\":\"", Escape(r.model_name),
                     "\",\"model_version\":", version_json, ",\"request_id\":\"", Escape(r.request_id),
                     "\",\"parent_id\":0}"));
    for (const auto& [name, ns] : r.timestamps) {
      add(absl::StrCat("{\"id\":", r.id, ",\"timestamps\":[{\"name\":\"", name, "\",\"ns\":", ns, "}]}"));
    }
  }
  out += "]";
  std::ofstream file(path, std::ios::trunc);
  file << out;
  file.close();
  if (!file) {
    spdlog::error("trace: cannot write {} traces to {}", collected_.size(), path);
  }
  collected_.clear();
}

}  // namespace kiln::server
