// Placement by instance_group (server/core/placement.h): pure resolution over a given device list.
#include "server/core/placement.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/model_config.h"

namespace kiln::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

inference::ModelConfig WithGroups(const std::string& groups) {
  auto config = ParseModelConfigText(
      "name: \"m\" platform: \"kiln_graph\" input [{ name: \"X\" data_type: TYPE_FP32 dims: [ 2 ] "
      "}]"
      " output [{ name: \"Y\" data_type: TYPE_FP32 dims: [ 2 ] }] " +
      groups);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

const std::vector<std::string> kMachine = {"CL:0", "CPU"};  // DevicePool order: kinds sorted

TEST(PlacementTest, AcceleratorsAreCudaFirstThenOpenClByIndex) {
  EXPECT_THAT(AcceleratorOrder({"CL:1", "CL:0", "CPU", "CUDA:1", "CUDA:0"}),
              ElementsAre("CUDA:0", "CUDA:1", "CL:0", "CL:1"));
  EXPECT_THAT(AcceleratorOrder({"CPU"}), ElementsAre());
  EXPECT_THAT(AcceleratorOrder({"CL:10", "CL:2"}), ElementsAre("CL:2", "CL:10"));
}

TEST(PlacementTest, KindCpuIsCpuWhateverTheDefault) {
  auto d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_CPU count: 2 }]"), kMachine,
                            "CL:0");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "CPU");
}

TEST(PlacementTest, KindGpuZeroIsTheFirstAccelerator) {
  auto d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_GPU gpus: [ 0 ] }]"), kMachine,
                            "CPU");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "CL:0");
  // CUDA counts before CL.
  d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_GPU gpus: [ 1 ] }]"),
                       {"CL:0", "CPU", "CUDA:0"}, "CPU");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "CL:0");
  // No gpus listed: GPU 0.
  d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_GPU }]"), kMachine, "CPU");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "CL:0");
}

TEST(PlacementTest, NoGroupOrAutoIsTheDefault) {
  auto d = ResolvePlacement(WithGroups(""), {}, "CPU");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "CPU");
  d = ResolvePlacement(WithGroups("instance_group [{ count: 1 }]"), {}, "CL:0");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "CL:0");
  d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_MODEL }]"), {}, "INTERP");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "INTERP");
}

TEST(PlacementTest, MissingGpuNamesTheFieldAndTheDevices) {
  auto d = ResolvePlacement(
      WithGroups("instance_group [{ kind: KIND_CPU }, { kind: KIND_GPU gpus: [ 3 ] }]"), kMachine,
      "CPU");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("instance_group[1].gpus: GPU 3 does not exist"));
  EXPECT_THAT(d.status().message(), HasSubstr("CL:0, CPU"));
  d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_GPU gpus: [ -1 ] }]"), kMachine,
                       "CPU");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("instance_group[0].gpus: GPU -1"));
  d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_GPU }]"), {"CPU"}, "CPU");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(),
              HasSubstr("instance_group[0].kind: KIND_GPU but this machine has no GPU-class"));
}

TEST(PlacementTest, TwoDevicesForOneModelAreRefused) {
  auto d = ResolvePlacement(
      WithGroups("instance_group [{ kind: KIND_CPU }, { kind: KIND_GPU gpus: [ 0 ] }]"), kMachine,
      "CPU");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("instance_group[1]: places the model on CL:0"));
  d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_CPU gpus: [ 0 ] }]"), kMachine,
                       "CPU");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("instance_group[0].gpus: must be empty"));
  // Two groups on the same device are fine.
  d = ResolvePlacement(WithGroups("instance_group [{ kind: KIND_CPU }, { kind: KIND_CPU }]"),
                       kMachine, "CPU");
  EXPECT_TRUE(d.ok()) << d.status();
}

TEST(PlacementTest, EchoWritesTheResolvedGroup) {
  inference::ModelConfig c = WithGroups("");
  EchoPlacement("CL:0", kMachine, &c);
  ASSERT_EQ(c.instance_group_size(), 1);
  EXPECT_EQ(c.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_THAT(c.instance_group(0).gpus(), ElementsAre(0));
  EXPECT_EQ(c.instance_group(0).count(), 1);
  EXPECT_EQ(c.instance_group(0).name(), "m_0");
  c = WithGroups("instance_group [{ name: \"g\" kind: KIND_CPU count: 3 }]");
  EchoPlacement("CPU", kMachine, &c);
  ASSERT_EQ(c.instance_group_size(), 1);
  EXPECT_EQ(c.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(c.instance_group(0).count(), 3);
  EXPECT_EQ(c.instance_group(0).name(), "g");
  EXPECT_EQ(c.instance_group(0).gpus_size(), 0);
}

}  // namespace
}  // namespace kiln::server
