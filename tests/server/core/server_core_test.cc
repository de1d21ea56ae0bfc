// server/core without a daemon: config parsing and normalization, datatypes, validation.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/datatype.h"
#include "server/core/model_config.h"
#include "server/core/validate.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kConfig[] = R"pb(
  platform: "kiln_graph"
  max_batch_size: 4 input
  [ {
    name: "X"
    data_type: TYPE_FP32
    dims: [ -1, 3 ]
  }
    , {
      name: "S"
      data_type: TYPE_STRING
      dims: [ 2 ]
    }] output
  [ {
    name: "Y"
    data_type: TYPE_FP32
    dims: [ 3 ]
  }]
)pb";

inference::ModelConfig Config() {
  auto config = ParseModelConfigText(kConfig);
  EXPECT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(NormalizeModelConfig("m", &*config).ok());
  return *config;
}

TEST(ModelConfigTest, NormalizeFillsNameAndVersionPolicy) {
  inference::ModelConfig c = Config();
  EXPECT_EQ(c.name(), "m");
  EXPECT_EQ(c.version_policy().latest().num_versions(), 1u);
}

// The message names the place and the kind of error, never the file's text (issue #26: a
// config.pbtxt linked to a secret leaked its first token through protobuf's quoted message).
TEST(ModelConfigTest, ParseErrorNamesLineAndKindButNoText) {
  auto c = ParseModelConfigText("platform: \"kiln_graph\"\nbogus: 3\n");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("line 2:"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(": unknown field name"));
  EXPECT_THAT(std::string(c.status().message()), Not(HasSubstr("bogus")));
  auto secret = ParseModelConfigText("TOPSECRET_API_KEY_12345\n");
  ASSERT_FALSE(secret.ok());
  EXPECT_THAT(std::string(secret.status().message()), Not(HasSubstr("TOPSECRET")));
  EXPECT_THAT(std::string(secret.status().message()), HasSubstr("config.pbtxt: line "));
  auto value = ParseModelConfigText("max_batch_size: \"s3cr3t\"\n");
  ASSERT_FALSE(value.ok());
  EXPECT_THAT(std::string(value.status().message()), Not(HasSubstr("s3cr3t")));
}

// kiln_graph and kiln_builtin need every input: `optional` is refused at load (issue #26, C1).
TEST(ModelConfigTest, OptionalInputsAreRefusedForGraphAndBuiltin) {
  for (const char* platform : {"kiln_graph", "kiln_builtin"}) {
    auto c = ParseModelConfigText(absl::StrCat(
        "platform: \"", platform, "\"\ninput [{ name: \"X\" data_type: TYPE_FP32 dims: [2] optional: true }]\n"
        "output [{ name: \"Y\" data_type: TYPE_FP32 dims: [2] }]\n"));
    ASSERT_TRUE(c.ok()) << c.status();
    absl::Status st = NormalizeModelConfig("m", &*c);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << platform;
    EXPECT_THAT(std::string(st.message()), HasSubstr("config input[0].optional"));
    EXPECT_THAT(std::string(st.message()), HasSubstr("'X' cannot be optional"));
  }
}

TEST(ModelConfigTest, RejectsBadConfigs) {
  struct Case {
    std::string text;
    std::string words;
  };
  const std::vector<Case> cases = {
      {"name: \"other\" platform: \"kiln_graph\"", "differs from the model folder"},
      {"platform: \"x\"", "unknown platform 'x'"},
      {"platform: \"kiln_graph\" max_batch_size: -1 input [{name: \"a\" data_type: TYPE_FP32 "
       "dims: [1]}] output [{name: \"b\" data_type: TYPE_FP32 dims: [1]}]",
       "max_batch_size"},
      {"platform: \"kiln_graph\" output [{name: \"b\" data_type: TYPE_FP32 dims: [1]}]",
       "at least one input"},
      {"platform: \"kiln_graph\" input [{name: \"a\" data_type: TYPE_FP32 dims: [0]}] "
       "output [{name: \"b\" data_type: TYPE_FP32 dims: [1]}]",
       "input[0].dims[0]"},
      {"platform: \"kiln_graph\" input [{name: \"a\" dims: [1]}] "
       "output [{name: \"b\" data_type: TYPE_FP32 dims: [1]}]",
       "input[0].data_type"},
      {"platform: \"kiln_graph\" input [{name: \"a\" data_type: TYPE_FP32 dims: [1]}, "
       "{name: \"a\" data_type: TYPE_FP32 dims: [1]}] "
       "output [{name: \"b\" data_type: TYPE_FP32 dims: [1]}]",
       "duplicate tensor name 'a'"},
      {"platform: \"kiln_graph\" default_model_filename: \"../x\" input [{name: \"a\" "
       "data_type: TYPE_FP32 dims: [1]}] output [{name: \"b\" data_type: TYPE_FP32 dims: [1]}]",
       "default_model_filename"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseModelConfigText(c.text);
    ASSERT_TRUE(parsed.ok()) << c.text;
    absl::Status s = NormalizeModelConfig("m", &*parsed);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.words)) << c.text;
  }
}

