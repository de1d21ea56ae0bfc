// Fuzz target: the UOp text form (engine/uop/parser.cc ParseGraph; the interp backend's program
// text, test and tool input). Every node goes through the validating UOp::Create.
// Oracle, for text that parses: printing the graph and parsing the print gives the very same
// (interned) nodes, in the same order (printer.h's round-trip contract).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/uop/parser.h"
#include "engine/uop/printer.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<kiln::UOpPtr>> roots = kiln::ParseGraph(text);
  if (!roots.ok()) return 0;
  const std::string printed = kiln::PrintGraph(*roots);
  absl::StatusOr<std::vector<kiln::UOpPtr>> again = kiln::ParseGraph(printed);
  FUZZ_CHECK(again.ok(),
             "the printed graph does not parse: " + again.status().ToString() + "\n" + printed);
  FUZZ_CHECK(again->size() == roots->size(), "the round trip changed the number of roots");
  for (size_t i = 0; i < roots->size(); ++i) {
    FUZZ_CHECK(
        (*again)[i].get() == (*roots)[i].get(),
        "the round trip gave a different node for root " + std::to_string(i) + "\n" + printed);
  }
  return 0;
}
