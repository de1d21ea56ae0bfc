// The REST gateway's HTTP/1.1 framing without sockets (http_parse.h, http_message.h,
// multipart.h): where a head ends and what is refused (RFC 9112), request-target decoding, the
// strict chunked decoder, and the streaming multipart reader fed in every split.
#include "server/rest/http_parse.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/rest/http_message.h"
#include "server/rest/multipart.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

struct Scan {
  HeadScanner::Result result;
  std::string head;  // the head found, when complete
  HttpError error;
};

Scan ScanAll(const std::string& bytes, HeadLimits limits = {}) {
  HeadScanner scanner(limits);
  const HeadScanner::Result r = scanner.Scan(bytes);
  Scan s{r, "", scanner.error()};
  if (r == HeadScanner::Result::kComplete) {
    s.head = bytes.substr(scanner.begin(), scanner.end() - scanner.begin());
  }
  return s;
}

// The same bytes one at a time, as a dripping client sends them.
Scan ScanByteByByte(const std::string& bytes, HeadLimits limits = {}) {
  HeadScanner scanner(limits);
  std::string buf;
  for (char c : bytes) {
    buf.push_back(c);
    const HeadScanner::Result r = scanner.Scan(buf);
    if (r == HeadScanner::Result::kComplete) {
      return {r, buf.substr(scanner.begin(), scanner.end() - scanner.begin()), {}};
    }
    if (r == HeadScanner::Result::kError) return {r, "", scanner.error()};
  }
  return {HeadScanner::Result::kNeedMore, "", {}};
}

TEST(HeadScannerTest, FindsTheHeadInOneGoAndByteByByte) {
  const std::string head = "GET /v2 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
  for (const Scan& s : {ScanAll(head + "GET /next"), ScanByteByByte(head + "GET /next")}) {
    EXPECT_EQ(s.result, HeadScanner::Result::kComplete);
    EXPECT_EQ(s.head, head);
  }
  EXPECT_EQ(ScanAll("GET /v2 HTTP/1.1\r\nHost: x\r\n").result, HeadScanner::Result::kNeedMore);
  // An empty line before the request line is skipped (RFC 9112 §2.2).
  EXPECT_EQ(ScanAll("\r\n" + head).head, head);
}

TEST(HeadScannerTest, RefusesBareLineEndingsAndObsFold) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"GET /v2 HTTP/1.1\nHost: x\n\n", "bare LF"},
      {"GET /v2 HTTP/1.1\r\nHost: x\n\r\n", "bare LF"},
      {"GET /v2 HTTP/1.1\r\nHost: x\rX: y\r\n\r\n", "CR not followed by LF"},
      {"GET /v2 HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  folded\r\n\r\n", "obs-fold"},
      {"GET /v2 HTTP/1.1\r\n Host: x\r\n\r\n", "obs-fold"},
      {"\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", "empty lines"},
  };
  for (const auto& [bytes, words] : cases) {
    for (const Scan& s : {ScanAll(bytes), ScanByteByByte(bytes)}) {
      EXPECT_EQ(s.result, HeadScanner::Result::kError) << bytes;
      EXPECT_EQ(s.error.status, 400) << bytes;
      EXPECT_THAT(s.error.message, HasSubstr(words)) << bytes;
    }
  }
}

TEST(HeadScannerTest, LimitsAreCheckedAsBytesArrive) {
  // Request line over 8 KiB: 414 before its end arrives.
  Scan s = ScanAll("GET /" + std::string(9000, 'a'));
  EXPECT_EQ(s.result, HeadScanner::Result::kError);
  EXPECT_EQ(s.error.status, 414);
  // One field line over 8 KiB: 400.
  s = ScanAll("GET / HTTP/1.1\r\nX-Big: " + std::string(9000, 'b'));
  EXPECT_EQ(s.error.status, 400);
  EXPECT_THAT(s.error.message, HasSubstr("8192"));
  // All field lines over max_header_bytes: 431 naming the limits.
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 40; ++i)
    many += "X-Pad-" + std::to_string(i) + ": " + std::string(1000, 'p') + "\r\n";
  s = ScanAll(many);
  EXPECT_EQ(s.error.status, 431);
  EXPECT_THAT(s.error.message, HasSubstr("request headers"));
  EXPECT_THAT(s.error.message, HasSubstr("16384"));
  // More than max_header_count lines: 431.
  std::string lines = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 5; ++i) lines += "A: b\r\n";
  EXPECT_EQ(ScanAll(lines + "\r\n", {16 << 10, 4}).error.status, 431);
  EXPECT_EQ(ScanAll(lines + "\r\n", {16 << 10, 5}).result, HeadScanner::Result::kComplete);
}

