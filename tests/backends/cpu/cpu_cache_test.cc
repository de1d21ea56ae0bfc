// CPU kernels through the disk compile cache: a fresh cache (and a real second process) loads the stored object
// without compiling; plus registry wiring (RegisterAllBackends).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/register_all.h"
#include "engine/base/env.h"
#include "tests/backends/cpu/cpu_test_util.h"
#include "tests/engine/codegen/render/test_programs.h"

namespace kiln::backends {
namespace {

using namespace kiln::testprog;  // NOLINT

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln_cpu_cc_XXXXXX").string();
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

runtime::CompileCache::Options At(const std::string& db) {
  runtime::CompileCache::Options o;
  o.db_path = db;
  return o;
}

// Compiles (or loads) E_64 through `cache` and checks it computes a + b.
void RunAdd(runtime::CompileCache& cache) {
  auto dev = runtime::GetDevice("CPU");
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto k = runtime::CompileKernel(**dev, ElementwiseAdd(64), &cache);
  ASSERT_TRUE(k.ok()) << k.status();
  std::vector<float> a(64), b(64), o(64, 0);
  for (int i = 0; i < 64; ++i) {
    a[i] = i;
    b[i] = 2 * i;
  }
  std::vector<runtime::DeviceMemory> mems;
  std::vector<std::shared_ptr<runtime::Buffer>> keep;
  for (auto* v : {&o, &a, &b}) {
    auto buf = runtime::Buffer::Create(*dev, dtypes::kFloat32, 64);
    ASSERT_TRUE(buf.ok());
    ASSERT_TRUE((*buf)->CopyIn(v->data(), 256).ok());
    mems.push_back((*buf)->memory());
    keep.push_back(*buf);
  }
  ASSERT_TRUE(k->program->Launch(mems, {}, {}, false).ok());
  ASSERT_TRUE(keep[0]->CopyOut(o.data(), 256).ok());
  for (int i = 0; i < 64; ++i) ASSERT_EQ(o[i], 3.f * i);
}

TEST(CpuCacheTest, RegistryHasCpuAndNull) {
  RegisterAllBackends();
  RegisterAllBackends();  // idempotent
  auto kinds = runtime::BackendRegistry::Global().ListDevices();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "CPU"), kinds.end());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "NULL"), kinds.end());
  auto a = runtime::GetDevice("CPU"), b = runtime::GetDevice("cpu");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*a)->renderer(), "llvm");
  EXPECT_TRUE((*a)->executes());
  EXPECT_FALSE(runtime::GetDevice("CPU:1").ok());
}

TEST(CpuCacheTest, FreshCacheLoadsFromDiskWithoutCompiling) {
  RegisterAllBackends();
  const std::string db = TempDir() + "/cache.db";
  {
    runtime::CompileCache first(At(db));
    RunAdd(first);
    EXPECT_EQ(first.stats().misses, 1);
    RunAdd(first);
    EXPECT_EQ(first.stats().memory_hits, 1);
  }
  runtime::CompileCache second(At(db));
  RunAdd(second);
  EXPECT_EQ(second.stats().misses, 0);
  EXPECT_EQ(second.stats().disk_hits, 1);
}

TEST(CpuCacheTest, CacheLevelZeroCompilesAgain) {
  RegisterAllBackends();
  const std::string db = TempDir() + "/cache.db";
  { runtime::CompileCache first(At(db)); RunAdd(first); }
  Context ctx({{Knob::kCacheLevel, 0}});
  runtime::CompileCache second(At(db));
  RunAdd(second);
  EXPECT_EQ(second.stats().misses, 1);
  EXPECT_EQ(second.stats().disk_hits, 0);
}

TEST(CpuCacheChild, Run) {
  const char* db = std::getenv("KILN_TEST_CPU_CHILD_DB");
  const char* out = std::getenv("KILN_TEST_CPU_CHILD_OUT");
  if (db == nullptr || out == nullptr) GTEST_SKIP() << "only run as the child of SecondProcessCompilesNothing";
  RegisterAllBackends();
  runtime::CompileCache cache(At(db));
  RunAdd(cache);
  std::ofstream(out) << cache.stats().misses << " " << cache.stats().disk_hits << "\n";
}

TEST(CpuCacheTest, SecondProcessCompilesNothing) {
  RegisterAllBackends();
  const std::string dir = TempDir();
  const std::string db = dir + "/cache.db", out = dir + "/child.txt";
  { runtime::CompileCache first(At(db)); RunAdd(first); }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(n, 0);
  exe[n] = '\0';
  const std::string cmd = "KILN_TEST_CPU_CHILD_DB='" + db + "' KILN_TEST_CPU_CHILD_OUT='" + out + "' '" + exe +
                          "' --gtest_filter=CpuCacheChild.Run > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out);
  int64_t misses = -1, disk_hits = -1;
  in >> misses >> disk_hits;
  EXPECT_EQ(misses, 0);
  EXPECT_EQ(disk_hits, 1);
}

}  // namespace
}  // namespace kiln::backends
