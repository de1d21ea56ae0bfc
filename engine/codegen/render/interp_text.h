// INTERP "renderer": the linear program as UOp text (engine/uop/printer.h) plus one header comment line, so the
// interpreter backend (backends/interp) can load a kernel from its "source" exactly like any other backend.
//
// Format:
//   # kiln-interp v1 name=<kernel> buffers=<slot>:<dtype>:<size>:<in|out>,... vars=<i>,... global=<g0>,<g1>,<g2>
//     local=<l0>,<l1>,<l2> threads=<t>                                     (all on one line)
//   <PrintGraph of every uop, rooted at the uops list in order>
//   roots %0, %1, ...                                                      (the linear order, one root per uop)
// `vars` are indices into the uops list (the roots line). `buffers` / `vars` are empty ("buffers= vars=") when the
// kernel has none. Because every uop is a root, in list order, the printed node numbering is the linear order.
//
// ParseInterpText is the exact inverse (up to interning: the uops come back as the same nodes while they are alive).
// Its input is treated as untrusted: every problem is an InvalidArgument, never an abort.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/codegen/render/renderer.h"

namespace kiln::codegen {

class InterpTextRenderer final : public Renderer {
 public:
  std::string name() const override { return "interp"; }
  const RendererCaps& caps() const override;
  absl::StatusOr<std::string> Render(const Program& program) const override;
};

// Parses text produced by InterpTextRenderer back into a Program (name, uops, buffers, vars, launch dims).
absl::StatusOr<Program> ParseInterpText(std::string_view text);

}  // namespace kiln::codegen
