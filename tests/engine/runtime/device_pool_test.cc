// DevicePool: discovery over the compiled-in backends (CPU always; CL:n where an OpenCL device exists), DEV-style
// selection, one in-order executor thread per device with devices running concurrently, and exact copies between
// devices (Tensor::To).
#include "engine/runtime/device_pool.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "backends/register_all.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

class DevicePoolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backends::RegisterAllBackends();
    pool_ = DevicePool::Discover().release();
  }
  static void TearDownTestSuite() {
    delete pool_;
    pool_ = nullptr;
  }
  static bool Has(const std::string& d) {
    return std::find(pool_->devices().begin(), pool_->devices().end(), d) != pool_->devices().end();
  }
  static DevicePool* pool_;
};
DevicePool* DevicePoolTest::pool_ = nullptr;

TEST_F(DevicePoolTest, Discovery) {
  EXPECT_TRUE(Has("CPU"));
  EXPECT_FALSE(Has("NULL"));
  EXPECT_FALSE(Has("INTERP"));
  EXPECT_EQ(Has("CL:0"), BackendRegistry::Global().HasKind("CL"));
  EXPECT_EQ(Has("CUDA:0"), BackendRegistry::Global().HasKind("CUDA"));
}

TEST_F(DevicePoolTest, Selection) {
  EXPECT_EQ(*pool_->Select("cpu"), "CPU");
  EXPECT_EQ(*pool_->Select("CPU:0"), "CPU");
  EXPECT_EQ(pool_->Select("CUDA:7").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pool_->Select("not a device!").status().code(), absl::StatusCode::kInvalidArgument);
  if (Has("CL:0")) {
    EXPECT_EQ(*pool_->Select("cl"), "CL:0");
    if (!Has("CUDA:0")) { EXPECT_EQ(*pool_->Select("GPU"), "CL:0"); }
  }
  if (Has("CUDA:0")) { EXPECT_EQ(*pool_->Select("gpu"), "CUDA:0"); }
  auto dev = pool_->Get("cpu");
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ((*dev)->name(), "CPU");
}

// Tasks for one device run on one thread in submission order; a failing task's Status comes back to its caller.
TEST_F(DevicePoolTest, ExecutorsAreInOrderPerDevice) {
  std::vector<int> order;
  std::vector<std::thread::id> ids;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(pool_
                    ->Run("CPU",
                          [&, i] {
                            order.push_back(i);
                            ids.push_back(std::this_thread::get_id());
                            return absl::OkStatus();
                          })
                    .ok());
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), ids[0]), 20) << "one worker thread per device";
  EXPECT_NE(ids[0], std::this_thread::get_id());
  EXPECT_EQ(pool_->Run("CPU", [] { return absl::DataLossError("boom"); }).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(pool_->Run("CUDA:9", [] { return absl::OkStatus(); }).code(),
            absl::StatusCode::kNotFound);
}

// Work on two devices runs concurrently: a CPU task that waits for a CL task completes.
TEST_F(DevicePoolTest, DevicesRunConcurrently) {
  if (!Has("CL:0")) GTEST_SKIP() << "needs a second device (CL)";
  std::promise<void> cl_ran;
  std::future<void> seen = cl_ran.get_future();
  std::thread cpu([&] {
    EXPECT_TRUE(pool_
                    ->Run("CPU",
                          [&] {
                            // A deadlock guard, not a timing threshold: the CL task needs no CPU executor time.
                            return seen.wait_for(std::chrono::seconds(120)) ==
                                           std::future_status::ready
                                       ? absl::OkStatus()
                                       : absl::DeadlineExceededError("the CL executor never ran");
                          })
                    .ok());
  });
  EXPECT_TRUE(pool_
                  ->Run("CL:0",
                        [&] {
                          cl_ran.set_value();
                          return absl::OkStatus();
                        })
                  .ok());
  cpu.join();
}

// CPU -> CL -> CPU copies are bit-exact for every element size, and a value computed on CL comes back exactly as
// the same computation on CPU.
TEST_F(DevicePoolTest, CopiesBetweenDevicesRoundTripExactly) {
  if (!Has("CL:0")) GTEST_SKIP() << "needs a second device (CL)";
  std::vector<float> f = {0.0f, -0.0f, 1.5f, -3.25e-38f, 3.4e38f, 1e-45f, 7.0f, -1.0f};
  std::vector<int32_t> i = {0, -1, 2147483647, -2147483647 - 1, 42, 7, -9, 100};
  Tensor tf = Tensor::FromVector<float>(f, {8}, "CPU");
  Tensor ti = Tensor::FromVector<int32_t>(i, {2, 4}, "CPU");
  Tensor th = tf.Cast(dtypes::kFloat16);
  auto back_f = tf.To("CL:0").To("CPU").ToVector<float>();
  auto back_i = ti.To("CL:0").To("CPU").ToVector<int32_t>();
  ASSERT_TRUE(back_f.ok()) << back_f.status();
  ASSERT_TRUE(back_i.ok()) << back_i.status();
  EXPECT_EQ(std::memcmp(back_f->data(), f.data(), f.size() * 4), 0);
  EXPECT_EQ(*back_i, i);
  auto h_cpu = th.Cast(dtypes::kFloat32).ToVector<float>();
  auto h_rt = th.To("CL:0").To("CPU").Cast(dtypes::kFloat32).ToVector<float>();
  ASSERT_TRUE(h_rt.ok()) << h_rt.status();
  EXPECT_EQ(std::memcmp(h_rt->data(), h_cpu->data(), h_cpu->size() * 4), 0);
  Tensor on_cl = tf.To("CL:0");
  EXPECT_EQ(on_cl.device(), "CL:0");
  auto computed = ((on_cl * 2.0f + 1.0f).To("CPU")).ToVector<float>();
  auto want = (tf * 2.0f + 1.0f).ToVector<float>();
  ASSERT_TRUE(computed.ok()) << computed.status();
  EXPECT_EQ(std::memcmp(computed->data(), want->data(), want->size() * 4), 0);
}

}  // namespace
}  // namespace kiln::runtime
