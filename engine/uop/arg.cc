#include "engine/uop/arg.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace kiln {

ConstFloat::ConstFloat(double v) : value(std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v) {}

uint64_t ConstFloat::Bits() const {
  uint64_t b;
  std::memcpy(&b, &value, sizeof b);
  return b;
}

size_t HashArg(const Arg& a) {
  size_t idx = a.index();
  return std::visit(
      [idx](const auto& v) -> size_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return absl::HashOf(idx);
        } else {
          return absl::HashOf(idx, v);
        }
      },
      a);
}

char AxisLetter(AxisType t) {
  switch (t) {
    case AxisType::kGlobal: return 'g';
    case AxisType::kLocal: return 'l';
    case AxisType::kLoop: return 'L';
    case AxisType::kGroupReduce: return 'G';
    case AxisType::kReduce: return 'R';
    case AxisType::kUpcast: return 'u';
    case AxisType::kUnroll: return 'r';
    case AxisType::kThread: return 't';
  }
  return '?';
}

std::string_view AxisTypeName(AxisType t) {
  switch (t) {
    case AxisType::kGlobal: return "GLOBAL";
    case AxisType::kLocal: return "LOCAL";
    case AxisType::kLoop: return "LOOP";
    case AxisType::kGroupReduce: return "GROUP_REDUCE";
    case AxisType::kReduce: return "REDUCE";
    case AxisType::kUpcast: return "UPCAST";
    case AxisType::kUnroll: return "UNROLL";
    case AxisType::kThread: return "THREAD";
  }
  return "?";
}

}  // namespace kiln
