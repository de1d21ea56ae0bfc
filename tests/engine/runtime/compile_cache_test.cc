// CompileCache with a counting fake compiler: memory hits, disk hits (fresh cache object and a real second process),
// CACHELEVEL=0, corrupt and unwritable DB files.
#include "engine/runtime/compile_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/base/env.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

class FakeCompiler : public Compiler {
 public:
  absl::StatusOr<std::string> Compile(const std::string& source, const std::string& name) override {
    ++compiles;
    if (source == "bad") return absl::InvalidArgumentError("does not compile");
    return "BIN:" + name + ":" + source;
  }
  std::string CacheKey() const override { return "fake-1"; }
  std::atomic<int> compiles{0};
};

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln_cc_XXXXXX").string();
  char* d = mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

CompileCache::Options At(const std::string& path) {
  CompileCache::Options o;
  o.db_path = path;
  return o;
}

TEST(CompileCacheTest, SecondCompileIsAMemoryHit) {
  FakeCompiler c;
  CompileCache cache(At(TempDir() + "/cache.db"));
  auto a = cache.GetOrCompile(c, "llvm", "src1", "E_1");
  auto b = cache.GetOrCompile(c, "llvm", "src1", "E_1");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, "BIN:E_1:src1");
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(c.compiles, 1);
  EXPECT_EQ(cache.stats().memory_hits, 1);
  EXPECT_EQ(cache.stats().misses, 1);
  // Another renderer or source is another key.
  ASSERT_TRUE(cache.GetOrCompile(c, "interp", "src1", "E_1").ok());
  ASSERT_TRUE(cache.GetOrCompile(c, "llvm", "src2", "E_1").ok());
  EXPECT_EQ(c.compiles, 3);
}

TEST(CompileCacheTest, FreshCacheOnSameFileIsADiskHit) {
  const std::string db = TempDir() + "/cache.db";
  FakeCompiler c;
  {
    CompileCache first(At(db));
    ASSERT_TRUE(first.GetOrCompile(c, "llvm", "src", "E_1").ok());
    EXPECT_EQ(first.stats().disk_writes, 1);
  }
  CompileCache second(At(db));
  auto b = second.GetOrCompile(c, "llvm", "src", "E_1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, "BIN:E_1:src");
  EXPECT_EQ(c.compiles, 1);
  EXPECT_EQ(second.stats().disk_hits, 1);
  EXPECT_EQ(second.stats().misses, 0);
  // And it is promoted to memory.
  ASSERT_TRUE(second.GetOrCompile(c, "llvm", "src", "E_1").ok());
  EXPECT_EQ(second.stats().memory_hits, 1);
}

TEST(CompileCacheTest, CompileErrorsAreReturnedAndNotCached) {
  FakeCompiler c;
  CompileCache cache(At(TempDir() + "/cache.db"));
  EXPECT_EQ(cache.GetOrCompile(c, "llvm", "bad", "E").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(cache.GetOrCompile(c, "llvm", "bad", "E").ok());
  EXPECT_EQ(c.compiles, 2);
}

TEST(CompileCacheTest, CacheLevelZeroSkipsDisk) {
  const std::string db = TempDir() + "/cache.db";
  FakeCompiler c;
  {
    Context ctx({{Knob::kCacheLevel, 0}});
    CompileCache cache(At(db));
    ASSERT_TRUE(cache.GetOrCompile(c, "llvm", "src", "E").ok());
    EXPECT_EQ(cache.stats().disk_writes, 0);
  }
  EXPECT_FALSE(std::filesystem::exists(db));
  CompileCache again(At(db));
  ASSERT_TRUE(again.GetOrCompile(c, "llvm", "src", "E").ok());
  EXPECT_EQ(again.stats().disk_hits, 0);
  EXPECT_EQ(c.compiles, 2);
}

TEST(CompileCacheTest, CorruptDbWarnsAndContinuesInMemory) {
  const std::string db = TempDir() + "/cache.db";
  {
    std::ofstream f(db, std::ios::binary);
    f << std::string(8192, '\x5a');  // not an SQLite file
  }
  FakeCompiler c;
  CompileCache cache(At(db));
  auto a = cache.GetOrCompile(c, "llvm", "src", "E");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GE(cache.stats().disk_errors, 1);
  auto b = cache.GetOrCompile(c, "llvm", "src", "E");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(c.compiles, 1);
  EXPECT_EQ(cache.stats().memory_hits, 1);
}

TEST(CompileCacheTest, UnopenablePathContinuesInMemory) {
  FakeCompiler c;
  CompileCache cache(At("/proc/definitely/not/writable/cache.db"));
  ASSERT_TRUE(cache.GetOrCompile(c, "llvm", "src", "E").ok());
  ASSERT_TRUE(cache.GetOrCompile(c, "llvm", "src", "E").ok());
  EXPECT_EQ(c.compiles, 1);
  EXPECT_GE(cache.stats().disk_errors, 1);
}

TEST(CompileCacheTest, LruEvicts) {
  FakeCompiler c;
  CompileCache::Options o;
  o.disk = false;
  o.memory_entries = 2;
  CompileCache cache(o);
  for (const char* s : {"a", "b", "c", "a"}) ASSERT_TRUE(cache.GetOrCompile(c, "llvm", s, "E").ok());
  EXPECT_EQ(c.compiles, 4);  // "a" was evicted by "c"
}

TEST(CompileCacheTest, DefaultPathFollowsEnvironment) {
  setenv("KILN_CACHE_DIR", "/tmp/kiln_x", 1);
  EXPECT_EQ(CompileCache::DefaultPath(), "/tmp/kiln_x/cache.db");
  unsetenv("KILN_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(CompileCache::DefaultPath(), "/tmp/xdg/kiln/cache.db");
  unsetenv("XDG_CACHE_HOME");
}

// Child half of the two-process test: runs only when the parent sets KILN_TEST_CHILD_DB.
TEST(CompileCacheChild, Run) {
  const char* db = std::getenv("KILN_TEST_CHILD_DB");
  const char* out = std::getenv("KILN_TEST_CHILD_OUT");
  if (db == nullptr || out == nullptr) GTEST_SKIP() << "only run as the child of SecondProcessCompilesNothing";
  FakeCompiler c;
  CompileCache cache(At(db));
  ASSERT_TRUE(cache.GetOrCompile(c, "llvm", "shared-src", "E_9").ok());
  CompileCacheStats s = cache.stats();
  std::ofstream(out) << s.misses << " " << s.disk_hits << " " << c.compiles << "\n";
}

TEST(CompileCacheTest, SecondProcessCompilesNothing) {
  const std::string dir = TempDir();
  const std::string db = dir + "/cache.db", out = dir + "/child.txt";
  FakeCompiler c;
  {
    CompileCache cache(At(db));
    ASSERT_TRUE(cache.GetOrCompile(c, "llvm", "shared-src", "E_9").ok());
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(n, 0);
  exe[n] = '\0';
  const std::string cmd = "KILN_TEST_CHILD_DB='" + db + "' KILN_TEST_CHILD_OUT='" + out + "' '" + exe +
                          "' --gtest_filter=CompileCacheChild.Run > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out);
  int64_t misses = -1, disk_hits = -1, compiles = -1;
  in >> misses >> disk_hits >> compiles;
  EXPECT_EQ(misses, 0);
  EXPECT_EQ(disk_hits, 1);
  EXPECT_EQ(compiles, 0);
}

}  // namespace
}  // namespace kiln::runtime
