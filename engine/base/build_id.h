// The GNU build ID of the executable or shared object that holds kiln's code: a digest the linker computes over the
// linked contents (ld's --build-id, on by default in Debian's GCC), so any change to the code gives another one.
// Caches of kiln's own derived artifacts (the lowered programs of engine/realize) key on it, so that a rebuilt
// kiln never reads what an older build derived.
#pragma once

#include <string>

namespace kiln {

// Hex digits of the build ID; empty when the object has none (then such caches are off).
const std::string& KilnBuildId();

}  // namespace kiln
