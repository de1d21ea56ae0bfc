#include "server/rest/multipart.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "server/rest/http_message.h"

namespace kiln::server {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Parameters of a header value "type; k1=v1; k2="v 2"": calls fn(key, value) for each; values
// may be quoted strings with backslash escapes. False on an unterminated quote.
template <typename Fn>
bool ForEachParam(std::string_view value, Fn fn) {
  size_t i = value.find(';');
  while (i != std::string_view::npos && i < value.size()) {
    ++i;
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    const size_t eq = value.find_first_of("=;", i);
    if (eq == std::string_view::npos || value[eq] == ';') {
      i = eq;
      continue;
    }
    const std::string_view key = Trim(value.substr(i, eq - i));
    size_t j = eq + 1;
    while (j < value.size() && (value[j] == ' ' || value[j] == '\t')) ++j;
    std::string v;
    if (j < value.size() && value[j] == '"') {
      ++j;
      bool closed = false;
      for (; j < value.size(); ++j) {
        if (value[j] == '\\' && j + 1 < value.size()) {
          v.push_back(value[++j]);
        } else if (value[j] == '"') {
          closed = true;
          ++j;
          break;
        } else {
          v.push_back(value[j]);
        }
      }
      if (!closed) return false;
      i = value.find(';', j);
    } else {
      const size_t end = value.find(';', j);
      v = std::string(Trim(value.substr(j, end == std::string_view::npos ? end : end - j)));
      i = end;
    }
    fn(key, v);
  }
  return true;
}

// Part header lines (without the blank line) -> name and filename of its Content-Disposition.
bool ParsePartHeaders(std::string_view headers, MultipartReader::Part* part) {
  bool named = false;
  while (!headers.empty()) {
    const size_t end = headers.find("\r\n");
    const std::string_view line = headers.substr(0, end);
    headers = end == std::string_view::npos ? std::string_view() : headers.substr(end + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || line.empty() || line[0] == ' ' || line[0] == '\t') {
      return false;
    }
    if (!EqualsNoCase(Trim(line.substr(0, colon)), "content-disposition")) continue;
    const std::string_view value = Trim(line.substr(colon + 1));
    if (!StartsWithNoCase(value, "form-data")) return false;
    const bool ok = ForEachParam(value, [&](std::string_view key, std::string v) {
      if (EqualsNoCase(key, "name")) {
        part->name = std::move(v);
        named = true;
      } else if (EqualsNoCase(key, "filename")) {
        part->filename = std::move(v);
      }
    });
    if (!ok) return false;
  }
  return named;
}

}  // namespace

bool MultipartReader::BoundaryOf(std::string_view content_type, std::string* boundary) {
  boundary->clear();
  const bool ok = ForEachParam(content_type, [&](std::string_view key, std::string v) {
    if (EqualsNoCase(key, "boundary")) *boundary = std::move(v);
  });
  return ok && !boundary->empty() && boundary->size() <= 70;
}

MultipartReader::MultipartReader(std::string boundary)
    : first_("--" + boundary), delimiter_("\r\n--" + boundary) {}

bool MultipartReader::Feed(std::string_view data, const OnPart& on_part, const OnData& on_data) {
  if (state_ == State::kMalformed || stopped_) return false;
  bool ok = true;
  if (held_.empty()) {
    const size_t used = Process(data, on_part, on_data, &ok);
    if (ok) held_.assign(data.substr(used));
  } else {
    held_.append(data);
    const size_t used = Process(held_, on_part, on_data, &ok);
    if (ok) held_.erase(0, used);
  }
  return ok;
}

size_t MultipartReader::Process(std::string_view in, const OnPart& on_part, const OnData& on_data,
                                bool* ok) {
  size_t pos = 0;
  auto malformed = [&] {
    state_ = State::kMalformed;
    *ok = false;
    return pos;
  };
  auto stop = [&] {
    stopped_ = true;
    *ok = false;
    return pos;
  };
  for (;;) {
    const std::string_view rest = in.substr(pos);
    switch (state_) {
      case State::kFirst:
        if (rest.size() < first_.size()) {
          if (first_.compare(0, rest.size(), rest) != 0) return malformed();
          return pos;
        }
        if (rest.compare(0, first_.size(), first_) != 0) return malformed();
        pos += first_.size();
        state_ = State::kAfterBoundary;
        break;
      case State::kAfterBoundary:
        if (rest.size() < 2) return pos;
        if (rest.compare(0, 2, "--") == 0) {
          state_ = State::kEpilogue;
          return in.size();
        }
        if (rest.compare(0, 2, "\r\n") != 0) return malformed();
        pos += 2;
        state_ = State::kHeaders;
        break;
      case State::kHeaders: {
        size_t end;
        size_t skip;
        if (rest.size() >= 2 && rest.compare(0, 2, "\r\n") == 0) {
          end = 0;  // no header lines at all
          skip = 2;
        } else {
          end = rest.find("\r\n\r\n");
          skip = 4;
        }
        if (end == std::string_view::npos) {
          if (rest.size() > kMaxPartHeaderBytes) return malformed();
          return pos;
        }
        if (end > kMaxPartHeaderBytes) return malformed();
        Part part;
        if (!ParsePartHeaders(rest.substr(0, end), &part)) return malformed();
        pos += end + skip;
        state_ = State::kData;
        if (!on_part(part)) return stop();
        break;
      }
      case State::kData: {
        const size_t hit = rest.find(delimiter_);
        if (hit == std::string_view::npos) {
          // Everything but a possible start of the delimiter is data.
          const size_t keep = std::min(rest.size(), delimiter_.size() - 1);
          const size_t n = rest.size() - keep;
          if (n > 0) {
            pos += n;
            if (!on_data(rest.data(), n)) return stop();
          }
          return pos;
        }
        pos += hit + delimiter_.size();
        state_ = State::kAfterBoundary;
        if (hit > 0 && !on_data(rest.data(), hit)) return stop();
        break;
      }
      case State::kEpilogue:
        return in.size();
      case State::kMalformed:
        return malformed();
    }
  }
}

}  // namespace kiln::server
