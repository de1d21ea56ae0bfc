// Parser for the UOp text form (grammar in printer.h).
//
// Every node is built through UOp::Create, so the parser accepts exactly what the validated
// factory accepts; its output is interned like any other graph. Input is untrusted (it may come
// from the wire): the parser never aborts, never throws and never recurses on graph depth. Every
// error is InvalidArgument with the message "line N: <problem>", e.g.
//   line 3: unknown op 'FOO'                    line 2: dangling reference %7
//   line 4: duplicate definition of %1 ...      line 1: unknown dtype 'flaot'
//   line 5: ADD: sources must share one dtype   line 2: unterminated string
//   line 6: integer overflow in '99999999999999999999'
//   line 1: op CUSTOM is internal only ...      line 9: missing 'roots' line
// Limits (each an error, never a crash): kMaxParseLineBytes per line, kMaxParseIntVecLen values in
// an int vector, and kMaxParseRank dims in a movement or reduce arg.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/uop/uop.h"

namespace kiln {

inline constexpr size_t kMaxParseLineBytes = size_t{1} << 20;
inline constexpr size_t kMaxParseIntVecLen = 1024;
inline constexpr size_t kMaxParseRank = 64;

// Parses a graph and returns its roots in the order of the `roots` line (repeats kept).
absl::StatusOr<std::vector<UOpPtr>> ParseGraph(std::string_view text);

// ParseGraph for text with exactly one root.
absl::StatusOr<UOpPtr> ParseGraphSingle(std::string_view text);

}  // namespace kiln
