// FUZZ_CHECK: the oracle of a fuzz target. A broken property is a finding like a crash: it prints
// what broke and aborts, so libFuzzer saves the input (crash-<sha1>) and the CTest fails.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, what)                                                                  \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                                  \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)
