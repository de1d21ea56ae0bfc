#include "engine/base/check.h"

namespace kiln::internal {

void CheckFailed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "KILN_CHECK failed at %s:%d: %s%s%s\n", file, line, cond,
               msg != nullptr ? " -- " : "", msg != nullptr ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace kiln::internal
