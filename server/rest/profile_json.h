// A kernel profile (server/core/profiler.h) as Chrome trace event JSON, the format Perfetto and
// chrome://tracing open (the "JSON Object Format" of Google's Trace Event Format document):
//
//   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
//
// Events, all with "pid" (kilnd's process id) and "tid" (one per device lane: the model instance
// on a device that ran the work, or a device's kiln.v1 graph runs):
//   "ph":"M"  process_name ("kilnd") and thread_name ("CPU instance 0", "CPU kiln.v1 graphs")
//   "ph":"X"  cat "run": one engine run (the request's compute_infer time), name = the model
//             ("kiln.v1 graph" for graph runs), args {model, version, jit, kernels}
//   "ph":"X"  cat "kernel": one timed kernel launch inside its run, name = the kernel name,
//             args {device, model, bytes, flops} (codegen's estimates)
// "ts" and "dur" are microseconds; ts counts from the start of the profile window. Launches that
// ran untimed (inside a device graph, JIT=2 on CUDA) have no event; otherData counts them
// ("untimed_launches") with the runs left out past the launch bound ("dropped_runs"), the
// window's "model" filter and "seconds". Pure; thread-safe.
#pragma once

#include <string>

#include "server/core/profiler.h"

namespace kiln::server {

std::string ProfileJson(const Profile& profile);

}  // namespace kiln::server
