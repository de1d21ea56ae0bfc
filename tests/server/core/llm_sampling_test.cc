// The sampling fields every kiln_llm route reads (llm_sampling.h): each field and its aliases, the
// ranges and types refused with the field named as the caller passes it, null leaving a field
// unset, and keys that are not sampling fields reported as such (untouched).
#include "server/core/llm_sampling.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"

namespace kiln::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Reads every member of the JSON object `json` with prefix "p.".
absl::Status ReadAll(const char* json, SamplingFields* out, int* read = nullptr) {
  rapidjson::Document doc;
  doc.Parse(json);
  EXPECT_FALSE(doc.HasParseError()) << json;
  const rapidjson::Value& object = doc;
  for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
    const std::string key(it->name.GetString(), it->name.GetStringLength());
    absl::StatusOr<bool> r = ReadSamplingField(key, it->value, "p." + key, out);
    if (!r.ok()) return r.status();
    if (read != nullptr && *r) ++*read;
  }
  return absl::OkStatus();
}

TEST(LlmSamplingTest, ReadsEveryField) {
  SamplingFields f;
  int read = 0;
  ASSERT_TRUE(ReadAll(R"({"max_new_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": -1,
                          "seed": -3, "stop": ["a", "bc"], "ignore_eos": true, "n": 1,
                          "best_of": null, "presence_penalty": 0, "repetition_penalty": 1,
                          "user": "x"})",
                      &f, &read)
                  .ok());
  EXPECT_EQ(read, 11);  // every key but "user"
  EXPECT_EQ(f.max_tokens, 7);
  EXPECT_EQ(f.params.temperature, 0.0);
  EXPECT_EQ(f.params.top_p, 0.5);
  EXPECT_EQ(f.params.top_k, 0);  // -1: no limit
  EXPECT_EQ(f.params.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_THAT(f.params.stop, ElementsAre("a", "bc"));
  EXPECT_TRUE(f.params.ignore_eos);

  SamplingFields g;
  ASSERT_TRUE(ReadAll(R"({"max_tokens": null, "temperature": null, "stop": "x", "top_k": 40})", &g)
                  .ok());
  EXPECT_FALSE(g.max_tokens.has_value());
  EXPECT_EQ(g.params.temperature, 1.0);  // null leaves the default
  EXPECT_THAT(g.params.stop, ElementsAre("x"));
  EXPECT_EQ(g.params.top_k, 40);
}

TEST(LlmSamplingTest, NotASamplingFieldIsReportedUntouched) {
  SamplingFields f;
  rapidjson::Value v(3);
  absl::StatusOr<bool> r = ReadSamplingField("beam_width", v, "p.beam_width", &f);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_FALSE(f.max_tokens.has_value());
}

TEST(LlmSamplingTest, RefusalsNameTheField) {
  struct Case {
    const char* json;
    const char* message;
  };
  for (const Case& c : {
           Case{R"({"max_tokens": 0})", "p.max_tokens: 0 is outside 1..1048576"},
           Case{R"({"max_tokens": 1.5})", "p.max_tokens: not an integer"},
           Case{R"({"temperature": -1})", "p.temperature: -1 is outside [0, 100]"},
           Case{R"({"temperature": "hot"})", "p.temperature: not a number"},
           Case{R"({"top_p": 0})", "p.top_p: 0 is outside"},
           Case{R"({"top_k": -2})", "p.top_k: -2 is outside -1.."},
           Case{R"({"stop": [1]})", "p.stop[0]: not a string"},
           Case{R"({"stop": 3})", "p.stop: neither a string nor an array of strings"},
           Case{R"({"ignore_eos": null})", "p.ignore_eos: not a boolean"},
           Case{R"({"n": 2})", "p.n: 2 is outside 1..1"},
           Case{R"({"frequency_penalty": 0.5})", "p.frequency_penalty: not supported (0 only)"},
           Case{R"({"repetition_penalty": 1.2})", "p.repetition_penalty: not supported (1 only)"},
       }) {
    SamplingFields f;
    absl::Status s = ReadAll(c.json, &f);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.json << " " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.json;
  }
}

}  // namespace
}  // namespace kiln::server
