#include "engine/uop/ops.h"

namespace kiln {

std::optional<Op> ParseOp(std::string_view name) {
  for (int i = 0; i < kNumOps; ++i) {
    if (kOpInfo[i].name == name) return static_cast<Op>(i);
  }
  return std::nullopt;
}

}  // namespace kiln