HttpError ParseError(const std::string& head) {
  ParsedHead parsed;
  HttpError error;
  EXPECT_FALSE(ParseRequestHead(head, &parsed, &error)) << head;
  return error;
}

ParsedHead Parse(const std::string& head) {
  ParsedHead parsed;
  HttpError error;
  EXPECT_TRUE(ParseRequestHead(head, &parsed, &error)) << head << ": " << error.message;
  return parsed;
}

TEST(ParseRequestHeadTest, RefusesSmugglingMaterial) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
       "Content-Length: sent 2 times"},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
       "Content-Length: sent 2 times"},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n", "Content-Length"},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n", "Content-Length"},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "Content-Length"},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
       "Content-Length"},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
       "Content-Length and Transfer-Encoding"},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
       "Content-Length and Transfer-Encoding"},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "only chunked"},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "only chunked"},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
       "Transfer-Encoding: chunked\r\n\r\n",
       "Transfer-Encoding: sent 2 times"},
      {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0"},
      {"GET / HTTP/1.1\r\n\r\n", "Host: missing"},
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "Host: sent 2 times"},
      {"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", "Host: not a host"},
      {"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", "method BREW"},
      {"GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", "request target"},
      {"GET v2 HTTP/1.1\r\nHost: x\r\n\r\n", "request target"},
      {"GET / HTTP/2.0\r\nHost: x\r\n\r\n", "request head"},
      {"GET / HTTP/1.1\r\nBad Name: x\r\nHost: x\r\n\r\n", "request head"},
      {"GET / HTTP/1.1\r\nNoColon\r\nHost: x\r\n\r\n", "without ':'"},
  };
  for (const auto& [head, words] : cases) {
    const HttpError e = ParseError(head);
    EXPECT_EQ(e.status, 400) << head;
    EXPECT_THAT(e.message, HasSubstr(words)) << head;
  }
  const HttpError e = ParseError("POST / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n");
  EXPECT_EQ(e.status, 417);
}

