// Failpoints: named places in kilnd's durable-write paths where a test can stop the process at an
// exact moment, to prove that a crash there loses nothing and leaves nothing behind.
//
// Armed only by the environment variable KILN_FAILPOINTS, parsed once (on the first Hit() in the
// process); unset or empty, every KILN_FAILPOINT() is one predictable branch on a cached bool.
//
//   KILN_FAILPOINTS=<name>=<action>[@<n>][,<name>=<action>[@<n>]...]
//     action  kill   raise(SIGKILL) at that point (no destructors, no flush: a crash)
//             throw  throw std::runtime_error there (proves that no exception ends the process:
//                    the request gets INTERNAL with a request id, guard.h)
//             sleep<ms>  hold the thread that many milliseconds, then go on (a slow execution
//                    that keeps the device busy: how the batching tests fill a queue on cue)
//     @n      fire on the n-th time the point is reached in this process (1-based; default 1;
//             sleep without @n fires on every hit); earlier hits pass
//   e.g. KILN_FAILPOINTS=checkpoint.after_temp_fsync=kill@3
//   A malformed value, an unknown point name or an unknown action is logged once and ignored
//   (the daemon never fails to start because of it).
//
// Points (server/core; each says what is on disk when it fires):
//   checkpoint.after_temp_write     the data temp file ckpt-<step>.safetensors.tmp is complete but
//                                   not fsynced; no manifest
//   checkpoint.after_temp_fsync     the temp file is fsynced, not yet renamed
//   checkpoint.after_rename         the data is renamed to ckpt-<step>.safetensors, the folder is
//                                   not fsynced, no manifest (a partial generation)
//   checkpoint.after_manifest       the manifest is durable (the generation is complete); older
//                                   generations not pruned; the job store still names the previous
//                                   checkpoint
//   publish.after_intent            the job store records the version the publish will write;
//                                   nothing written in the repository yet
//   publish.after_version_write     <repo>/<model>/<version>/ is complete and renamed into place
//                                   (and config.pbtxt written); not loaded, the job not marked
//   publish.after_mark              the job store records published_version; the job not yet
//                                   SUCCEEDED
//   infer.execute                   a model request (or a dynamic batch, once) is about to execute
//                                   (on the device's executor thread, or inline on the transport's)
//   graph.execute                   a kiln.v1.Engine graph is about to run
// Thread safety: Hit() may be called from any thread.
#pragma once

#include <string_view>

namespace kiln::server::failpoint {

// True when KILN_FAILPOINTS arms at least one point (parsed on first call, then cached).
bool Armed();
// Counts a hit of `name` and performs its action when it is due. Only called when Armed().
void Hit(std::string_view name);
// The known point names (for validation and documentation).
bool IsKnown(std::string_view name);

}  // namespace kiln::server::failpoint

#define KILN_FAILPOINT(name)                                       \
  do {                                                             \
    if (__builtin_expect(::kiln::server::failpoint::Armed(), 0)) { \
      ::kiln::server::failpoint::Hit(name);                        \
    }                                                              \
  } while (0)
