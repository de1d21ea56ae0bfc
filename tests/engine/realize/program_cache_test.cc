// The program cache (engine/realize/program_cache.h): a kernel lowered once is read back, by another realize
// context of the process and, after the in-memory level is dropped, from the SQLite file, without being lowered
// again, and computes the same values (references computed here from the inputs). CACHELEVEL=0 lowers. The record
// format (launch facts and the binary's compile-cache key, no source) round-trips and rejects truncated or foreign
// records.
#include <filesystem>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/base/build_id.h"
#include "engine/base/env.h"
#include "engine/realize/program_cache.h"
#include "engine/realize/realize.h"
#include "engine/rewrite/rewrite_stats.h"
#include "engine/runtime/compile_cache.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

class ProgramCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backends::RegisterAllBackends();
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_program_cache_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(dir_);
    runtime::CompileCache::Options o;
    o.db_path = (dir_ / "cache.db").string();
    runtime::CompileCache::ConfigureGlobal(o);
  }
  void TearDown() override {
    runtime::CompileCache::ConfigureGlobal({});
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

// relu(x * 1.75 - 2) over 64 floats, in `ctx`.
std::vector<float> Compute(RealizeContext& ctx, const std::vector<float>& x) {
  ScopedRealizeContext scope(ctx);
  Tensor t = Tensor::FromVector<float>(x, {8, 8});
  absl::StatusOr<std::vector<float>> out = t.Mul(1.75f).Sub(2.0f).Relu().ToVector<float>();
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<float>();
}

TEST_F(ProgramCacheTest, LoweredOnceThenReadFromMemoryAndDisk) {
  ASSERT_FALSE(KilnBuildId().empty()) << "the linker gave this test binary no GNU build ID";
  std::vector<float> x(64), want(64);
  for (int i = 0; i < 64; ++i) {
    x[i] = static_cast<float>(i % 11) - 3.5f;
    const float v = x[i] * 1.75f - 2.0f;
    want[i] = v > 0 ? v : 0;
  }
  RealizeContext first;
  EXPECT_EQ(Compute(first, x), want);
  EXPECT_TRUE(first.rewrite_stats().Ran("expand upcasts")) << first.rewrite_stats().Format();

  RealizeContext second;  // the same kernel: its program from the cache's memory level
  EXPECT_EQ(Compute(second, x), want);
  EXPECT_FALSE(second.rewrite_stats().Ran("expand upcasts")) << second.rewrite_stats().Format();

  runtime::CompileCache::Global().ClearMemory();
  RealizeContext third;  // from the SQLite file
  EXPECT_EQ(Compute(third, x), want);
  EXPECT_FALSE(third.rewrite_stats().Ran("expand upcasts")) << third.rewrite_stats().Format();
  EXPECT_GE(runtime::CompileCache::Global().stats().disk_hits, 1);

  RealizeContext fourth;  // CACHELEVEL=0 lowers
  {
    Context no_disk({{Knob::kCacheLevel, 0}});
    EXPECT_EQ(Compute(fourth, x), want);
  }
  EXPECT_TRUE(fourth.rewrite_stats().Ran("expand upcasts")) << fourth.rewrite_stats().Format();
}

TEST(ProgramCacheFormat, RoundTripsAndRejectsDamagedRecords) {
  codegen::Program p;
  p.name = "r_2_16_4";
  p.buffers = {{0, dtypes::kFloat32, 64, true}, {1, dtypes::kInt32, 10, false}};
  p.global_size[0] = 4;
  p.local_size[1] = 2;
  p.threads = 2;
  p.applied_opts = {"THREAD(0,2)", "UPCAST(0,16)"};
  p.flops = 1234;
  p.mem_bytes = 5678;
  p.no_gather = true;
  p.slp_max_vf = 16;
  const std::string blob = realize_internal::SerializeProgram(p, 4321, "0123abcd");
  realize_internal::CachedProgram got;
  ASSERT_TRUE(realize_internal::DeserializeProgram(blob, &got));
  EXPECT_EQ(got.program.name, p.name);
  ASSERT_EQ(got.program.buffers.size(), 2u);
  EXPECT_EQ(got.program.buffers[1].dtype, dtypes::kInt32);
  EXPECT_EQ(got.program.buffers[1].size, 10);
  EXPECT_TRUE(got.program.buffers[0].is_output);
  EXPECT_EQ(got.program.global_size[0], 4);
  EXPECT_EQ(got.program.local_size[1], 2);
  EXPECT_EQ(got.program.threads, 2);
  EXPECT_EQ(got.program.applied_opts, p.applied_opts);
  EXPECT_EQ(got.program.flops, 1234);
  EXPECT_EQ(got.program.mem_bytes, 5678);
  EXPECT_TRUE(got.program.no_gather);
  EXPECT_FALSE(got.program.strided_loads);
  EXPECT_EQ(got.program.slp_max_vf, 16);
  EXPECT_EQ(got.source_bytes, 4321);
  EXPECT_EQ(got.binary_key, "0123abcd");
  for (size_t n = 0; n < blob.size(); n += 7) {
    realize_internal::CachedProgram cut;
    EXPECT_FALSE(realize_internal::DeserializeProgram(blob.substr(0, n), &cut)) << "truncated to " << n;
  }
  realize_internal::CachedProgram extra;
  EXPECT_FALSE(realize_internal::DeserializeProgram(blob + "x", &extra));
  EXPECT_FALSE(realize_internal::DeserializeProgram("kiln-program-v0", &extra));
  EXPECT_FALSE(realize_internal::DeserializeProgram(realize_internal::SerializeProgram(p, 1, ""), &extra))
      << "a record must name its binary";
}

}  // namespace
}  // namespace kiln