// Found by fuzz_model_config: protobuf's text format lets escapes put any bytes into a string
// field, and a tensor name that is not UTF-8 cannot be sent back in a protobuf or JSON response.
// kiln_llm's serving parameters: slots from max_batch_size, the integers bounded, the booleans "true" or "false".
TEST(ModelConfigTest, ReadsKilnLlmParameters) {
  auto c = ParseModelConfigText(
      "platform: \"kiln_llm\"\nmax_batch_size: 8\n"
      "parameters { key: \"max_ctx\" value { string_value: \"512\" } }\n"
      "parameters { key: \"warm\" value { string_value: \"false\" } }\n"
      "parameters { key: \"int8_activations\" value { string_value: \"true\" } }\n");
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<LlmConfig> llm = ReadLlmConfig(*c);
  ASSERT_TRUE(llm.ok()) << llm.status();
  EXPECT_EQ(llm->slots, 8);
  EXPECT_EQ(llm->max_ctx, 512);
  EXPECT_FALSE(llm->warm);
  EXPECT_TRUE(llm->int8_activations);
  auto plain = ParseModelConfigText("platform: \"kiln_llm\"\n");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(ReadLlmConfig(*plain)->int8_activations);  // off unless asked for
  auto bad = ParseModelConfigText(
      "platform: \"kiln_llm\"\nparameters { key: \"int8_activations\" value { string_value: \"yes\" } }\n");
  ASSERT_TRUE(bad.ok());
  absl::Status st = CheckLlmConfig(*bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("parameters[int8_activations]"));
}

TEST(ModelConfigTest, RejectsStringsThatAreNotUtf8) {
  const std::string tensors =
      " input [{name: \"a\" data_type: TYPE_FP32 dims: [1]}]"
      " output [{name: \"b\" data_type: TYPE_FP32 dims: [1]}]";
  struct Case {
    std::string text;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"platform: \"kiln_graph\" input [{name: \"a\" data_type: TYPE_FP32 dims: [1]}] "
       "output [{name: \"OUT\\264\\264\" data_type: TYPE_FP32 dims: [1]}]",
       "config output[0].name: not valid UTF-8"},
      {"platform: \"kiln_builtin\"" + tensors +
           " parameters { key: \"architecture\" value { string_value: \"\\xff\" } }",
       "config parameters[0].value.string_value: not valid UTF-8"},
      {"platform: \"kiln_graph\"" + tensors + " parameters { key: \"k\\300\\200\" value {} }",
       "config parameters[0].key: not valid UTF-8"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseModelConfigText(c.text);
    ASSERT_TRUE(parsed.ok()) << c.text << ": " << parsed.status();
    absl::Status s = NormalizeModelConfig("m", &*parsed);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.field)) << c.text;
  }
  // UTF-8 beyond ASCII is fine.
  auto ok = ParseModelConfigText(
      "platform: \"kiln_graph\" input [{name: \"\xc3\xa9t\xc3\xa9\" data_type: TYPE_FP32 "
      "dims: [1]}] output [{name: \"b\" data_type: TYPE_FP32 dims: [1]}]");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(NormalizeModelConfig("m", &*ok).ok());
}

TEST(ModelConfigTest, ModelNames) {
  for (const char* ok : {"add_sub", "model-1", "..my_model"}) {
    EXPECT_EQ(IsValidModelName(ok), ok[0] != '.') << ok;
  }
  for (const char* bad : {"", ".", "..", "../etc", "a/b", "/etc", "a b", ".hidden"}) {
    EXPECT_FALSE(IsValidModelName(bad)) << bad;
  }
  EXPECT_FALSE(IsValidModelName(std::string(300, 'a')));
}

