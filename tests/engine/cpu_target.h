// Avx512TwoCoreLlvm: the codegen Target of a 2-core AVX-512 CPU as the LLVM backend reports it (threads, 64-byte
// vectors, vector ops, 64-bit indices), for tests that lower a kernel as it would be lowered there, whatever the
// machine running the test. LowerScheduledKernels: a value's schedule, each kernel lowered for such a target.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/codegen/codegen.h"
#include "engine/schedule/schedule.h"

namespace kiln::test_util {

inline codegen::Target Avx512TwoCoreLlvm() {
  codegen::Target cpu;
  cpu.renderer = "llvm";
  cpu.has_threads = true;
  cpu.max_threads = 2;
  cpu.supports_vectors = true;
  cpu.vector_bytes = 64;
  cpu.wide_index = true;
  return cpu;
}

// Schedules `root` and lowers each of the schedule's kernels (not its copies) for `target`, in schedule order.
inline absl::StatusOr<std::vector<codegen::Program>> LowerScheduledKernels(const UOpPtr& root,
                                                                          const codegen::Target& target) {
  absl::StatusOr<Schedule> s = CreateSchedule({root});
  if (!s.ok()) return s.status();
  std::vector<codegen::Program> out;
  for (const ScheduleItem& it : s->items) {
    if (it.kind != ScheduleItem::Kind::kKernel) continue;
    absl::StatusOr<codegen::Program> p = codegen::LowerKernel(it.ast, target, {});
    if (!p.ok()) return p.status();
    out.push_back(*std::move(p));
  }
  return out;
}

}  // namespace kiln::test_util