TEST(ParseRequestHeadTest, ReadsTheRequest) {
  ParsedHead p = Parse(
      "POST /v2/models/a%20b/infer?x=1&name=..%2Fy&flag HTTP/1.1\r\nHost: localhost:8000\r\n"
      "content-length: 12\r\nExpect: 100-continue\r\nX-Empty:\r\n\r\n");
  EXPECT_EQ(p.request.method, "POST");
  EXPECT_EQ(p.request.path, "/v2/models/a b/infer");
  EXPECT_EQ(p.request.Param("x"), "1");
  EXPECT_EQ(p.request.Param("name"), "../y");
  EXPECT_TRUE(p.request.HasParam("flag"));
  EXPECT_EQ(p.request.content_length, 12u);
  EXPECT_FALSE(p.request.chunked);
  EXPECT_TRUE(p.request.has_body());
  EXPECT_EQ(p.request.Header("CONTENT-LENGTH"), "12");
  EXPECT_TRUE(p.request.HasHeader("x-empty"));
  EXPECT_TRUE(p.expect_continue);
  EXPECT_TRUE(p.keep_alive);

  p = Parse(
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(p.request.chunked);
  EXPECT_FALSE(p.keep_alive);
  // HTTP/1.0: Host optional, keep-alive only when asked for.
  p = Parse("GET /v2 HTTP/1.0\r\n\r\n");
  EXPECT_EQ(p.request.version, 10);
  EXPECT_FALSE(p.keep_alive);
  EXPECT_FALSE(p.request.has_body());
  EXPECT_TRUE(Parse("GET /v2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
  // absolute-form targets (RFC 9112 §3.2.2)
  EXPECT_EQ(Parse("GET http://h:1/v2/health/ready?a=b HTTP/1.1\r\nHost: h:1\r\n\r\n").request.path,
            "/v2/health/ready");
}

struct Decoded {
  std::string body;
  size_t consumed = 0;
  bool done = false;
  HttpError error;
};

Decoded Decode(BodyDecoder d, const std::string& in, bool byte_by_byte = false) {
  Decoded out;
  if (!byte_by_byte) {
    out.consumed = d.Feed(in, &out.body);
  } else {
    for (size_t i = 0; i < in.size() && !d.done() && !d.failed(); ++i) {
      out.consumed += d.Feed(std::string_view(in).substr(i, 1), &out.body);
    }
  }
  out.done = d.done();
  out.error = d.error();
  return out;
}

BodyDecoder::Limits Limits(int64_t bytes = 1 << 20, int64_t chunks = 100) {
  return {bytes, chunks, HeadLimits{64, 2}};
}

TEST(BodyDecoderTest, FixedLengthLeavesTheNextRequest) {
  const Decoded d = Decode(BodyDecoder::Fixed(5), "helloGET /");
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.body, "hello");
  EXPECT_EQ(d.consumed, 5u);
  EXPECT_TRUE(BodyDecoder::Fixed(0).done());
}

TEST(BodyDecoderTest, ChunkedBodiesWholeAndByteByByte) {
  const std::string in =
      "5\r\nhello\r\n1;ext=\"v\" ; b\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";
  for (bool split : {false, true}) {
    const Decoded d = Decode(BodyDecoder::Chunked(Limits()), in, split);
    EXPECT_TRUE(d.done) << d.error.message;
    EXPECT_EQ(d.body, "hello 0123456789");
    EXPECT_EQ(d.consumed, in.size() - 4);
  }
}

TEST(BodyDecoderTest, RefusesLenientChunkFraming) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1\n \n0\n\n", "bare LF after the chunk size"},
      {"1\r\n \n0\r\n\r\n", "not followed by CRLF"},
      {"1\r\n x\r\n0\r\n\r\n", "not followed by CRLF"},
      {"1\r\n \r\n0\r\n\n", "bare LF ending the body"},
      {"1\r\n \r\n0\r\nX: y\n\r\n", "bare LF in the trailer"},
      {"1\r\n \r\n0\r\n folded\r\n\r\n", "obs-fold"},
      {"zz\r\n", "not hexadecimal"},
      {"\r\n", "not hexadecimal"},
      {"-1\r\n", "not hexadecimal"},
      {"1 \r\n", "whitespace after the chunk size"},
      {"0x10\r\n", "not hexadecimal"},
      {"11111111111111111\r\n", "16 hex digits"},
      {"1\rx", "CR not followed by LF"},
      {"1;a\nb\r\n", "bare LF in a chunk extension"},
  };
  for (const auto& [in, words] : cases) {
    for (bool split : {false, true}) {
      const Decoded d = Decode(BodyDecoder::Chunked(Limits()), in, split);
      EXPECT_FALSE(d.done) << in;
      EXPECT_EQ(d.error.status, 400) << in;
      EXPECT_THAT(d.error.message, HasSubstr(words)) << in;
    }
  }
}

TEST(BodyDecoderTest, ChunkedLimits) {
  // Bytes: refused from the chunk size, before the data arrives.
  Decoded d = Decode(BodyDecoder::Chunked(Limits(10)), "5\r\nhello\r\n6\r\n");
  EXPECT_EQ(d.error.status, 413);
  EXPECT_THAT(d.error.message, HasSubstr("exceeds the limit of 10 bytes"));
  EXPECT_TRUE(
      Decode(BodyDecoder::Chunked(Limits(10)), "5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n").done);
  // Chunks.
  std::string three = "1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n";
  d = Decode(BodyDecoder::Chunked(Limits(1 << 20, 2)), three);
  EXPECT_EQ(d.error.status, 413);
  EXPECT_THAT(d.error.message, HasSubstr("more than 2 chunks"));
  EXPECT_EQ(Decode(BodyDecoder::Chunked(Limits(1 << 20, 3)), three).body, "abc");
  // Trailer lines and bytes count against the header limits (2 lines, 64 bytes here).
  d = Decode(BodyDecoder::Chunked(Limits()), "0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n");
  EXPECT_EQ(d.error.status, 431);
  d = Decode(BodyDecoder::Chunked(Limits()), "0\r\nA: " + std::string(100, 'x') + "\r\n\r\n");
  EXPECT_EQ(d.error.status, 431);
  // A chunk line (size and extensions) over 4 KiB.
  d = Decode(BodyDecoder::Chunked(Limits()), "1;" + std::string(5000, 'e') + "\r\n");
  EXPECT_EQ(d.error.status, 400);
}

