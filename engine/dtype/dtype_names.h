// Long scalar names, the one dtype-name table's second column (dtype.cc kInfo).
#pragma once

#include <string_view>

#include "engine/dtype/dtype.h"

namespace kiln {

// The long name of a scalar type ("float32", "uint8", "bool"): the name kiln's wire formats and
// APIs use (engine/api WireDTypeName; server/core's KServe table maps through it).
std::string_view ScalarLongName(ScalarType s);

}  // namespace kiln
