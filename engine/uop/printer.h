// The UOp text form: a printer (this header) and a parser (parser.h) that round-trip every graph
// bit-exactly. Because UOps are interned, ParseGraph(PrintGraph(roots)) returns the very same
// pointers as `roots` while they are alive.
//
// Grammar (one statement per line; blanks and tabs separate tokens; `#` outside a string starts a
// comment that runs to the end of the line; blank lines are ignored):
//
//   graph    := node* roots
//   node     := ref "=" OP dtype "(" [ref ("," ref)*] ")" [arg] ["tag=" int]
//   roots    := "roots" [ref ("," ref)*]          -- exactly once, the last statement
//   ref      := "%" [A-Za-z0-9_]+                 -- defined once, before any use
//   OP       := an ops.def name, UPPER case (ADD, RANGE, ...)
//   dtype    := DType::Name() spelling: float, half, int, uchar, index, void, float.vec(4),
//               float.ptr(), float.vec(4).ptr(local), ...
//   arg      := "true" | "false"                  -- bool
//             | int                               -- int64
//             | float                             -- ConstFloat
//             | string                            -- std::string
//             | "(" [int ("," int)*] ")"          -- IntVec
//             | OP                                -- Op
//             | "axis(" int "," AXIS ")"          -- AxisArg; AXIS: LOOP, REDUCE, ...
//             | "var(" string "," int "," int ")" -- VarArg (name, min, max)
//             | "reduce(" OP "," intvec ")"       -- ReduceArg (op, axes)
//   int      := "-"? [0-9]+       -- int64; a CONST of an unsigned dtype prints (and may be written
//                                    as) the uint64 bit pattern, 0 .. 18446744073709551615
//   float    := shortest round-trip decimal that always holds "." or "e" (1.0, 0.1, 1e-310,
//               -0.0, 1.7976931348623157e+308) | "nan" | "inf" | "-inf"
//   string   := '"' chars '"' with escapes \" \\ \n \t \r and \xNN (two hex digits); the printer
//               escapes every byte outside printable ASCII as \xNN, so a string never spans lines
//
// The source list is always written, even when empty ("()"), so an IntVec arg that follows it is
// never confused with the sources. A missing arg is std::monostate; a missing tag is 0.
//
// Example:
//   %0 = DEFINE_VAR index () var("x", 0, 10)
//   %1 = CONST index () 4
//   %2 = ADD index (%0, %1)
//   %3 = SINK void (%2) tag=1
//   roots %3
//
// The printer numbers nodes %0, %1, ... in Toposort order (children before parents); the parser
// accepts any names. Printing is iterative, so graph depth is unbounded.
#pragma once

#include <string>

#include "absl/types/span.h"
#include "engine/uop/arg.h"
#include "engine/uop/uop.h"

namespace kiln {

// The whole graph reachable from `roots`, one node per line, then the `roots` line naming every
// root in order (repeats kept). Null roots are a caller bug (KILN_CHECK). Every UOp prints, though
// internal-only ops (CUSTOM, CUSTOMI) will not parse back.
std::string PrintGraph(absl::Span<const UOpPtr> roots);
std::string PrintGraph(const UOpPtr& root);

// One-line debug form of a single node: `OP dtype (SRC_OP, SRC_OP) arg [tag=t]`. Sources are shown
// by op name only, so this form is for logs and error messages; it does not parse.
std::string PrintNode(const UOp& u);

// An arg in the grammar above (empty string for monostate). `as_unsigned` prints an int64 as its
// uint64 bit pattern (the printer sets it for CONSTs of unsigned dtypes).
std::string PrintArg(const Arg& arg, bool as_unsigned = false);

// A string literal with quotes and escapes, as in the grammar.
std::string QuoteString(std::string_view s);

}  // namespace kiln
