#!/usr/bin/env python3
"""The differential test: random Tensor expressions (gen.py) evaluated by kiln (diff_eval) and numpy (expr.py).

  run_differential.py --binary B --device CPU --seed 1 --cases 300        fixed seed (CTest)
  run_differential.py --binary B --device CPU --regressions DIR          the committed regression cases
  run_differential.py --binary B --device CPU+jit --seed 1 --cases 100   the same under TinyJit (capture, replay)
  run_differential.py --binary B --device CPU,INTERP,CL --cases N --fresh --write-failures DIR
                                                                          a campaign (make fuzz-numerics)

Checks: the dtype and shape of every result; integers and bools exactly; floats against the float64 reference with
|kiln - ref64| <= 1e-4 * (|ref64| + mag) (expr.py: mag bounds the terms rounding acts on, so rounding passes and a
wrong index or a lost term does not); gradient cases (vjp) the same against reverse mode in float64. A kiln error
Status or a crash of diff_eval is a failure too. Each failure is shrunk (subexpressions replaced by their value as a new input, or by a failing subexpression) before it is reported;
with --write-failures it becomes a case file that --regressions runs from then on.
Exit status: 0 all passed, 1 a failure, 77 the device is absent (CTest skip).
"""
import argparse
import os
import random
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import expr as X  # noqa: E402
import gen  # noqa: E402

KILN_NAMES = {"float": "float32", "double": "float64", "char": "int8", "uchar": "uint8", "short": "int16",
              "ushort": "uint16", "int": "int32", "uint": "uint32", "long": "int64", "ulong": "uint64",
              "bool": "bool"}


class Unavailable(Exception):
    pass


def run_driver(binary, device, cases, per_case_timeout=30):
    """cases: [(name, inputs, tree)]. Returns {name: ("result", dtype, shape, values) | ("error", msg) |
    ("crash", msg)}. A crash ends the process; the cases after it run in a new one. The process may take
    `per_case_timeout` seconds per case (PoCL compiles take 1-2 s per case on a loaded machine)."""
    out, todo = {}, list(cases)
    while todo:
        text = "".join(X.case_text(n, i, t) for n, i, t in todo)
        env = dict(os.environ)
        # DEVICE+jit: the expressions under TinyJit (diff_eval --jit: capture on decoy inputs, replay on the case's)
        dev, jit = (device[:-4], ["--jit"]) if device.endswith("+jit") else (device, [])
        p = subprocess.run([binary, "--device", dev, *jit], input=text, capture_output=True, text=True,
                           timeout=per_case_timeout * len(todo) + 60, env=env)
        if p.returncode == 77 and p.stdout.startswith("unavailable"):
            raise Unavailable(device)
        lines, i, last = p.stdout.splitlines(), 0, None
        while i < len(lines):
            f = lines[i].split(" ", 2)
            i += 1
            if f[0] == "begin":
                last = f[1]
            elif f[0] == "error":
                out[f[1]] = ("error", f[2] if len(f) > 2 else "")
                last = None
            elif f[0] == "result":
                g = lines[i - 1].split()
                dt, nd = KILN_NAMES.get(g[2], g[2]), int(g[3])
                shape = tuple(int(d) for d in g[4:4 + nd])
                vals = lines[i].split() if i < len(lines) else []
                i += 1
                out[g[1]] = ("result", dt, shape, vals)
                last = None
        done = {n for n, _, _ in todo if n in out}
        if p.returncode != 0 and last is not None:
            tail = " | ".join(p.stderr.strip().splitlines()[-3:])
            out[last] = ("crash", f"diff_eval exited with {p.returncode}: {tail}")
            done.add(last)
        elif p.returncode != 0 and not done:
            raise RuntimeError(f"diff_eval failed ({p.returncode}): {p.stderr[-2000:]}")
        todo = [c for c in todo if c[0] not in done]
    return out


def check(inputs, tree, got):
    """None if kiln's result `got` matches numpy, else a one-line reason."""
    if got[0] != "result":
        return f"kiln {got[0]}: {got[1]}"
    _, dt, shape, vals = got
    ref = X.evaluate(tree, inputs)
    if dt != ref.dtype:
        return f"dtype {dt}, numpy {ref.dtype}"
    if tuple(shape) != tuple(ref.shape):
        return f"shape {shape}, numpy {ref.shape}"
    want = np.asarray(ref.v32).reshape(-1)
    if len(vals) != want.size:
        return f"{len(vals)} values for {want.size} elements"
    if dt in X.FLOAT_DTYPES:
        k = np.array([float(v) for v in vals], dtype=np.float64)
        r64 = np.asarray(ref.v64, dtype=np.float64).reshape(-1)
        mag = np.asarray(ref.mag, dtype=np.float64).reshape(-1)
        # plus float32's smallest normal: below it values underflow (exp(-198) is 0 in float32) or flush to zero
        tol = 1e-4 * (np.abs(r64) + mag) + 2.0 ** -126
        # a non-finite reference (inf, nan) is matched exactly: its tolerance would be inf or nan. So is float32's own
        # overflow (3e38 + 3e38 is inf in float32 and numpy's float32, 6e38 in float64).
        close = np.where(np.isfinite(r64), np.abs(k - r64) <= tol, False)
        w32 = want.astype(np.float64)
        overflow = ~np.isfinite(w32) & ((k == w32) | (np.isnan(k) & np.isnan(w32)))
        bad = ~(close | (np.isnan(k) & np.isnan(r64)) | (k == r64) | overflow)
        if np.any(bad):
            j = int(np.argmax(bad))
            return (f"{int(bad.sum())}/{k.size} floats off, first at flat {j}: kiln {float(k[j])!r}, float64 "
                    f"{float(r64[j])!r} (numpy float32 {float(want[j])!r}, tolerance {tol[j]:.3g})")
        return None
    k = np.array([int(v) for v in vals], dtype=np.int64)
    w = want.astype(np.int64)
    bad = k != w
    if np.any(bad):
        j = int(np.argmax(bad))
        return f"{int(bad.sum())}/{k.size} values differ, first at flat {j}: kiln {k[j]}, numpy {w[j]}"
    return None


