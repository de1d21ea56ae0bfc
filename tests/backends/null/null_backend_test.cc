// NULL device: renders and "compiles" (the source is the binary), never runs, copies work.
#include "backends/null/null_device.h"

#include <vector>

#include "engine/runtime/buffer.h"
#include "engine/runtime/compile_cache.h"
#include "gtest/gtest.h"
#include "tests/engine/codegen/render/test_programs.h"

namespace kiln::backends {
namespace {

TEST(NullBackendTest, CompilesLlvmTextWithoutRunning) {
  NullDevice dev;
  EXPECT_FALSE(dev.executes());
  runtime::CompileCache::Options o;
  o.disk = false;
  runtime::CompileCache cache(o);
  auto k = runtime::CompileKernel(dev, testprog::ElementwiseAdd(4), &cache);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_NE(k->source.find("define internal void @E_4("), std::string::npos);
  auto b = runtime::Buffer::Create(&dev, dtypes::kFloat32, 4);
  ASSERT_TRUE(b.ok());
  std::vector<float> in = {1, 2, 3, 4}, out(4, 0);
  ASSERT_TRUE((*b)->CopyIn(in.data(), 16).ok());
  std::vector<runtime::DeviceMemory> m = {(*b)->memory(), (*b)->memory(), (*b)->memory()};
  auto t = k->program->Launch(m, {}, {}, true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 0.0);
  ASSERT_TRUE((*b)->CopyOut(out.data(), 16).ok());
  EXPECT_EQ(in, out);  // untouched
  // Compiling again hits the cache.
  ASSERT_TRUE(runtime::CompileKernel(dev, testprog::ElementwiseAdd(4), &cache).ok());
  EXPECT_EQ(cache.stats().memory_hits, 1);
}

TEST(NullBackendTest, InterpRendererChoice) {
  NullDevice dev("NULL", "interp");
  runtime::CompileCache::Options o;
  o.disk = false;
  runtime::CompileCache cache(o);
  auto k = runtime::CompileKernel(dev, testprog::ElementwiseAdd(4), &cache);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->source.rfind("# kiln-interp v1", 0), 0u);
}

TEST(NullBackendTest, RegisteredAsNull) {
  runtime::BackendRegistry reg;
  RegisterNullBackend(reg);
  auto d = reg.GetDevice("null");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->name(), "NULL");
  EXPECT_EQ((*d)->renderer(), "llvm");
  EXPECT_FALSE(reg.GetDevice("NULL:1").ok());
}

}  // namespace
}  // namespace kiln::backends
