// The JIT tests' fixture: the device under test ($KILN_TEST_DEVICE, default CPU; skipped where it is missing), random
// float tensors on it, and their values.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/register_all.h"
#include "engine/runtime/registry.h"
#include "engine/tensor/tensor.h"

namespace kiln::jit {

inline const std::string& TestDevice() {
  static const std::string d = [] {
    const char* e = std::getenv("KILN_TEST_DEVICE");
    return std::string(e != nullptr && *e != '\0' ? e : "CPU");
  }();
  return d;
}

class DeviceTest : public ::testing::Test {
 protected:
  explicit DeviceTest(uint32_t seed = 1234) : rng_(seed) {}
  void SetUp() override {
    backends::RegisterAllBackends();
    if (!runtime::GetDevice(TestDevice()).ok()) GTEST_SKIP() << TestDevice() << " backend not available";
  }
  // Uniform in [-1, 1).
  Tensor RandT(std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& f : v) f = dist(rng_);
    return Tensor::FromVector(v, shape, TestDevice());
  }
  static std::vector<float> Vals(const Tensor& t) {
    auto v = t.ToVector<float>();
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<float>{};
  }
  std::mt19937 rng_;
};

}  // namespace kiln::jit
