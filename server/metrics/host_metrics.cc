#include "server/metrics/host_metrics.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln::server {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ReadCpuTimes(CpuTimes* out) { return ParseProcStat(ReadFile("/proc/stat").c_str(), out); }

prometheus::MetricFamily Gauge(const char* name, const char* help, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric m;
  m.gauge.value = value;
  f.metric.push_back(m);
  return f;
}

}  // namespace

bool ParseProcStat(const char* text, CpuTimes* out) {
  if (std::strncmp(text, "cpu ", 4) != 0) return false;
  // user nice system idle iowait irq softirq steal (guest times are already inside user/nice)
  uint64_t v[8] = {};
  const char* p = text + 4;
  int n = 0;
  for (; n < 8; ++n) {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(p, &end, 10);
    if (end == p) break;
    v[n] = x;
    p = end;
  }
  if (n < 4) return false;
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) total += v[i];
  const uint64_t idle = v[3] + (n > 4 ? v[4] : 0);  // idle + iowait
  out->total = total;
  out->busy = total - idle;
  return true;
}

bool ParseMemInfo(const char* text, uint64_t* total_bytes, uint64_t* available_bytes) {
  bool have_total = false, have_available = false;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemTotal: %llu kB", &kib) == 1) {
      *total_bytes = kib * 1024;
      have_total = true;
    } else if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) {
      *available_bytes = kib * 1024;
      have_available = true;
    }
  }
  return have_total && have_available;
}

HostMetrics::HostMetrics() {
  absl::MutexLock l(&mu_);
  ReadCpuTimes(&last_);
}

std::vector<prometheus::MetricFamily> HostMetrics::Collect() const {
  double utilization = 0;
  CpuTimes now;
  if (ReadCpuTimes(&now)) {
    absl::MutexLock l(&mu_);
    if (now.total > last_.total && now.busy >= last_.busy) {
      utilization = static_cast<double>(now.busy - last_.busy) / static_cast<double>(now.total - last_.total);
      if (utilization > 1) utilization = 1;
    }
    last_ = now;
  }
  uint64_t total = 0, available = 0;
  if (!ParseMemInfo(ReadFile("/proc/meminfo").c_str(), &total, &available)) total = available = 0;
  const uint64_t used = total > available ? total - available : 0;
  return {Gauge("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", utilization),
          Gauge("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", static_cast<double>(total)),
          Gauge("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", static_cast<double>(used))};
}

std::vector<prometheus::MetricFamily> AuthMetrics::Collect() const {
  const Authenticator::Refusals r = auth_->refusals();
  prometheus::MetricFamily f;
  f.name = "kiln_auth_refusals_total";
  f.help = "Calls refused by API key checks and per-key limits, by reason";
  f.type = prometheus::MetricType::Counter;
  for (const auto& [reason, n] : {std::pair<const char*, uint64_t>{"unauthenticated", r.unauthenticated},
                                  {"permission", r.permission}, {"rate", r.rate}, {"concurrency", r.concurrency}}) {
    prometheus::ClientMetric m;
    m.label.push_back({"reason", reason});
    m.counter.value = static_cast<double>(n);
    f.metric.push_back(m);
  }
  return {f};
}

}  // namespace kiln::server
