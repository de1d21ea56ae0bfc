// HostMetrics: Triton's host families, computed when Prometheus scrapes (a prometheus-cpp
// Collectable registered beside the registry):
//   nv_cpu_utilization         gauge  fraction (0..1) of CPU time not idle over every core, since
//                                     the previous scrape (since start-up on the first scrape)
//   nv_cpu_memory_total_bytes  gauge  MemTotal of /proc/meminfo
//   nv_cpu_memory_used_bytes   gauge  MemTotal - MemAvailable
// On a host without /proc the families are present with value 0. Thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/core/auth.h"

namespace kiln::server {

// Busy and total jiffies summed over every CPU (the first line of /proc/stat).
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t total = 0;
};
// Parses the "cpu ..." line of /proc/stat text; false if it has none.
bool ParseProcStat(const char* text, CpuTimes* out);
// MemTotal and MemAvailable of /proc/meminfo text, in bytes; false if either is missing.
bool ParseMemInfo(const char* text, uint64_t* total_bytes, uint64_t* available_bytes);

class HostMetrics final : public prometheus::Collectable {
 public:
  HostMetrics();
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable absl::Mutex mu_;
  mutable CpuTimes last_ ABSL_GUARDED_BY(mu_);
};

// kiln_auth_refusals_total{reason}: calls the Authenticator refused (unauthenticated, permission,
// rate, concurrency), read from it per scrape.
class AuthMetrics final : public prometheus::Collectable {
 public:
  explicit AuthMetrics(const Authenticator* auth) : auth_(auth) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Authenticator* const auth_;
};

}  // namespace kiln::server
