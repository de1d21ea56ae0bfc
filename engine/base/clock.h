// Steady-clock helpers shared by the engine and (through engine/api/clock.h) the server.
#pragma once

#include <chrono>
#include <cstdint>

namespace kiln {

// Nanoseconds from `start` to now (steady clock).
inline uint64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
}

}  // namespace kiln
