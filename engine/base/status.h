// Status propagation macros over absl::Status / absl::StatusOr.
//
// The packaged Abseil (20220623) predates absl/status/status_macros.h, so kiln carries its own:
//   KILN_RETURN_IF_ERROR(expr);                 // returns expr's Status from the caller if not ok
//   KILN_ASSIGN_OR_RETURN(lhs, statusor_expr);  // unwraps a StatusOr into lhs, or returns its Status
// Both evaluate their argument exactly once. Neither throws. In a coroutine (engine/base/task.h), which must
// co_return, the twins KILN_CO_RETURN_IF_ERROR and KILN_CO_ASSIGN_OR_RETURN do the same.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KILN_STATUS_CONCAT_INNER_(a, b) a##b
#define KILN_STATUS_CONCAT_(a, b) KILN_STATUS_CONCAT_INNER_(a, b)

#define KILN_RETURN_IF_ERROR(expr)                         \
  do {                                                     \
    ::absl::Status kiln_status_ = (expr);                  \
    if (!kiln_status_.ok()) return kiln_status_;           \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_STATUS_CONCAT_(kiln_statusor_, __LINE__), lhs, expr)

#define KILN_CO_RETURN_IF_ERROR(expr)                      \
  do {                                                     \
    ::absl::Status kiln_status_ = (expr);                  \
    if (!kiln_status_.ok()) co_return kiln_status_;        \
  } while (0)

#define KILN_CO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) co_return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

#define KILN_CO_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_CO_ASSIGN_OR_RETURN_IMPL_(KILN_STATUS_CONCAT_(kiln_statusor_, __LINE__), lhs, expr)
