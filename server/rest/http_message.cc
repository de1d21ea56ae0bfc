#include "server/rest/http_message.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

const std::pair<std::string, std::string>* Find(const HeaderList& list, std::string_view name,
                                                bool ignore_case) {
  for (const auto& kv : list) {
    if (ignore_case ? EqualsNoCase(kv.first, name) : kv.first == name) return &kv;
  }
  return nullptr;
}

int Unhex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `in` (and '+' -> ' ' when `plus_is_space`); false on a bad escape.
bool Decode(std::string_view in, bool plus_is_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = Unhex(in[i + 1]);
      const int lo = Unhex(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 507:
      return "Insufficient Storage";
    default:
      return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

}  // namespace

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(a[i])) !=
        absl::ascii_tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && EqualsNoCase(s.substr(0, prefix.size()), prefix);
}

std::string_view HttpRequest::Header(std::string_view name) const {
  const auto* kv = Find(headers, name, /*ignore_case=*/true);
  return kv == nullptr ? std::string_view() : std::string_view(kv->second);
}

bool HttpRequest::HasHeader(std::string_view name) const {
  return Find(headers, name, /*ignore_case=*/true) != nullptr;
}

int HttpRequest::HeaderCount(std::string_view name) const {
  int n = 0;
  for (const auto& kv : headers) n += EqualsNoCase(kv.first, name) ? 1 : 0;
  return n;
}

std::string_view HttpRequest::Param(std::string_view name) const {
  const auto* kv = Find(params, name, /*ignore_case=*/false);
  return kv == nullptr ? std::string_view() : std::string_view(kv->second);
}

bool HttpRequest::HasParam(std::string_view name) const {
  return Find(params, name, /*ignore_case=*/false) != nullptr;
}

bool HttpRequest::IsMultipart() const {
  return StartsWithNoCase(Header("Content-Type"), "multipart/form-data");
}

bool ParseTarget(std::string_view target, std::string* path, HeaderList* params) {
  params->clear();
  if (StartsWithNoCase(target, "http://") ||
      StartsWithNoCase(target, "https://")) {  // absolute-form (RFC 9112 §3.2.2)
    const size_t authority = target.find("//") + 2;
    const size_t slash = target.find_first_of("/?", authority);
    if (slash == std::string_view::npos) {
      target = "/";
    } else {
      target = target.substr(slash);
      if (target[0] == '?') return false;
    }
  }
  if (target.empty() || target[0] != '/') return false;
  const size_t question = target.find('?');
  if (!Decode(target.substr(0, question), /*plus_is_space=*/false, path)) return false;
  if (question == std::string_view::npos) return true;
  std::string_view query = target.substr(question + 1);
  const size_t hash = query.find('#');
  if (hash != std::string_view::npos) query = query.substr(0, hash);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string key, value;
    if (!Decode(pair.substr(0, eq), /*plus_is_space=*/true, &key)) return false;
    if (eq != std::string_view::npos &&
        !Decode(pair.substr(eq + 1), /*plus_is_space=*/true, &value)) {
      return false;
    }
    params->emplace_back(std::move(key), std::move(value));
  }
  return true;
}

std::string SerializeHead(const HttpResponse& res, size_t body_bytes, bool keep_alive,
                          int request_version, bool chunked) {
  std::string head = absl::StrCat("HTTP/1.1 ", res.status, " ", Reason(res.status), "\r\n");
  if (!res.content_type.empty()) absl::StrAppend(&head, "Content-Type: ", res.content_type, "\r\n");
  for (const auto& [name, value] : res.headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
  if (chunked) {
    head += "Transfer-Encoding: chunked\r\n";
  } else if (res.status >= 200 && res.status != 204 && res.status != 304) {
    absl::StrAppend(&head, "Content-Length: ", body_bytes, "\r\n");
  }
  if (!keep_alive) {
    head += "Connection: close\r\n";
  } else if (request_version == 10) {
    head += "Connection: keep-alive\r\n";
  }
  head += "\r\n";
  return head;
}

}  // namespace kiln::server
