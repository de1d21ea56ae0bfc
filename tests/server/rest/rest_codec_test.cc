// server/rest without sockets: the Status -> HTTP mapping, bounded JSON parsing, and the KServe
// v2 REST inference codec (JSON data -> raw little-endian bytes, binary chunks, responses).
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "server/rest/http_status.h"
#include "server/rest/infer_json.h"
#include "server/rest/json_parse.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  return out;
}

TEST(HttpStatusTest, MapsEveryCoreCode) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnknown), 500);
}

TEST(HttpStatusTest, ErrorBodyIsValidJsonEvenForInvalidUtf8) {
  EXPECT_EQ(ErrorBody("bad \"x\"\n"), R"({"error":"bad \"x\"\n"})");
  EXPECT_EQ(ErrorBody("model '\xff\xfe' \xc3\xa9"), "{\"error\":\"model '?\?' \xc3\xa9\"}");
}

// Found by tests/fuzz/net (an unknown datatype 'FP32\xf4\x90\x80\x80' echoed in a 400): sequences
// of the right shape that RFC 3629 forbids made bodies strict decoders reject.
TEST(HttpStatusTest, ValidUtf8RefusesOverlongSurrogatesAndPastMax) {
  EXPECT_EQ(ValidUtf8("\xc0\xaf"), "??");                  // overlong '/'
  EXPECT_EQ(ValidUtf8("\xe0\x80\xaf"), "???");             // overlong, 3 bytes
  EXPECT_EQ(ValidUtf8("\xf0\x80\x80\xaf"), "????");        // overlong, 4 bytes
  EXPECT_EQ(ValidUtf8("\xed\xa0\x80"), "???");             // U+D800, a surrogate
  EXPECT_EQ(ValidUtf8("FP32\xf4\x90\x80\x80"), "FP32????");  // U+110000
  EXPECT_EQ(ValidUtf8("\xf8\x88\x80\x80\x80"), "?????");    // a 5-byte form
  // The edges that are valid stay.
  EXPECT_EQ(ValidUtf8("\xc2\x80 \xed\x9f\xbf \xee\x80\x80 \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf"),
            "\xc2\x80 \xed\x9f\xbf \xee\x80\x80 \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf");
}

TEST(JsonParseTest, ParsesAndRejectsWithOffsets) {
  rapidjson::Document doc;
  ASSERT_TRUE(ParseJson(R"({"a": [1, 2.5, "x"]})", "body", &doc).ok());
  EXPECT_EQ(doc["a"][1].GetDouble(), 2.5);
  absl::Status s = ParseJson(R"({"a": })", "body", &doc);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("body: invalid JSON at offset 6"));
  s = ParseJson(std::string("{}\0{}", 5), "body", &doc);
  EXPECT_THAT(std::string(s.message()), HasSubstr("NUL"));
  EXPECT_FALSE(ParseJson("{} {}", "body", &doc).ok());
}

TEST(JsonParseTest, DepthLimitWithoutRecursion) {
  rapidjson::Document doc;
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJson(ok, "body", &doc).ok());
  const std::string deep(1000000, '[');  // never closed: the limit stops it first
  absl::Status s = ParseJson(deep, "body", &doc);
  EXPECT_THAT(std::string(s.message()), HasSubstr("nested deeper than 64"));
  EXPECT_FALSE(CheckJson(deep, "body").ok());
  EXPECT_TRUE(CheckJson(ok, "body").ok());
}

TEST(JsonParseTest, ValueCountLimit) {
  rapidjson::Document doc;
  std::string many = "[0";
  for (int64_t i = 1; i < kMaxJsonValues; ++i) many += ",0";
  many += "]";  // the array itself is one more value than the limit
  absl::Status s = ParseJson(many, "body", &doc);
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than 1048576 values"));
  many.erase(many.size() - 3, 2);  // drop one element: exactly at the limit
  EXPECT_TRUE(ParseJson(many, "body", &doc).ok());
}

