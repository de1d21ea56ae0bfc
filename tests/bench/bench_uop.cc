// UOp interning throughput (nodes/s), 1 and 2 threads.
//   BM_InternDistinct: every node is new (a CONST and an ADD per step; each thread uses its own
//     Variable so threads never share nodes); the batch is released between iterations, outside
//     the timed region.
//   BM_Reintern: the same nodes are built again while alive, so every Make is a table hit.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "engine/uop/uop.h"

namespace kiln {
namespace {

constexpr int kBatch = 8192;

void BM_InternDistinct(benchmark::State& state) {
  UOpPtr v = UOp::Variable(absl::StrCat("bench_t", state.thread_index()), 0, 1 << 20);
  std::vector<UOpPtr> keep;
  keep.reserve(2 * kBatch);
  int64_t next = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      UOpPtr c = UOp::ConstInt(next++);
      keep.push_back(v + c);
      keep.push_back(std::move(c));
    }
    state.PauseTiming();
    keep.clear();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * 2 * kBatch);
  state.counters["nodes_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2 * kBatch, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_InternDistinct)->Threads(1)->Threads(2)->UseRealTime();

void BM_Reintern(benchmark::State& state) {
  UOpPtr v = UOp::Variable(absl::StrCat("bench_r", state.thread_index()), 0, 1 << 20);
  std::vector<UOpPtr> alive;
  alive.reserve(kBatch);
  for (int i = 0; i < kBatch; ++i) alive.push_back(v * (i + 1) + i);
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      UOpPtr n = v * (i + 1) + i;  // three hits: two CONSTs, MUL, ADD
      benchmark::DoNotOptimize(n.get());
    }
  }
  state.SetItemsProcessed(state.iterations() * 4 * kBatch);
  state.counters["nodes_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 4 * kBatch, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Reintern)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace kiln
