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

// Now on the steady clock, in nanoseconds since its epoch: the time base of launch start times
// (KernelLaunch::start_ns, api::KernelTiming::start_ns) and of the server's profile windows.
inline int64_t SteadyNowNs() {
  return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now().time_since_epoch())
                                  .count());
}

}  // namespace kiln
