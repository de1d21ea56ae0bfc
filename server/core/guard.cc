#include "server/core/guard.h"

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <typeinfo>

#include <cxxabi.h>

#include "absl/debugging/stacktrace.h"
#include "absl/debugging/symbolize.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

std::string CurrentExceptionType() {
  const std::type_info* t = abi::__cxa_current_exception_type();
  if (t == nullptr) return "unknown";
  int status = 0;
  char* demangled = abi::__cxa_demangle(t->name(), nullptr, nullptr, &status);
  std::string out = status == 0 && demangled != nullptr ? demangled : t->name();
  std::free(demangled);
  return out;
}

std::string StackText() {
  void* frames[48];
  const int n = absl::GetStackTrace(frames, 48, /*skip_count=*/2);
  std::string out;
  char symbol[512];
  for (int i = 0; i < n; ++i) {
    const char* name = absl::Symbolize(frames[i], symbol, sizeof(symbol)) ? symbol : "?";
    absl::StrAppend(&out, "\n    #", i, " ", name);
  }
  return out;
}

}  // namespace

uint64_t NextRequestId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

absl::Status StatusFromCurrentException(std::string_view operation) {
  const uint64_t id = NextRequestId();
  const std::string type = CurrentExceptionType();
  std::string what = "(not a std::exception)";
  bool out_of_memory = false;
  try {
    throw;
  } catch (const std::bad_alloc& e) {
    out_of_memory = true;
    what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  spdlog::error("request id {}: {}: exception {}: {}; stack:{}", id, std::string(operation), type,
                what.substr(0, 1024), StackText());
  if (out_of_memory) {
    return absl::ResourceExhaustedError(absl::StrCat(
        std::string(operation), ": the server ran out of memory (request id ", id, "; details in the server log)"));
  }
  return absl::InternalError(absl::StrCat(std::string(operation), ": internal error (request id ", id,
                                          "; details in the server log)"));
}

}  // namespace kiln::server
