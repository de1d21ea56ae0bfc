// TraceManager on its own: settings (global, per model, cleared back to the global), refusals
// checked whole, sampling by trace_rate and trace_count, and the files it writes (Triton's JSON
// trace format, log_frequency's indexed files, what is left written at destruction).
#include "server/core/trace.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TraceRecord Record(uint64_t id, const std::string& model) {
  return {id, model, "1", "r", {{"REQUEST_START", 10}, {"REQUEST_END", 20}}};
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("kiln_trace_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(TraceTest, SettingsAndRefusals) {
  TraceManager t((dir_ / "t.json").string());
  absl::StatusOr<TraceSettingMap> s = t.Update("", {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)["trace_level"], std::vector<std::string>{"OFF"});
  EXPECT_EQ((*s)["trace_rate"], std::vector<std::string>{"1000"});
  EXPECT_EQ((*s)["trace_count"], std::vector<std::string>{"-1"});
  EXPECT_EQ((*s)["trace_file"], std::vector<std::string>{(dir_ / "t.json").string()});
  EXPECT_EQ(t.Sample("m"), 0u);  // off

  s = t.Update("m", {{"trace_rate", std::vector<std::string>{"3"}}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)["trace_rate"], std::vector<std::string>{"3"});
  EXPECT_EQ((*t.Update("", {}))["trace_rate"], std::vector<std::string>{"1000"});  // global unchanged
  s = t.Update("m", {{"trace_rate", std::nullopt}});
  EXPECT_EQ((*s)["trace_rate"], std::vector<std::string>{"1000"});  // cleared: the global one

  for (const TraceSettingUpdate& bad : {
           TraceSettingUpdate{{"trace_rate", std::vector<std::string>{"2"}}, {"trace_colour", std::vector<std::string>{"1"}}},
           TraceSettingUpdate{{"trace_rate", std::vector<std::string>{"0"}}},
           TraceSettingUpdate{{"trace_count", std::vector<std::string>{"-2"}}},
           TraceSettingUpdate{{"trace_level", std::vector<std::string>{"TENSORS"}}},
           TraceSettingUpdate{{"trace_file", std::vector<std::string>{"/tmp/elsewhere"}}},
           TraceSettingUpdate{{"trace_rate", std::nullopt}}}) {  // a global setting cannot be cleared
    absl::StatusOr<TraceSettingMap> r = t.Update("", bad);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("settings." + bad.back().first));
  }
  EXPECT_EQ((*t.Update("", {}))["trace_rate"], std::vector<std::string>{"1000"});  // nothing changed

  TraceManager none("");
  EXPECT_THAT(std::string(none.Update("", {{"trace_level", std::vector<std::string>{"TIMESTAMPS"}}}).status().message()),
              HasSubstr("--trace-file"));
}

TEST_F(TraceTest, SamplingAndFiles) {
  const std::string file = (dir_ / "t.json").string();
  {
    TraceManager t(file);
    ASSERT_TRUE(t.Update("", {{"trace_level", std::vector<std::string>{"TIMESTAMPS"}},
                              {"trace_rate", std::vector<std::string>{"2"}},
                              {"trace_count", std::vector<std::string>{"2"}}}).ok());
    std::vector<uint64_t> ids;
    for (int i = 0; i < 6; ++i) ids.push_back(t.Sample("m"));
    EXPECT_EQ(ids, (std::vector<uint64_t>{1, 0, 2, 0, 0, 0}));  // every 2nd, 2 traces
    t.Record(Record(1, "m"));
    EXPECT_FALSE(std::filesystem::exists(file + ".0"));
    t.Record(Record(2, "m"));  // the count is spent: written at once
    EXPECT_EQ(Read(file + ".0"),
              R"([{"id":1,"model_name":"m","model_version":1,"request_id":"r","parent_id":0},)"
              R"({"id":1,"timestamps":[{"name":"REQUEST_START","ns":10}]},)"
              R"({"id":1,"timestamps":[{"name":"REQUEST_END","ns":20}]},)"
              R"({"id":2,"model_name":"m","model_version":1,"request_id":"r","parent_id":0},)"
              R"({"id":2,"timestamps":[{"name":"REQUEST_START","ns":10}]},)"
              R"({"id":2,"timestamps":[{"name":"REQUEST_END","ns":20}]}])");
    // A model of its own: unlimited, every request, one file per trace.
    ASSERT_TRUE(t.Update("n", {{"trace_rate", std::vector<std::string>{"1"}},
                               {"trace_count", std::vector<std::string>{"-1"}},
                               {"log_frequency", std::vector<std::string>{"1"}}}).ok());
    EXPECT_EQ(t.Sample("m"), 0u);
    const uint64_t id = t.Sample("n");
    EXPECT_EQ(id, 3u);
    t.Record(Record(id, "n"));
    EXPECT_THAT(Read(file + ".1"), HasSubstr(R"("model_name":"n")"));
    ASSERT_TRUE(t.Update("n", {{"log_frequency", std::vector<std::string>{"0"}}}).ok());
    t.Record(Record(t.Sample("n"), "n"));
  }  // destroyed: what is left goes to the next indexed file
  EXPECT_THAT(Read(file + ".2"), HasSubstr(R"({"id":4,"model_name":"n")"));
  EXPECT_FALSE(std::filesystem::exists(file));
}

}  // namespace
}  // namespace kiln::server
