// No request can end the process: every entry point of server/core that a transport calls, and
// every thread server/core runs requests or jobs on, runs its work through Guard. An exception
// that escapes becomes a Status -- RESOURCE_EXHAUSTED for std::bad_alloc, INTERNAL otherwise --
// whose message names the operation and a request id ("request id 17") and never the exception's
// text; the log gets one error line with the id, the exception's type and text, and the stack of
// the catching thread (symbolized when kilnd called absl::InitializeSymbolizer).
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstdint>
#include <exception>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::server {

// A process-unique id for a failed request (counts from 1).
uint64_t NextRequestId();

// Inside a catch block: logs the current exception and returns the Status for it.
absl::Status StatusFromCurrentException(std::string_view operation);

// Runs fn() (returning absl::Status or absl::StatusOr<T>) and returns its result, or the Status of
// an exception that escaped it.
template <typename Fn>
auto Guard(std::string_view operation, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (...) {
    return StatusFromCurrentException(operation);
  }
}

// Runs fn() (returning nothing); an escaped exception is logged and swallowed. For callbacks and
// thread bodies whose caller cannot take a Status.
template <typename Fn>
void GuardVoid(std::string_view operation, Fn&& fn) {
  try {
    fn();
  } catch (...) {
    (void)StatusFromCurrentException(operation);
  }
}

}  // namespace kiln::server