TEST(InferJsonTest, JsonDataBecomesRawLittleEndian) {
  const std::string body = R"({"id": "r1", "inputs": [
      {"name": "F", "shape": [2, 2], "datatype": "FP32", "data": [[1.5, -2], [3, 0.25]]},
      {"name": "I", "shape": [3], "datatype": "INT16", "data": [-32768, 0, 32767]},
      {"name": "B", "shape": [2], "datatype": "BOOL", "data": [true, false]},
      {"name": "S", "shape": [2], "datatype": "BYTES", "data": ["ab", ""]}],
    "outputs": [{"name": "O", "parameters": {"binary_data": true}}]})";
  HttpInferRequest req;
  std::string mutable_body = body;
  ASSERT_TRUE(DecodeInferRequest(&mutable_body, -1, "m", "1", &req).ok());
  const InferRequest& r = req.request;
  EXPECT_EQ(r.model_name, "m");
  EXPECT_EQ(r.model_version, "1");
  EXPECT_EQ(r.id, "r1");
  EXPECT_EQ(r.protocol, "http");
  ASSERT_EQ(r.inputs.size(), 4u);
  EXPECT_EQ(r.raw_input_count, 4);
  EXPECT_THAT(std::vector<int64_t>(r.inputs[0].shape.begin(), r.inputs[0].shape.end()),
              ::testing::ElementsAre(2, 2));
  EXPECT_EQ(r.inputs[0].raw, Bytes<float>({1.5f, -2.f, 3.f, 0.25f}));
  EXPECT_EQ(r.inputs[1].raw, Bytes<int16_t>({-32768, 0, 32767}));
  EXPECT_EQ(r.inputs[2].raw, std::string("\x01\x00", 2));
  EXPECT_EQ(r.inputs[3].raw, Bytes<uint32_t>({2}) + "ab" + Bytes<uint32_t>({0}));
  EXPECT_EQ(r.requested_outputs, std::vector<std::string>{"O"});
  EXPECT_TRUE(req.output_binary.at("O"));
}

TEST(InferJsonTest, BinaryChunksAreViewedInOrder) {
  const std::string header = R"({"inputs": [
      {"name": "A", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
      {"name": "B", "shape": [1], "datatype": "INT64", "parameters": {"binary_data_size": 8}}],
    "parameters": {"binary_data_output": true}})";
  std::string body = header + Bytes<float>({1.f, 2.f}) + Bytes<int64_t>({-7});
  HttpInferRequest req;
  ASSERT_TRUE(DecodeInferRequest(&body, static_cast<int64_t>(header.size()), "m", "", &req).ok());
  EXPECT_EQ(req.request.inputs[0].raw, Bytes<float>({1.f, 2.f}));
  EXPECT_EQ(req.request.inputs[1].raw, Bytes<int64_t>({-7}));
  EXPECT_TRUE(req.binary_output_default);
}

TEST(InferJsonTest, ErrorsNameTheField) {
  auto error = [](std::string body, int64_t header_length = -1) {
    HttpInferRequest req;
    absl::Status s = DecodeInferRequest(&body, header_length, "m", "", &req);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << body;
    return std::string(s.message());
  };
  EXPECT_THAT(error("[]"), HasSubstr("request body: expected a JSON object"));
  EXPECT_THAT(error(R"({"inputs": 3})"), HasSubstr("inputs: missing or not an array"));
  EXPECT_THAT(error(R"({"inputs": [{"name": "A", "shape": [1], "datatype": "INT8",
                                    "data": [128]}]})"),
              HasSubstr("inputs[0].data[0]: expected an integer in [-128, 127] for INT8"));
  EXPECT_THAT(error(R"({"inputs": [{"name": "A", "shape": [3], "datatype": "FP32",
                                    "data": [1, 2]}]})"),
              HasSubstr("inputs[0].data: 2 elements but shape needs 3"));
  EXPECT_THAT(error(R"({"inputs": [{"name": "A", "shape": [1], "datatype": "FP16",
                                    "data": [1]}]})"),
              HasSubstr("cannot be sent as JSON data"));
  EXPECT_THAT(error(R"({"inputs": [{"name": "A", "shape": [1], "datatype": "FP32"}]})"),
              HasSubstr("inputs[0]: has neither data nor parameters.binary_data_size"));
  EXPECT_THAT(error("{}", 100), HasSubstr("Inference-Header-Content-Length: 100 exceeds"));
  const std::string header = R"({"inputs": [{"name": "A", "shape": [1], "datatype": "FP32",
                                             "parameters": {"binary_data_size": 4}}]})";
  EXPECT_THAT(error(header + "12345", static_cast<int64_t>(header.size())),
              HasSubstr("1 bytes after the JSON header"));
  EXPECT_THAT(error(header + "12", static_cast<int64_t>(header.size())),
              HasSubstr("4 bytes but only 2 bytes of binary data remain"));
}

TEST(InferJsonTest, ResponseJsonAndBinary) {
  InferResponse response;
  response.model_name = "m";
  response.model_version = "1";
  response.outputs.push_back({"J", "INT32", {2}, Bytes<int32_t>({-1, 5})});
  response.outputs.push_back({"K", "FP32", {1}, Bytes<float>({0.5f})});
  HttpInferRequest request;
  request.output_binary["K"] = true;
  HttpInferResponse out = EncodeInferResponse(response, request);
  ASSERT_TRUE(out.has_binary);
  const std::string json = out.body.substr(0, out.json_length);
  EXPECT_EQ(json,
            R"({"model_name":"m","model_version":"1","outputs":[)"
            R"({"name":"J","datatype":"INT32","shape":[2],"data":[-1,5]},)"
            R"({"name":"K","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}]})");
  EXPECT_EQ(out.body.substr(out.json_length), Bytes<float>({0.5f}));
}

}  // namespace
}  // namespace kiln::server
