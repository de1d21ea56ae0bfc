// KILN_CHECK: aborts on a broken internal invariant (a bug in kiln), never on bad input.
// Bad input is reported with absl::Status; see STYLE.md.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace kiln::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const char* msg);
}  // namespace kiln::internal

#define KILN_CHECK(cond)                                                    \
  do {                                                                      \
    if (__builtin_expect(!(cond), 0))                                       \
      ::kiln::internal::CheckFailed(__FILE__, __LINE__, #cond, nullptr);    \
  } while (0)

#define KILN_CHECK_MSG(cond, msg)                                           \
  do {                                                                      \
    if (__builtin_expect(!(cond), 0))                                       \
      ::kiln::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg));      \
  } while (0)