TEST(DataTypeTest, RoundTripsEveryName) {
  for (const char* name : {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                           "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"}) {
    auto type = ParseDataTypeName(name);
    ASSERT_TRUE(type.has_value()) << name;
    EXPECT_EQ(DataTypeName(*type), name);
  }
  EXPECT_FALSE(ParseDataTypeName("fp32").has_value());
  EXPECT_EQ(DataTypeByteSize(inference::TYPE_BF16), 2);
  EXPECT_EQ(DataTypeByteSize(inference::TYPE_STRING), 0);
  EXPECT_EQ(ContentsFieldFor(inference::TYPE_INT8), ContentsField::kInt);
  EXPECT_EQ(ContentsFieldFor(inference::TYPE_FP16), ContentsField::kNone);
}

// X: FP32 [2, 5, 3] raw; S: BYTES [2, 2] raw with valid framing.
struct Request {
  std::vector<int64_t> x_shape = {2, 5, 3};
  std::vector<int64_t> s_shape = {2, 2};
  std::string x_raw = std::string(2 * 5 * 3 * 4, '\0');
  std::string s_raw;
  Request() {
    for (int i = 0; i < 4; ++i) s_raw += std::string("\x02\x00\x00\x00hi", 6);
  }
  InferRequest Build() const {
    InferRequest r;
    r.model_name = "m";
    r.raw_input_count = 2;
    InferInput x;
    x.name = "X";
    x.datatype = "FP32";
    x.shape = x_shape;
    x.raw = x_raw;
    InferInput s;
    s.name = "S";
    s.datatype = "BYTES";
    s.shape = s_shape;
    s.raw = s_raw;
    r.inputs = {x, s};
    return r;
  }
};

TEST(ValidateTest, AcceptsValidRequestAndRecomputesSizes) {
  Request req;
  auto v = ValidateInferRequest(Config(), req.Build(), 1 << 20);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->batch_size, 2);
  EXPECT_EQ(v->inputs[0].byte_size, 120);
  EXPECT_EQ(v->inputs[1].element_count, 4);
  EXPECT_EQ(v->outputs, std::vector<int>{0});
}

TEST(ValidateTest, BytesFramingIsChecked) {
  Request req;
  req.s_raw.resize(req.s_raw.size() - 1);  // last element runs past the end
  auto v = ValidateInferRequest(Config(), req.Build(), 1 << 20);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("raw_input_contents[1]"));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("BYTES element 3"));

  Request fewer;
  fewer.s_raw = fewer.s_raw.substr(0, 18);  // 3 elements for shape [2,2]
  v = ValidateInferRequest(Config(), fewer.Build(), 1 << 20);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("holds 3 BYTES elements"));
}

TEST(ValidateTest, VariableDimAcceptsZeroButBatchDoesNot) {
  Request req;
  req.x_shape = {2, 0, 3};
  req.x_raw.clear();
  EXPECT_TRUE(ValidateInferRequest(Config(), req.Build(), 1 << 20).ok());
}

TEST(ValidateTest, TotalBytesLimitIsResourceExhausted) {
  Request req;
  auto v = ValidateInferRequest(Config(), req.Build(), 100);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("limit of 100 bytes"));
}

TEST(ValidateTest, Fp16HasNoTypedForm) {
  auto config = ParseModelConfigText(
      "platform: \"kiln_graph\" input [{name: \"h\" data_type: TYPE_FP16 dims: [2]}] "
      "output [{name: \"o\" data_type: TYPE_FP16 dims: [2]}]");
  ASSERT_TRUE(config.ok());
  ASSERT_TRUE(NormalizeModelConfig("m", &*config).ok());
  std::vector<int64_t> shape = {2};
  InferRequest r;
  r.model_name = "m";
  InferInput h;
  h.name = "h";
  h.datatype = "FP16";
  h.shape = shape;
  h.has_contents = true;
  r.inputs = {h};
  auto v = ValidateInferRequest(*config, r, 1 << 20);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("send raw_input_contents"));
}

}  // namespace
}  // namespace kiln::server
