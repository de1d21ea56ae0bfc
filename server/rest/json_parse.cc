#include "server/rest/json_parse.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "rapidjson/error/en.h"
#include "rapidjson/memorystream.h"
#include "rapidjson/reader.h"

namespace kiln::server {
namespace {

constexpr unsigned kParseFlags = rapidjson::kParseIterativeFlag;

// Forwards SAX events to `Next` and fails StartObject/StartArray past kMaxJsonDepth.
template <typename Next>
class DepthLimit {
 public:
  explicit DepthLimit(Next* next) : next_(next) {}
  bool too_deep() const { return too_deep_; }

  bool Null() { return next_->Null(); }
  bool Bool(bool b) { return next_->Bool(b); }
  bool Int(int i) { return next_->Int(i); }
  bool Uint(unsigned u) { return next_->Uint(u); }
  bool Int64(int64_t i) { return next_->Int64(i); }
  bool Uint64(uint64_t u) { return next_->Uint64(u); }
  bool Double(double d) { return next_->Double(d); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool copy) {
    return next_->RawNumber(s, n, copy);
  }
  bool String(const char* s, rapidjson::SizeType n, bool copy) { return next_->String(s, n, copy); }
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
  bool Enter() {
    if (++depth_ > kMaxJsonDepth) {
      too_deep_ = true;
      return false;
    }
    return true;
  }
  Next* next_;
  int depth_ = 0;
  bool too_deep_ = false;
};

template <typename Handler>
absl::Status Run(std::string_view text, std::string_view what, Handler* handler) {
  rapidjson::MemoryStream stream(text.data(), text.size());
  DepthLimit<Handler> limited(handler);
  rapidjson::Reader reader;
  rapidjson::ParseResult ok = reader.Parse<kParseFlags>(stream, limited);
  if (limited.too_deep()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": JSON nested deeper than ",
                                                   kMaxJsonDepth, " levels (offset ",
                                                   reader.GetErrorOffset(), ")"));
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": invalid JSON at offset ", ok.Offset(),
                                                   ": ", rapidjson::GetParseError_En(ok.Code())));
  }
  if (stream.Tell() != text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": invalid JSON at offset ", stream.Tell(), ": unexpected NUL byte"));
  }
  return absl::OkStatus();
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

absl::Status CheckJson(std::string_view text, std::string_view what) {
  rapidjson::BaseReaderHandler<> null_handler;
  return Run(text, what, &null_handler);
}

}  // namespace kiln::server
