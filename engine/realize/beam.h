// BEAM search (tinygrad's BEAM=n): for one kernel, try kernel-opt variants on the device, keep the fastest, and
// remember the choice on disk so that no process searches the same kernel twice.
//
// The search (BeamSearch):
//  - Starts from two candidates: the hand-coded heuristic's kernel and the kernel with no opts.
//  - Each round extends every kernel of the beam by one more opt (BeamActions: UPCAST, UNROLL, ACC and THREAD on
//    CPUs; UPCAST, UNROLL, LOCAL and GROUPTOP on work-group targets), lowers each extension (illegal ones are
//    dropped by LowerKernel), drops duplicates (same rendered source) and ones whose code grows past kMaxUopGrowth
//    times the heuristic's, and compiles the rest on every core.
//  - Times each candidate alone: buffers of the kernel's parameter sizes filled with seeded random values, one
//    checked run whose outputs must equal the no-opt kernel's (integers exactly, floats within rounding: a
//    different summation order), then the best of kTimedRuns runs. A candidate whose first run takes more than
//    kSlowFactor times the best so far is not run again (the per-candidate timeout), nor is one whose run takes
//    more than BEAM_BUDGET.
//  - The `width` fastest become the next beam; the search ends when a round brings no candidate faster than the
//    beam's best, or when BEAM_BUDGET seconds have gone (checked between rounds and between candidates).
//  - The winner is the fastest kernel seen, the heuristic's included, so BEAM never makes a kernel slower (as
//    measured).
// Kernels with symbolic variables (DEFINE_VAR: a symbolic batch dim) are searched with each Variable at its maximum;
// devices that do not execute (NULL) keep the heuristic.
//
// The cache (BeamOpts): the choice is stored in runtime::CompileCache (memory, then the SQLite file shared by every
// process; CACHELEVEL=0 keeps it in memory) under "beam:" + SHA-256 of (device, renderer, compiler CacheKey --
// target CPU and features --, the kernel AST's key, width). A second process finds it and searches nothing
// (BeamCounters().searches stays 0). One search runs at a time per process (timings of two searches would disturb
// each other); a second caller for the same kernel waits and then finds the first one's result.
//
// DEBUG >= 2 prints one line per search (candidates, rounds, time, heuristic vs best, the opts) and per cache hit.
//
// VIZ (kernel_log.h): a search that runs while VIZ is on for its thread (a background search: for
// the thread that queued it) lists every candidate it built in BeamChoice::tried, with its result,
// and the winner's index; the candidates' own lowerings are not put in the rewrite trace. The last
// kMaxBeamRecords such lists are kept, so a kernel whose choice this process searched (and
// recorded) shows the candidates again on a cache hit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/codegen/codegen.h"
#include "engine/realize/kernel_log.h"
#include "engine/runtime/device.h"
#include "engine/uop/uop.h"

namespace kiln {

struct BeamChoice {
  bool heuristic = true;          // the heuristic's own kernel won (lower without explicit opts)
  std::vector<codegen::Opt> opts; // otherwise: lower with exactly these
  bool from_cache = false;
  std::string kernel;             // the heuristic kernel's name (searches only)
  // Search figures (zero for cache hits and kernels BEAM does not apply to); search_seconds includes the no-opt
  // reference run, which BEAM_BUDGET does not count.
  int candidates = 0;             // candidates compiled and timed
  int rejected = 0;               // candidates whose outputs differed from the no-opt kernel's
  int rounds = 0;
  double search_seconds = 0;
  double heuristic_seconds = 0;   // best run of the heuristic's kernel
  double best_seconds = 0;        // best run of the winner
  // Recorded only while VIZ is on (see above): every candidate in the order built, and the
  // winner's index (-1 when nothing was recorded).
  std::vector<LoggedBeamCandidate> tried;
  int chosen = -1;
};

inline constexpr size_t kMaxBeamRecords = 64;

// The kernel's choice for `width`: from the cache, else searched (and stored). Errors only for ASTs the heuristic
// itself cannot lower; device or compile failures of single candidates just drop them.
absl::StatusOr<BeamChoice> BeamOpts(runtime::Device& dev, const UOpPtr& ast, const codegen::Target& target,
                                    int width);

// One opt more than a kernel has, for each kind the target supports (tinygrad's action list, sized for kiln).
std::vector<codegen::Opt> BeamActions(const codegen::Target& target);

// The stored form of a choice ("heuristic" or "UPCAST,0,4;UNROLL,0,8") and back; false for text that does not
// parse (a cache written by another version: searched again).
std::string EncodeBeamChoice(const BeamChoice& c);
bool DecodeBeamChoice(const std::string& text, BeamChoice* c);

// Background tuning (kilnd --beam; ConfigureKernelSearch): with it on, BeamOpts answers a kernel that is not in
// the cache with the heuristic at once and queues the search on one background thread (each kernel once). When the
// queue has drained, BeamGeneration() moves on; realize's kernel keys and the JIT trace cache's keys include it while
// BEAM > 0, so the next run of a model lowers its kernels again with the stored choices and captures a new trace:
// a run uses either its old kernels or its new ones, never a mix, and nothing waits for a search.
void SetBeamBackground(bool on);
bool BeamBackground();
int64_t BeamGeneration();
// Blocks until no background search is queued or running.
void WaitForBeamIdle();

// Process-wide counters, for tests and `kiln tune`.
struct BeamCounters {
  int64_t searches = 0;     // kernels searched
  int64_t cache_hits = 0;   // kernels whose choice came from the cache
  int64_t candidates = 0;   // candidates timed by all searches
  double search_seconds = 0;
  int64_t pending = 0;      // background searches queued or running
  int64_t generation = 0;   // BeamGeneration()
};
BeamCounters GetBeamCounters();
// Every search of this process, in order (the `kiln onnx tune` table).
std::vector<BeamChoice> BeamSearchLog();

}  // namespace kiln
