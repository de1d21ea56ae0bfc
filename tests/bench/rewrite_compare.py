#!/usr/bin/env python3
"""kiln vs tinygrad: symbolic simplification throughput on the same generated index DAG.

Builds the graph of tests/bench/bench_rewrite.cc (same LCG, seed, op sequence; see the comment
there) in tinygrad, times graph_rewrite(root, symbolic), runs kiln's bench_rewrite binary for the
same number of steps (--benchmark_format=json) and prints both throughputs and the ratio
kiln/tinygrad, in distinct input nodes per second.

Times are CPU seconds of the rewrite (the machine may be shared; wall seconds are printed too).
tinygrad's Python rewrite costs ~250 us/node at 10,000 steps and grows superlinearly (100,000 steps
took it several minutes of CPU), so by default both sides are timed on the 10,000-step graph
(--steps 100000 or 1000000 for larger ones); kiln's 1,000,000-step figure is always printed.

Usage: rewrite_compare.py [BENCH_BINARY] [--steps N] [--tinygrad-repeats R]
The binary defaults to $KILN_BUILD_DIR/tests/bench/bench_rewrite (KILN_BUILD_DIR defaults to
build/release). Exit status 1 if the binary fails or the two graphs' ALU node counts differ.
"""
import argparse
import json
import os
import subprocess
import sys
import time

M64 = (1 << 64) - 1


class Lcg:
  def __init__(self, seed):
    self.s = seed & M64

  def next(self):
    self.s = (self.s * 6364136223846793005 + 1442695040888963407) & M64
    return self.s >> 33


def build_tinygrad_graph(steps, seed=1):
  from tinygrad.uop.ops import UOp
  g = Lcg(seed)
  vs = [UOp.variable("x", 0, 255), UOp.variable("y", 0, 63), UOp.variable("z", 0, 15)]
  pool = list(vs)

  def pick():
    if g.next() % 4 == 0: return vs[g.next() % 3]
    return pool[g.next() % len(pool)]

  for _ in range(steps):
    r = g.next() % 100
    a = pick()
    if r < 35: e = a + pick()
    elif r < 55: e = a * (1 + g.next() % 8)
    elif r < 72: e = a // (1 + g.next() % 16)
    elif r < 89: e = a % (1 + g.next() % 16)
    else: e = a + (g.next() % 32)
    pool.append(e)
  return UOp.sink(*pool[3:])


def tinygrad_run(steps, repeats):
  from tinygrad.uop.ops import Ops, GroupOp, graph_rewrite
  from tinygrad.uop.symbolic import symbolic
  best = None
  for _ in range(repeats):
    root = build_tinygrad_graph(steps)
    topo = root.toposort()
    nodes, alu = len(topo), sum(1 for u in topo if u.op in GroupOp.ALU)
    t0, c0 = time.perf_counter(), time.process_time()
    out = graph_rewrite(root, symbolic)
    wall, dt = time.perf_counter() - t0, time.process_time() - c0
    out_alu = sum(1 for u in out.toposort() if u.op in GroupOp.ALU)
    best = (dt, wall) if best is None else min(best, (dt, wall))
    del root, out, topo
  return {"seconds": best[0], "wall": best[1], "nodes": nodes, "alu_nodes": alu, "out_alu_nodes": out_alu}


def kiln_run(binary, steps_list):
  filt = "BM_SymbolicRewrite/(" + "|".join(str(s) for s in steps_list) + ")/"
  proc = subprocess.run([binary, "--benchmark_format=json", f"--benchmark_filter={filt}"],
                        capture_output=True, text=True)
  if proc.returncode != 0:
    sys.stderr.write(proc.stderr)
    raise SystemExit(f"rewrite_compare: {binary} failed with exit {proc.returncode}")
  out = {}
  for b in json.loads(proc.stdout)["benchmarks"]:
    steps = int(b["steps"])
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    out[steps] = {"seconds": b["cpu_time"] * unit, "wall": b["real_time"] * unit, "nodes": int(b["nodes"]),
                  "alu_nodes": int(b["alu_nodes"]), "out_alu_nodes": int(b["out_alu_nodes"])}
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  build_dir = os.environ.get("KILN_BUILD_DIR", "build/release")
  ap.add_argument("binary", nargs="?", default=os.path.join(build_dir, "tests/bench/bench_rewrite"))
  ap.add_argument("--steps", type=int, default=10000, choices=[10000, 100000, 1000000])
  ap.add_argument("--tinygrad-repeats", type=int, default=1)
  args = ap.parse_args()

  import tinygrad  # noqa: F401 (fail early if missing)
  kiln = kiln_run(args.binary, sorted({args.steps, 1000000}))
  tg = tinygrad_run(args.steps, args.tinygrad_repeats)
  k = kiln[args.steps]

  def rate(r): return r["nodes"] / r["seconds"]

  print(f"graph: {args.steps} steps, seed 1 (tests/bench/bench_rewrite.cc generator)")
  from importlib.metadata import version
  print(f"  tinygrad {version('tinygrad')}: "
        f"{tg['nodes']} nodes ({tg['alu_nodes']} ALU), graph_rewrite(symbolic) {tg['seconds']:.3f} s cpu ({tg['wall']:.3f} s wall), "
        f"{rate(tg):,.0f} nodes/s, {tg['out_alu_nodes']} ALU nodes out")
  print(f"  kiln:     {k['nodes']} nodes ({k['alu_nodes']} ALU), GraphRewrite(Symbolic) "
        f"{k['seconds']*1e3:.1f} ms cpu ({k['wall']*1e3:.1f} ms wall), {rate(k):,.0f} nodes/s, {k['out_alu_nodes']} ALU nodes out")
  print(f"  ratio kiln/tinygrad: {rate(k) / rate(tg):.1f}x (ALU-node throughput: "
        f"{(k['alu_nodes']/k['seconds']) / (tg['alu_nodes']/tg['seconds']):.1f}x)")
  if args.steps != 1000000 and 1000000 in kiln:
    big = kiln[1000000]
    print(f"kiln at 1,000,000 steps: {big['nodes']} nodes, {big['seconds']*1e3:.1f} ms cpu, {rate(big):,.0f} nodes/s "
          f"(tinygrad timed at {args.steps} steps only: 1M is too slow for it in a benchmark run)")
  if k["alu_nodes"] != tg["alu_nodes"]:
    print(f"ERROR: graphs differ: kiln has {k['alu_nodes']} ALU nodes, tinygrad {tg['alu_nodes']}")
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
