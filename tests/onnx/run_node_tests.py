#!/usr/bin/env python3
"""Runs the ONNX backend test data of the pinned onnx==1.22.0 wheel through kiln and checks the pass list.

The cases are the wheel's onnx/backend/test/data/{node,pytorch-converted,pytorch-operator,simple}/<case> folders and
the light/ models. onnx_node_runner (C++) runs them in one process per chunk and prints CASE/RESULT lines; a crash
or a hang (no result within --case-timeout seconds) is that case's failure, and the run resumes after it.

Pass lists (tests/onnx/passlist_<folder>.txt, one case name per line) are the contract: every listed case must pass
on the device, except the ones a device's gap file (tests/onnx/gaps_<DEVICE>.txt: "case  reason") excludes, e.g.
float64 on PoCL. Exit 1 on any regression; new passes are reported (--update rewrites the lists from this run).

  run_node_tests.py --runner build/release/tests/onnx/onnx_node_runner [--device CPU] [--folders node,simple]
                    [--subset N] [--update] [--results out.tsv]
"""

from __future__ import annotations

import argparse
import glob
import os
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FOLDERS = ["node", "pytorch-converted", "pytorch-operator", "simple", "light"]


def data_dir() -> str:
    hits = sorted(glob.glob(os.path.join(REPO, ".venv/lib/python3*/site-packages/onnx/backend/test/data")))
    if not hits:
        sys.exit("onnx backend test data not found under .venv (pip install onnx==1.22.0; tests/requirements.txt)")
    return hits[-1]


def cases_of(data: str, folder: str) -> list[tuple[str, list[str]]]:
    """(case id, runner arguments) per case, sorted."""
    out = []
    if folder == "light":
        for model in sorted(glob.glob(os.path.join(data, "light", "light_*.onnx"))):
            stem = os.path.basename(model)[: -len(".onnx")]
            out.append((f"light/{stem}", ["--light", model, os.path.join(data, "light", f"{stem}_output_0.pb")]))
        return out
    for d in sorted(glob.glob(os.path.join(data, folder, "*"))):
        if os.path.exists(os.path.join(d, "model.onnx")):
            out.append((f"{folder}/{os.path.basename(d)}", [d]))
    return out


def read_list(path: str) -> dict[str, str]:
    entries = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            entries[name] = reason.strip()
    return entries


def run_chunk(runner: str, device: str, chunk: list[tuple[str, list[str]]], case_timeout: float,
              results: dict[str, tuple[str, str]]) -> None:
    """Runs cases (restarting after a crash or hang) and fills results[id] = (PASS|FAIL, detail)."""
    pending = list(chunk)
    while pending:
        light = [c for c in pending if c[1][0] == "--light"]
        if light:  # light models run one per process (the runner takes one --light)
            cid, args = light[0]
            pending.remove(light[0])
            batch = [(cid, args)]
            argv = [runner, "--device", device] + args
        else:
            batch = pending
            argv = [runner, "--device", device] + [a[0] for _, a in batch]
        by_arg = {(a[0] if a[0] != "--light" else a[1]): cid for cid, a in batch}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        current = None
        done = set()
        last = time.monotonic()
        tail: list[str] = []
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
                line = line.rstrip("\n")
                if line.startswith("CASE "):
                    current = by_arg.get(line[5:])
                    last = time.monotonic()
                    tail = []
                elif line.startswith("RESULT "):
                    rest = line[7:]
                    for arg, cid in by_arg.items():
                        if rest.startswith(arg + " "):
                            verdict, _, detail = rest[len(arg) + 1:].partition(" ")
                            results[cid] = (verdict, detail)
                            done.add(cid)
                            break
                    current = None
                else:
                    tail = (tail + [line])[-5:]
            elif current is not None and time.monotonic() - last > case_timeout:
                proc.kill()
                results[current] = ("FAIL", f"timeout after {case_timeout:.0f}s")
                done.add(current)
                break
        proc.wait()
        if current is not None and current not in done:
            results[current] = ("FAIL", f"crashed (exit {proc.returncode}): {' | '.join(tail)[-300:]}")
            done.add(current)
        pending = [c for c in pending if c[0] not in done and c[0] not in results]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", required=True)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--folders", default=",".join(FOLDERS))
    ap.add_argument("--subset", type=int, default=0, help="run every N-th pass-listed case only (0 = all cases)")
    ap.add_argument("--only-passlist", action="store_true", help="run only the pass-listed cases")
    ap.add_argument("--case-timeout", type=float, default=120.0)
    ap.add_argument("--update", action="store_true", help="rewrite the pass lists from this run")
    ap.add_argument("--results", help="write every case's verdict (TSV)")
    ap.add_argument("--filter", default="", help="only cases whose id contains this string")
    args = ap.parse_args()

    data = data_dir()
    probe = subprocess.run([args.runner, "--device", args.device], capture_output=True, text=True)
    if probe.returncode == 77:
        print(f"SKIP: {probe.stdout.strip()}")
        return 77
    gaps = read_list(os.path.join(HERE, f"gaps_{args.device.split(':')[0]}.txt"))
    total_fail = 0
    lines = []
    all_results: dict[str, tuple[str, str]] = {}
    t0 = time.monotonic()
    for folder in args.folders.split(","):
        plist_path = os.path.join(HERE, f"passlist_{folder}.txt")
        passlist = read_list(plist_path)
        cases = cases_of(data, folder)
        if args.filter:
            cases = [c for c in cases if args.filter in c[0]]
        if args.only_passlist or args.subset:
            cases = [c for c in cases if c[0] in passlist]
        if args.subset:
            cases = cases[:: args.subset]
        results: dict[str, tuple[str, str]] = {}
        run_chunk(args.runner, args.device, cases, args.case_timeout, results)
        all_results.update(results)
        passed = sorted(c for c, (v, _) in results.items() if v == "PASS")
        expected = [c for c, _ in cases if c in passlist and c not in gaps]
        regressions = [c for c in expected if results.get(c, ("FAIL", ""))[0] != "PASS"]
        new = [c for c in passed if c not in passlist]
        skipped_gaps = [c for c, _ in cases if c in passlist and c in gaps]
        total_fail += len(regressions)
        lines.append(f"{folder}: {len(passed)} of {len(cases)} cases pass on {args.device} "
                     f"(pass list {len(passlist)}; {len(regressions)} regressions, {len(new)} new passes, "
                     f"{len(skipped_gaps)} excluded by gaps_{args.device.split(':')[0]}.txt)")
        for c in regressions:
            lines.append(f"  REGRESSION {c}: {results.get(c, ('FAIL', 'not run'))[1]}")
        for c in new[:20]:
            lines.append(f"  new pass {c} (add it to {os.path.basename(plist_path)}; --update does)")
        if args.update and not args.subset and not args.filter:
            with open(plist_path, "w") as f:
                f.write(f"# ONNX backend test cases ({folder}) that kiln passes on CPU; tests/onnx/run_node_tests.py\n"
                        "# fails on any of them failing. Regenerate with --update after a change that adds passes.\n")
                for c in passed:
                    f.write(c + "\n")
    if args.results:
        with open(args.results, "w") as f:
            for c in sorted(all_results):
                v, d = all_results[c]
                f.write(f"{c}\t{v}\t{d}\n")
    print("\n".join(lines))
    print(f"onnx backend tests on {args.device}: {sum(1 for v, _ in all_results.values() if v == 'PASS')} passed, "
          f"{sum(1 for v, _ in all_results.values() if v != 'PASS')} failed of {len(all_results)} run; "
          f"{total_fail} regressions; {time.monotonic() - t0:.0f}s")
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
