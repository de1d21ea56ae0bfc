// The logging extension's settings on spdlog: the start-up values, each switch dropping exactly its
// level's lines (read back from an ostream sink behind the default logger), log_format changing
// the line layout, and refused updates (unknown, wrong type, log_file) changing nothing.
#include "server/core/log_settings.h"

#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

LogSettingValue Get(const LogSettingList& list, const std::string& key) {
  for (const auto& [k, v] : list) {
    if (k == key) return v;
  }
  ADD_FAILURE() << "no setting " << key;
  return false;
}

TEST(LogSettingsTest, SwitchesFormatAndRefusals) {
  EXPECT_TRUE(absl::IsUnavailable(UpdateLogSettings({}).status()));  // before InitLogSettings
  std::ostringstream out;
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)));
  InitLogSettings(0, "default");

  absl::StatusOr<LogSettingList> s = UpdateLogSettings({});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(std::get<bool>(Get(*s, "log_info")), true);
  EXPECT_EQ(std::get<int64_t>(Get(*s, "log_verbose_level")), 0);
  EXPECT_EQ(std::get<std::string>(Get(*s, "log_format")), "default");
  EXPECT_EQ(std::get<std::string>(Get(*s, "log_file")), "");

  auto emit = [&](const std::string& tag) {
    out.str("");
    spdlog::debug("D-{}", tag);
    spdlog::info("I-{}", tag);
    spdlog::warn("W-{}", tag);
    spdlog::error("E-{}", tag);
    return out.str();
  };
  std::string text = emit("a");
  EXPECT_THAT(text, Not(HasSubstr("D-a")));
  EXPECT_THAT(text, HasSubstr("I-a"));
  EXPECT_THAT(text, HasSubstr("W-a"));
  EXPECT_THAT(text, HasSubstr("E-a"));

  ASSERT_TRUE(UpdateLogSettings({{"log_info", false}, {"log_verbose_level", int64_t{1}}}).ok());
  text = emit("b");
  EXPECT_THAT(text, HasSubstr("D-b"));
  EXPECT_THAT(text, Not(HasSubstr("I-b")));
  EXPECT_THAT(text, HasSubstr("W-b"));

  ASSERT_TRUE(UpdateLogSettings({{"log_warning", false}, {"log_error", false}, {"log_verbose_level", int64_t{0}}}).ok());
  EXPECT_EQ(emit("c"), "");

  ASSERT_TRUE(UpdateLogSettings({{"log_error", true}, {"log_format", std::string("ISO8601")}}).ok());
  text = emit("d");
  EXPECT_THAT(text, ::testing::MatchesRegex(R"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+Z error E-d[[:space:]]*)"));

  // Refused whole: nothing changes.
  for (const LogSettingList& bad : {LogSettingList{{"log_info", true}, {"log_colour", true}},
                                    LogSettingList{{"log_info", std::string("yes")}},
                                    LogSettingList{{"log_verbose_level", int64_t{-1}}},
                                    LogSettingList{{"log_format", std::string("json")}},
                                    LogSettingList{{"log_file", std::string("/tmp/x.log")}}}) {
    absl::StatusOr<LogSettingList> r = UpdateLogSettings(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("settings." + bad.back().first));
  }
  s = UpdateLogSettings({});
  EXPECT_EQ(std::get<bool>(Get(*s, "log_info")), false);
  EXPECT_EQ(std::get<std::string>(Get(*s, "log_format")), "ISO8601");
  InitLogSettings(0, "default");
}

}  // namespace
}  // namespace kiln::server