# ---- shrinking ----

def _as_input(inputs, node):
    """Inputs plus the numpy value of `node` as a new input, and the leaf that reads it."""
    v = X.evaluate(node, inputs)
    arr = np.asarray(v.v32)
    return inputs + [(v.dtype, arr, v.exact)], X.E("in", (), (len(inputs),))


def _prune(inputs, tree):
    used = sorted({int(n.atoms[0]) for n in tree.subtrees() if n.op == "in"})
    remap = {o: i for i, o in enumerate(used)}

    def ren(n):
        if n.op == "in":
            return X.E("in", (), (remap[int(n.atoms[0])],))
        return X.E(n.op, tuple(ren(k) for k in n.kids), n.atoms)

    return [inputs[i] for i in used], ren(tree)


def shrink(binary, device, inputs, tree, budget=40):
    """A smaller case that still fails on `device` (greedy; each round runs all candidates in one driver call)."""
    for _ in range(budget):
        cands = []
        for node in set(tree.subtrees()):
            if node is tree or node.op in ("in", "const"):
                continue
            cands.append(_prune(inputs, node))                     # a failing subexpression on its own
            ins2, leaf = _as_input(inputs, node)                    # a subexpression replaced by its value
            cands.append(_prune(ins2, tree.replace(node, leaf)))
        cands = [c for c in cands if c[1].size() < tree.size()]
        if not cands:
            break
        named = [(f"s{i}", c[0], c[1]) for i, c in enumerate(cands)]
        res = run_driver(binary, device, named)
        failing = [(c[1].size(), i) for i, c in enumerate(cands)
                   if check(c[0], c[1], res.get(f"s{i}", ("crash", "no result"))) is not None]
        if not failing:
            break
        inputs, tree = cands[min(failing)[1]]
    return inputs, tree


def write_failure(dirname, device, seed, inputs, tree, reason):
    os.makedirs(dirname, exist_ok=True)
    name = f"{device.replace(':', '')}-seed{seed}".lower()
    path = os.path.join(dirname, name + ".case")
    with open(path, "w") as f:
        f.write(f"# found by run_differential.py on {device}, seed {seed}: {reason}\n")
        f.write(X.case_text(name, inputs, tree))
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--device", default="CPU", help="comma-separated devices")
    ap.add_argument("--seed", type=int, default=1, help="first case seed (case i uses seed + i)")
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--fresh", action="store_true", help="start at a random seed (printed)")
    ap.add_argument("--regressions", help="run the .case files of this folder instead of generated cases")
    ap.add_argument("--write-failures", help="folder for the shrunk failing cases")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--chunk", type=int, default=200, help="cases per driver process")
    args = ap.parse_args()

    if args.fresh:
        args.seed = random.SystemRandom().randrange(1, 2 ** 31)
    if args.regressions:
        cases = []
        for fn in sorted(os.listdir(args.regressions)):
            if fn.endswith(".case"):
                with open(os.path.join(args.regressions, fn)) as f:
                    cases += X.parse_cases(f.read())
        label = f"{len(cases)} regression cases from {args.regressions}"
    else:
        t0 = time.time()
        cases = []
        for i in range(args.cases):
            ins, tree = gen.generate(args.seed + i)
            cases.append((f"seed{args.seed + i}", ins, tree))
        label = f"{len(cases)} cases, seeds {args.seed}..{args.seed + args.cases - 1} (generated in {time.time() - t0:.1f} s)"
    print(label, flush=True)

    failed, skipped = 0, 0
    for device in args.device.split(","):
        t0 = time.time()
        try:
            res = {}
            for c in range(0, len(cases), args.chunk):
                res.update(run_driver(args.binary, device, cases[c:c + args.chunk]))
        except Unavailable:
            print(f"{device}: not available, skipped")
            skipped += 1
            continue
        bad = 0
        for name, inputs, tree in cases:
            reason = check(inputs, tree, res.get(name, ("crash", "no result")))
            if reason is None:
                continue
            bad += 1
            print(f"FAIL {device} {name}: {reason}\n  expr {tree.text()}", flush=True)
            if not args.no_shrink:
                s_in, s_tree = shrink(args.binary, device, inputs, tree)
                s_res = run_driver(args.binary, device, [("min", s_in, s_tree)])["min"]
                s_reason = check(s_in, s_tree, s_res) or reason
                print(f"  shrunk to {s_tree.text()}\n  {s_reason}", flush=True)
                if args.write_failures:
                    seed = name[4:] if name.startswith("seed") else name
                    path = write_failure(args.write_failures, device, seed, s_in, s_tree, s_reason)
                    print(f"  written to {path}", flush=True)
        print(f"{device}: {len(cases) - bad}/{len(cases)} passed in {time.time() - t0:.1f} s", flush=True)
        failed += bad
    if skipped == len(args.device.split(",")):
        return 77
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
