// Fixture for CPU backend tests: a CpuDevice, a private memory-only compile cache, typed buffers.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "engine/codegen/render/llvm_ir.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/compile_cache.h"
#include "gtest/gtest.h"

namespace kiln::backends {

class CpuTest : public ::testing::Test {
 protected:
  static runtime::Device* Dev() {
    static runtime::Device* dev = [] {
      auto d = CpuDevice::Create();
      EXPECT_TRUE(d.ok()) << d.status();
      return d->release();
    }();
    return dev;
  }

  template <typename T>
  std::shared_ptr<runtime::Buffer> Make(DType dt, const std::vector<T>& data) {
    auto b = runtime::Buffer::Create(Dev(), dt, static_cast<int64_t>(data.size()));
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE((*b)->CopyIn(data.data(), data.size() * sizeof(T)).ok());
    return *b;
  }
  template <typename T>
  std::vector<T> Read(const std::shared_ptr<runtime::Buffer>& b) {
    std::vector<T> out(b->nbytes() / sizeof(T));
    EXPECT_TRUE(b->CopyOut(out.data(), out.size() * sizeof(T)).ok());
    return out;
  }

  // Renders with the llvm renderer, compiles (cached in memory), loads and launches.
  absl::Status Run(const codegen::Program& p, const std::vector<std::shared_ptr<runtime::Buffer>>& bufs,
                   const std::vector<int64_t>& vars = {}, int threads = 1) {
    auto k = runtime::CompileKernel(*Dev(), p, &cache_);
    if (!k.ok()) return k.status();
    last_source_ = k->source;
    std::vector<runtime::DeviceMemory> mems;
    for (const auto& b : bufs) mems.push_back(b->memory());
    runtime::LaunchDims dims;
    dims.threads = threads;
    auto t = k->program->Launch(mems, vars, dims, /*timed=*/true);
    if (!t.ok()) return t.status();
    EXPECT_GE(*t, 0.0);
    return absl::OkStatus();
  }

  static runtime::CompileCache::Options MemoryOnly() {
    runtime::CompileCache::Options o;
    o.disk = false;
    return o;
  }
  runtime::CompileCache cache_{MemoryOnly()};
  std::string last_source_;
};

}  // namespace kiln::backends
