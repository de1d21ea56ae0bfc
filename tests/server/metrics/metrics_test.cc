// server/metrics pieces that need no scrape: the host parsers (against fixed /proc text and the
// live /proc cross-checked with sysconf) and the kernel label.
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/host_metrics.h"
#include "server/metrics/metrics.h"

namespace kiln::server {
namespace {

TEST(HostMetrics, ParsesTheCpuLineOfProcStat) {
  CpuTimes t;
  // user nice system idle iowait irq softirq steal guest guest_nice
  ASSERT_TRUE(ParseProcStat("cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 1 2 3 4\n", &t));
  EXPECT_EQ(t.total, 1000u);
  EXPECT_EQ(t.busy, 160u);  // everything but idle (800) and iowait (40)
  EXPECT_FALSE(ParseProcStat("intr 1 2 3\n", &t));
  EXPECT_FALSE(ParseProcStat("cpu  1 2\n", &t));
}

TEST(HostMetrics, ParsesMemInfoInBytes) {
  uint64_t total = 0, available = 0;
  ASSERT_TRUE(ParseMemInfo("MemTotal:       16384 kB\nMemFree: 1 kB\nMemAvailable:    4096 kB\n",
                           &total, &available));
  EXPECT_EQ(total, 16384u * 1024);
  EXPECT_EQ(available, 4096u * 1024);
  EXPECT_FALSE(ParseMemInfo("MemTotal: 1 kB\n", &total, &available));
}

TEST(HostMetrics, LiveMemoryTotalMatchesSysconf) {
  std::ifstream in("/proc/meminfo");
  std::stringstream s;
  s << in.rdbuf();
  uint64_t total = 0, available = 0;
  ASSERT_TRUE(ParseMemInfo(s.str().c_str(), &total, &available));
  const uint64_t pages = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES));
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(total, pages * page);
  EXPECT_LE(available, total);
}

TEST(HostMetrics, CollectsThreeGaugesWithUtilizationInRange) {
  HostMetrics host;
  const auto families = host.Collect();
  ASSERT_EQ(families.size(), 3u);
  EXPECT_EQ(families[0].name, "nv_cpu_utilization");
  EXPECT_GE(families[0].metric[0].gauge.value, 0.0);
  EXPECT_LE(families[0].metric[0].gauge.value, 1.0);
  EXPECT_GT(families[1].metric[0].gauge.value, 0.0);
  EXPECT_LE(families[2].metric[0].gauge.value, families[1].metric[0].gauge.value);
}

TEST(KernelLabel, KeepsPositionAndKindButNotShapes) {
  EXPECT_EQ(KernelLabel(3, "r_64_10_4_4"), "3:r_n_n_n_n");
  EXPECT_EQ(KernelLabel(3, "r_1_10_4_4"), "3:r_n_n_n_n");
  EXPECT_EQ(KernelLabel(0, "E_16n1"), "0:E_nnn");
  EXPECT_EQ(KernelLabel(12, "copy"), "12:copy");
}

}  // namespace
}  // namespace kiln::server
