// Internal to engine/api: no exception leaves an Engine method (STYLE: "No exception crosses a
// library boundary"). GuardEngineCall runs `fn` and turns an escaped std::bad_alloc into
// RESOURCE_EXHAUSTED and any other exception into INTERNAL; the message names the entry point and
// never carries the exception's text (which may hold internal details); the log line does.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <typeinfo>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kiln::api {

template <typename Fn>
auto GuardEngineCall(const char* entry, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    spdlog::error("{}: out of memory (std::bad_alloc)", entry);
    return absl::ResourceExhaustedError(
        absl::StrCat(entry, ": out of memory while running the request"));
  } catch (const std::exception& e) {
    spdlog::error("{}: exception {}: {}", entry, typeid(e).name(), e.what());
    return absl::InternalError(absl::StrCat(entry, ": internal error (an exception in the engine)"));
  } catch (...) {
    spdlog::error("{}: unknown exception", entry);
    return absl::InternalError(absl::StrCat(entry, ": internal error (an exception in the engine)"));
  }
}

}  // namespace kiln::api
