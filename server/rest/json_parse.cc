#include "server/rest/json_parse.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/api/json_limits.h"
#include "rapidjson/error/en.h"
#include "rapidjson/memorystream.h"
#include "rapidjson/reader.h"
#include "rapidjson/stream.h"

namespace kiln::server {
namespace {

constexpr unsigned kParseFlags = rapidjson::kParseIterativeFlag;

template <unsigned kFlags, typename Stream, typename Handler>
absl::Status Run(Stream& stream, size_t size, std::string_view what, Handler* handler) {
  JsonLimits<Handler> limited(handler, kMaxJsonDepth, kMaxJsonValues);
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