struct PartSeen {
  std::string name, filename, data;
};

// Feeds `body` in pieces of `piece` bytes; returns the parts seen and whether it was accepted.
bool ReadMultipart(const std::string& body, size_t piece, std::vector<PartSeen>* parts) {
  MultipartReader reader("XyZ");
  parts->clear();
  for (size_t i = 0; i < body.size(); i += piece) {
    const bool ok = reader.Feed(
        std::string_view(body).substr(i, piece),
        [&](const MultipartReader::Part& p) {
          parts->push_back({p.name, p.filename, ""});
          return true;
        },
        [&](const char* data, size_t n) {
          parts->back().data.append(data, n);
          return true;
        });
    if (!ok) return false;
  }
  return reader.complete();
}

TEST(MultipartReaderTest, PartsInEverySplit) {
  const std::string body =
      "--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nmy set\r\n"
      "--XyZ\r\ncontent-disposition: form-data; name=train_images; filename=\"a;b.gz\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\n\r\n--XyY partial\r\n--X\r\n"
      "--XyZ--\r\nepilogue";
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}, body.size()}) {
    std::vector<PartSeen> parts;
    ASSERT_TRUE(ReadMultipart(body, piece, &parts)) << piece;
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0].name, "name");
    EXPECT_EQ(parts[0].data, "my set");
    EXPECT_EQ(parts[1].name, "train_images");
    EXPECT_EQ(parts[1].filename, "a;b.gz");
    EXPECT_EQ(parts[1].data, "\r\n--XyY partial\r\n--X");
  }
}

TEST(MultipartReaderTest, Malformed) {
  std::vector<PartSeen> parts;
  // No first boundary (a preamble), part headers without a name, headers over 8 KiB, a missing
  // close delimiter.
  EXPECT_FALSE(ReadMultipart("preamble\r\n--XyZ\r\n", 4, &parts));
  EXPECT_FALSE(ReadMultipart("--XyZ\r\nContent-Type: x\r\n\r\ndata\r\n--XyZ--", 4, &parts));
  EXPECT_FALSE(ReadMultipart(
      "--XyZ\r\nContent-Disposition: form-data; name=\"x\"; X: " + std::string(10000, 'h'), 512,
      &parts));
  EXPECT_FALSE(
      ReadMultipart("--XyZ\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\ndata", 3, &parts));
  EXPECT_FALSE(ReadMultipart("--XyZ!!", 2, &parts));
  std::string boundary;
  EXPECT_TRUE(MultipartReader::BoundaryOf("multipart/form-data; boundary=\"a b\"", &boundary));
  EXPECT_EQ(boundary, "a b");
  EXPECT_TRUE(MultipartReader::BoundaryOf("multipart/form-data;boundary=k", &boundary));
  EXPECT_EQ(boundary, "k");
  EXPECT_FALSE(MultipartReader::BoundaryOf("multipart/form-data", &boundary));
  EXPECT_FALSE(MultipartReader::BoundaryOf("multipart/form-data; boundary=" + std::string(71, 'b'),
                                           &boundary));
}

TEST(SerializeHeadTest, FramingAndConnection) {
  HttpResponse res;
  res.status = 405;
  res.content_type = kJsonType;
  res.headers.emplace_back("Allow", "POST");
  EXPECT_EQ(SerializeHead(res, 12, true, 11, false),
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\nAllow: POST\r\n"
            "Content-Length: 12\r\n\r\n");
  res = HttpResponse();
  EXPECT_EQ(SerializeHead(res, 0, false, 11, true),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(SerializeHead(res, 0, true, 10, false),
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n");
}

}  // namespace
}  // namespace kiln::server
