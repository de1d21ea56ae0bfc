#include "server/rest/json_parse.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "rapidjson/error/en.h"
#include "rapidjson/memorystream.h"
#include "rapidjson/reader.h"
#include "rapidjson/stream.h"

namespace kiln::server {
namespace {

constexpr unsigned kParseFlags = rapidjson::kParseIterativeFlag;

// Forwards SAX events to `Next`; fails StartObject/StartArray past kMaxJsonDepth and any value
// past kMaxJsonValues.
template <typename Next>
class DepthLimit {
 public:
  explicit DepthLimit(Next* next) : next_(next) {}
  bool too_deep() const { return too_deep_; }
  bool too_many() const { return too_many_; }

  bool Null() { return Count() && next_->Null(); }
  bool Bool(bool b) { return Count() && next_->Bool(b); }
  bool Int(int i) { return Count() && next_->Int(i); }
  bool Uint(unsigned u) { return Count() && next_->Uint(u); }
  bool Int64(int64_t i) { return Count() && next_->Int64(i); }
  bool Uint64(uint64_t u) { return Count() && next_->Uint64(u); }
  bool Double(double d) { return Count() && next_->Double(d); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool copy) {
    return Count() && next_->RawNumber(s, n, copy);
  }
  bool String(const char* s, rapidjson::SizeType n, bool copy) {
    return Count() && next_->String(s, n, copy);
  }
  bool Key(const char* s, rapidjson::SizeType n, bool copy) { return next_->Key(s, n, copy); }
  bool StartObject() { return Enter() && next_->StartObject(); }
  bool EndObject(rapidjson::SizeType n) {
    --depth_;
    return next_->EndObject(n);
  }
  bool StartArray() { return Enter() && next_->StartArray(); }
  bool EndArray(rapidjson::SizeType n) {
    --depth_;
    return next_->EndArray(n);
  }

 private:
  bool Count() {
    if (++values_ > kMaxJsonValues) {
      too_many_ = true;
      return false;
    }
    return true;
  }
  bool Enter() {
    if (++depth_ > kMaxJsonDepth) {
      too_deep_ = true;
      return false;
    }
    return Count();
  }
  Next* next_;
  int depth_ = 0;
  int64_t values_ = 0;
  bool too_deep_ = false;
  bool too_many_ = false;
};

template <unsigned kFlags, typename Stream, typename Handler>
absl::Status Run(Stream& stream, size_t size, std::string_view what, Handler* handler) {
  DepthLimit<Handler> limited(handler);
  rapidjson::Reader reader;
  rapidjson::ParseResult ok = reader.Parse<kFlags>(stream, limited);
  if (limited.too_deep()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": JSON nested deeper than ",
                                                   kMaxJsonDepth, " levels (offset ",
                                                   reader.GetErrorOffset(), ")"));
  }
  if (limited.too_many()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": JSON holds more than ", kMaxJsonValues,
                     " values (the limit); send large tensors as binary data"));
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": invalid JSON at offset ",
                                                   ok.Offset(), ": ",
                                                   rapidjson::GetParseError_En(ok.Code())));
  }
  if (stream.Tell() != size) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": invalid JSON at offset ",
                                                   stream.Tell(), ": unexpected NUL byte"));
  }
  return absl::OkStatus();
}

template <typename Handler>
absl::Status Run(std::string_view text, std::string_view what, Handler* handler) {
  rapidjson::MemoryStream stream(text.data(), text.size());
  return Run<kParseFlags>(stream, text.size(), what, handler);
}

}  // namespace

absl::Status ParseJson(std::string_view text, std::string_view what, rapidjson::Document* doc) {
  absl::Status status;
  auto generator = [&](rapidjson::Document& handler) {
    status = Run(text, what, &handler);
    return status.ok();
  };
  doc->Populate(generator);
  return status;
}

absl::Status ParseJsonInPlace(std::string* text, std::string_view what, rapidjson::Document* doc) {
  absl::Status status;
  auto generator = [&](rapidjson::Document& handler) {
    rapidjson::InsituStringStream stream(text->data());
    status = Run<kParseFlags | rapidjson::kParseInsituFlag>(stream, text->size(), what, &handler);
    return status.ok();
  };
  doc->Populate(generator);
  return status;
}

absl::Status CheckJson(std::string_view text, std::string_view what) {
  rapidjson::BaseReaderHandler<> null_handler;
  return Run(text, what, &null_handler);
}

}  // namespace kiln::server
