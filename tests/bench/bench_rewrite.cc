// Symbolic simplification throughput on a generated index-expression DAG (nodes/s).
//
// The generator (mirrored exactly by tests/bench/rewrite_compare.py for tinygrad):
//   LCG: s = s * 6364136223846793005 + 1442695040888963407 (mod 2^64); next() = s >> 33.
//   Variables x in [0,255], y in [0,63], z in [0,15]; pool = [x, y, z].
//   pick(): if next() % 4 == 0 -> variables[next() % 3] else pool[next() % len(pool)].
//   Per step: r = next() % 100; a = pick();
//     r < 35: a + pick()              r < 55: a * (1 + next() % 8)
//     r < 72: a / (1 + next() % 16)   r < 89: a % (1 + next() % 16)
//     else:   a + (next() % 32)
//   (CDIV/CMOD in kiln, // and % in tinygrad: every value is non-negative, so they agree.)
//   Append the result to the pool. The root is SINK(pool[3:]). Seed 1. Equal nodes are shared
//   by interning in both systems, so the DAG has fewer distinct nodes than steps; the counters
//   report distinct nodes ("nodes") and ALU nodes ("alu_nodes", comparable across systems).
// Time: GraphRewrite(root, Symbolic()) on a freshly built graph (range caches empty); building and
// destroying graphs is outside the timed region.
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/base/check.h"
#include "engine/rewrite/graph_rewrite.h"
#include "engine/symbolic/symbolic.h"
#include "engine/uop/uop.h"

namespace kiln {
namespace {

struct Lcg {
  uint64_t s;
  uint64_t Next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return s >> 33;
  }
};

UOpPtr BuildIndexGraph(int64_t steps, uint64_t seed) {
  Lcg g{seed};
  std::vector<UOpPtr> vars = {UOp::Variable("x", 0, 255), UOp::Variable("y", 0, 63),
                              UOp::Variable("z", 0, 15)};
  std::vector<UOpPtr> pool = vars;
  pool.reserve(steps + 3);
  auto pick = [&]() -> UOpPtr {
    if (g.Next() % 4 == 0) return vars[g.Next() % 3];
    return pool[g.Next() % pool.size()];
  };
  for (int64_t i = 0; i < steps; ++i) {
    uint64_t r = g.Next() % 100;
    UOpPtr a = pick();
    UOpPtr e;
    if (r < 35) {
      e = a + pick();
    } else if (r < 55) {
      e = a * static_cast<int64_t>(1 + g.Next() % 8);
    } else if (r < 72) {
      e = a / static_cast<int64_t>(1 + g.Next() % 16);
    } else if (r < 89) {
      e = a % static_cast<int64_t>(1 + g.Next() % 16);
    } else {
      e = a + static_cast<int64_t>(g.Next() % 32);
    }
    pool.push_back(std::move(e));
  }
  return UOp::Sink(absl::MakeConstSpan(pool).subspan(3));
}

void CountNodes(const UOpPtr& root, int64_t* nodes, int64_t* alu) {
  std::vector<const UOp*> order = Toposort(root);
  *nodes = static_cast<int64_t>(order.size());
  *alu = 0;
  for (const UOp* u : order) *alu += IsALU(u->op()) ? 1 : 0;
}

void BM_SymbolicRewrite(benchmark::State& state) {
  const int64_t steps = state.range(0);
  int64_t nodes = 0, alu = 0, out_nodes = 0, out_alu = 0;
  for (auto _ : state) {
    state.PauseTiming();
    UOpPtr root = BuildIndexGraph(steps, 1);
    CountNodes(root, &nodes, &alu);
    state.ResumeTiming();
    absl::StatusOr<UOpPtr> out = GraphRewrite(root, Symbolic(), {.name = "bench symbolic"});
    state.PauseTiming();
    KILN_CHECK(out.ok());
    CountNodes(*out, &out_nodes, &out_alu);
    out = UOpPtr();
    root = UOpPtr();
    state.ResumeTiming();
  }
  state.counters["steps"] = static_cast<double>(steps);
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["alu_nodes"] = static_cast<double>(alu);
  state.counters["out_nodes"] = static_cast<double>(out_nodes);
  state.counters["out_alu_nodes"] = static_cast<double>(out_alu);
  state.counters["nodes_per_s"] = benchmark::Counter(static_cast<double>(nodes),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SymbolicRewrite)->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace
}  // namespace kiln
