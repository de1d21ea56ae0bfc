// Lowered programs by kernel, on disk beside the compiled binaries (issue #21 item 3: the first step from a warm
// cache). The compile cache keys binaries by rendered source, so a warm start still lowered every kernel (index
// simplification, opts, expansion, linearization, rendering) to find its source: 650 ms of the Fashion-MNIST
// training step's 109 kernels, more than its compiles from the cache took. This cache maps what the lowering reads
// to the Program's launch facts and the compile-cache key of its binary, so a warm start goes from the AST to the
// binary.
//
// Key ("program:" + SHA-256): kiln's build ID (engine/base/build_id.h: the lowering is kiln's own code, so another
// build never reads what this one lowered; no build ID, no cache), the renderer, the compiler's key (target CPU and
// features), the codegen Target, the AST's structural digest, NOOPT and TC, and explicit opts (BEAM's choice).
// Value (a few hundred bytes): the Program without its UOps (name, buffers, launch sizes, threads, opts, estimates,
// backend hints), the size of its source, and the binary's compile-cache key; not the source, so that each build's
// records stay small (the binaries themselves are shared by source across builds). Kernels with Variables are not
// cached (their DEFINE_VARs are UOps the launch reads). Stored in runtime::CompileCache's Lookup/Store table, so
// CACHELEVEL=0 and the cache's memory bound apply.
#pragma once

#include <cstdint>
#include <string>

#include "engine/codegen/codegen.h"
#include "engine/codegen/program.h"
#include "engine/runtime/device.h"
#include "engine/uop/uop.h"

namespace kiln::realize_internal {

// The cache key, or "" when the cache is off for this kernel (no build ID).
std::string ProgramCacheKey(runtime::Device& dev, const UOpPtr& ast, const codegen::Target& target,
                            const codegen::LowerOptions& lower);

// A lowered program as the cache holds it.
struct CachedProgram {
  codegen::Program program;  // without uops or vars
  int64_t uop_count = 0;     // the lowered program's UOps (LoadedKernel::bytes estimates from it)
  int64_t source_bytes = 0;  // ... and its rendered source's size
  std::string binary_key;    // runtime::CompileCache::Key of its binary
};

std::string SerializeProgram(const codegen::Program& p, int64_t source_bytes, const std::string& binary_key);
// false when `blob` is not a whole, well-formed record of this format.
bool DeserializeProgram(const std::string& blob, CachedProgram* out);

}  // namespace kiln::realize_internal
