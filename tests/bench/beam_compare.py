#!/usr/bin/env python3
"""BEAM on the Fashion-MNIST training step (examples/train_fashion_mnist, batch 512, TinyJit): heuristic vs BEAM=2 vs
BEAM=4, per kernel and per step.

For each width it runs the example twice on one fresh cache directory (KILN_CACHE_DIR): the first process searches
every kernel (DEBUG=2 prints one "beam <kernel>: ..." line per search, with the heuristic's and the winner's time);
the second process must find every choice in the cache (its search count is printed: 0 is the proof that no process
searches a kernel twice) and its ms/step is the tuned step time. A BEAM=0 run gives the heuristic's step time.
Prints the 10 kernels with the slowest heuristic time with their BEAM=2 and BEAM=4 times, the search time per width,
and the step times with their ratios. Timings share the machine with whatever else runs: a benchmark, not a test.

Usage: beam_compare.py [--widths 2,4] [--budget 10] [--steps 6] [--batch 512] [--binary PATH] [--data DIR]
Exit status 1 if a run fails or a second process searched anything.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

SEARCH = re.compile(r"^beam (\S+): (\d+) candidates \((\d+) rejected\) in (\d+) rounds, ([0-9.]+) s: "
                    r"heuristic ([0-9.]+) us -> ([0-9.]+) us \(([0-9.]+)x\) \[(.*)\]$", re.M)
CACHED = re.compile(r"^beam: cached choice", re.M)
STEADY = re.compile(r"^ms/step \(steps [0-9.]+\): ([0-9.]+)", re.M)
FIRST = re.compile(r"^time to first step: ([0-9.]+) ms", re.M)


def run(binary, args, env):
  p = subprocess.run([binary, "--steps", str(args.steps), "--batch", str(args.batch), "--test-images", "0",
                      "--data", args.data], env=env, capture_output=True, text=True)
  if p.returncode != 0:
    sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
    raise RuntimeError(f"{binary} exited with {p.returncode}")
  out = p.stdout + p.stderr
  steady = STEADY.search(out)
  first = FIRST.search(out)
  return {"searches": SEARCH.findall(out), "cached": len(CACHED.findall(out)),
          "ms": float(steady.group(1)) if steady else float("nan"),
          "first_ms": float(first.group(1)) if first else float("nan")}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--widths", default="2,4")
  ap.add_argument("--budget", type=int, default=10, help="BEAM_BUDGET: seconds per kernel")
  ap.add_argument("--steps", type=int, default=6)
  ap.add_argument("--batch", type=int, default=512)
  ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
  ap.add_argument("--binary", default=None)
  args = ap.parse_args()
  build = os.environ.get("KILN_BUILD_DIR", "build/release")
  binary = args.binary or os.path.join(build, "examples", "train_fashion_mnist")
  if not os.path.exists(binary):
    print(f"beam_compare: {binary} missing (build the train_fashion_mnist target)", file=sys.stderr)
    return 1
  if not os.path.isdir(args.data):
    print(f"beam_compare: no dataset at {args.data}; nothing measured")
    return 0
  base_env = {k: v for k, v in os.environ.items() if k not in ("BEAM", "DEBUG", "CACHELEVEL")}
  widths = [int(w) for w in args.widths.split(",")]
  ok = True
  with tempfile.TemporaryDirectory(prefix="kiln-beam-h-") as d:
    heuristic = run(binary, args, dict(base_env, KILN_CACHE_DIR=d))
  results = {}
  for w in widths:
    with tempfile.TemporaryDirectory(prefix=f"kiln-beam-{w}-") as d:
      env = dict(base_env, KILN_CACHE_DIR=d, BEAM=str(w), BEAM_BUDGET=str(args.budget), DEBUG="2")
      first = run(binary, args, env)
      second = run(binary, args, env)
    results[w] = (first, second)
    if second["searches"]:
      print(f"ERROR: the second BEAM={w} process searched {len(second['searches'])} kernels (want 0)")
      ok = False

  # Per kernel: the heuristic time as measured by the first width's search, each width's winner.
  table = {}
  for w in widths:
    for (name, cands, rej, rounds, secs, h_us, b_us, speed, opts) in results[w][0]["searches"]:
      row = table.setdefault(name, {"h": float(h_us)})
      row[w] = (float(b_us), opts, int(cands), int(rej))
  print(f"BEAM on the training step: batch {args.batch}, {args.steps} steps, BEAM_BUDGET={args.budget} s per kernel")
  print("\nthe 10 kernels with the slowest heuristic time (us, best run of each during the search):")
  hdr = f"  {'kernel':<34} {'heuristic':>10}" + "".join(f" {'BEAM=' + str(w):>10} {'x':>6}" for w in widths)
  print(hdr + "  opts (widest BEAM)")
  for name, row in sorted(table.items(), key=lambda kv: -kv[1]["h"])[:10]:
    line = f"  {name:<34} {row['h']:>10.1f}"
    for w in widths:
      b = row.get(w)
      line += f" {b[0]:>10.1f} {row['h'] / b[0]:>5.2f}x" if b else f" {'-':>10} {'':>6}"
    last = row.get(widths[-1])
    print(line + f"  {last[1] if last else ''}")
  print("\nsearch:")
  for w in widths:
    first, second = results[w]
    s = first["searches"]
    print(f"  BEAM={w}: {len(s)} kernels searched in {sum(float(x[4]) for x in s):.1f} s "
          f"({sum(int(x[1]) for x in s)} candidates timed, {sum(int(x[2]) for x in s)} rejected by the output "
          f"check); first step {first['first_ms']:.0f} ms. Second process: {len(second['searches'])} searched, "
          f"{second['cached']} choices read from the cache, first step {second['first_ms']:.0f} ms")
  print("\nms/step (steps 2..n-1, TinyJit replays):")
  print(f"  heuristic (BEAM=0): {heuristic['ms']:.1f}")
  for w in widths:
    ms = results[w][1]["ms"]
    print(f"  BEAM={w} (tuned, from the cache): {ms:.1f}  -> {heuristic['ms'] / ms:.2f}x the heuristic's speed")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
