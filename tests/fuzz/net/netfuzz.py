#!/usr/bin/env python3
"""Network fuzzer of a live kilnd (issue #23 item 5): seeded malformed HTTP/1.1 to the REST port and
malformed HTTP/2 frames to the gRPC port, in batches, against a real kilnd on loopback.

    netfuzz.py --cases 10000                 # fresh seed (printed)
    netfuzz.py --cases 300 --seed 23 --warmup 8   # what CTest netfuzz_short runs
    netfuzz.py --seed 23 --only 1234         # one case of a run again
    netfuzz.py --replay findings/x.json      # a written finding again

Case `i` of seed `s` is generated from random.Random(f"{s}:{i}") alone, so (seed, index) names it.
The generators are http1_cases.py and h2_cases.py; what passes is wire.py's oracle (every
connection closed or the HTTP/2 connection answering a PING within the timeout, no 5xx but 503, an
error body with a message, certainly-invalid requests never 2xx, slowloris closed by the server's
own deadlines). Every file in regressions/ is replayed first (past findings). After each batch:
kilnd must be alive, and a valid add_sub inference must succeed through the stock tritonclient over
both HTTP and gRPC. kilnd's VmRSS is sampled after a warm-up and at the end; growth of
--rss-limit-mib or more fails the run. The warm-up is a valid inference of every batch size (each
compiles its kernels once) and then --warmup cases of every kind, 16 at a time (seed `s` + "w"):
the heaviest cases at full concurrency set the high-water mark of glibc's heap (freed memory stays
resident), so that the growth measured afterwards is what the campaign leaks, not its peak. The RSS
before and after the warm-up is printed too: the warm-up's rise is the price of the worst bursts.

A crash writes every case of the batch under --findings, then replays them one at a time against a
fresh kilnd to name the one that kills it; a hang or a bad answer writes that case. Each finding
prints a one-line repro. Exit status 0 only when nothing was found.

kilnd runs with short HTTP and gRPC-handshake deadlines (KILND_ARGS) so that slowloris cases end
in seconds: the deadlines are the same code at any value."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import h2_cases  # noqa: E402
import http1_cases  # noqa: E402
from kilnd_launcher import Kilnd  # noqa: E402
from wire import Case, ping_payload, run_case, write_case  # noqa: E402

KILND_ARGS = ["--metrics-port=-1", "--http-timeout-ms=1000", "--http-header-timeout-ms=2000",
              "--http-body-timeout-ms=4000", "--http-keep-alive-timeout-s=1", "--grpc-handshake-timeout-ms=2000"]


def make_case(seed, index: int, http_share: float) -> Case:
    rng = random.Random(f"{seed}:{index}")
    module = http1_cases if rng.random() < http_share else h2_cases
    gens, weights = zip(*module.GENERATORS)
    gen = rng.choices(gens, weights)[0]
    kind, steps, conns, expect, note = gen(rng)
    case = Case(seed, index, "http" if module is http1_cases else "h2", kind, steps, conns, expect, note)
    if case.transport == "h2" and kind != "h2.idle":
        case.steps.append(("send", h2_cases.frame(h2_cases.PING, 0, 0, ping_payload(case))))
    return case


def warmup_cases(seed: int, per_kind: int, http_share: float) -> list[Case]:
    """`per_kind` cases of every kind, from the stream of seed f"{seed}w", grouped by kind so that
    a kind's heaviest cases run at full concurrency."""
    by_kind: dict[str, list[Case]] = {}
    kinds = len(http1_cases.GENERATORS) + len(h2_cases.GENERATORS)
    i = 0
    while i < 1000 * per_kind and (len(by_kind) < kinds or min(map(len, by_kind.values())) < per_kind):
        c = make_case(f"{seed}w", i, http_share)
        i += 1
        if len(by_kind.setdefault(c.kind, [])) < per_kind:
            by_kind[c.kind].append(c)
    return [c for kind in sorted(by_kind) for c in by_kind[kind]]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def valid_check(k: Kilnd, batch: int = 1) -> str | None:
    """A valid add_sub inference (`batch` rows) over HTTP and over gRPC with the stock
    tritonclient; None when both are right, else what went wrong."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    a = np.arange(16 * batch, dtype=np.float32).reshape(batch, 16)
    b = np.full((batch, 16), 2.0, dtype=np.float32)
    for name, mod, url in (("http", httpclient, k.http_url), ("grpc", grpcclient, k.url)):
        try:
            if mod is httpclient:
                client = mod.InferenceServerClient(url, connection_timeout=20, network_timeout=20)
            else:
                client = mod.InferenceServerClient(url)
            inputs = [mod.InferInput("INPUT0", [batch, 16], "FP32"), mod.InferInput("INPUT1", [batch, 16], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            kwargs = {"client_timeout": 20} if mod is grpcclient else {}
            r = client.infer("add_sub", inputs, **kwargs)
            if not (np.array_equal(r.as_numpy("OUTPUT0"), a + b) and np.array_equal(r.as_numpy("OUTPUT1"), a - b)):
                return f"{name}: wrong answer"
            client.close()
        except Exception as e:  # noqa: BLE001 - any failure of the valid request is the finding
            return f"{name}: {type(e).__name__}: {str(e)[:300]}"
    return None


class Campaign:
    def __init__(self, args):
        self.args = args
        self.findings_dir = Path(args.findings)
        self.kilnd: Kilnd | None = None
        self.stats = Counter()
        self.kinds = Counter()
        self.statuses = Counter()
        self.findings: list[tuple[str, str]] = []  # (file, problem)
        self.rss: list[int] = []
        self.rss_after = 0  # cases run when the start RSS was sampled
        self.rss_before = 0  # KiB, before the warm-up
        self.restarts = 0

    # ** kilnd **

    def start(self) -> None:
        self.kilnd = Kilnd(Path(self.args.models), KILND_ARGS + self.args.kilnd_arg)

    def stop(self) -> int | None:
        if self.kilnd is None:
            return None
        rc = self.kilnd.stop()
        self.kilnd = None
        return rc

    def port(self, case: Case) -> int:
        return self.kilnd.http_port if case.transport == "http" else self.kilnd.port

    def alive(self) -> bool:
        return self.kilnd.proc.poll() is None

    # ** findings **

    def record(self, case: Case, problem: str, prefix: str) -> Path:
        self.findings_dir.mkdir(parents=True, exist_ok=True)
        path = self.findings_dir / f"{prefix}-s{case.seed}-i{case.index}.json"
        write_case(case, path, problem)
        self.findings.append((str(path), problem))
        here = Path.cwd()
        script = os.path.relpath(HERE / "netfuzz.py", here)
        print(f"FINDING {prefix} case {case.index} ({case.kind}: {case.note}): {problem[:300]}\n"
              f"  repro: {sys.executable} {script} --replay {os.path.relpath(path, here)}"
              f"   (or --seed {case.seed} --only {case.index})", flush=True)
        return path

    def name_the_crash(self, cases: list[Case]) -> None:
        """kilnd died during a batch: replay its cases one at a time against a fresh kilnd."""
        self.restarts += 1
        print(f"kilnd died (exit {self.kilnd.proc.returncode}); log tail:\n{self.kilnd.logs()[-3000:]}", flush=True)
        for c in cases:
            self.record(c, "in the batch during which kilnd died", "crash-batch")
        self.stop()
        self.start()
        for c in cases:
            run_case(c, self.port(c), self.args.timeout)
            time.sleep(0.05)
            if not self.alive():
                self.record(c, f"kilnd exited {self.kilnd.proc.returncode} on this case alone", "crash")
                self.stop()
                self.start()
                return
        print("no single case of the batch kills kilnd alone (an interaction of concurrent cases)", flush=True)

    # ** batches **

    def run_batch(self, cases: list[Case], pool: ThreadPoolExecutor) -> None:
        futures = [(c, pool.submit(run_case, c, self.port(c), self.args.timeout)) for c in cases]
        for c, f in futures:
            outcome = f.result()
            self.stats["cases"] += 1
            self.kinds[c.kind] += 1
            for s in outcome.statuses:
                self.statuses[f"{c.transport} {s}"] += 1
            for p in outcome.problems:
                self.stats["hangs" if "hang" in p or "slowloris" in p else "bad_answers"] += 1
            if outcome.problems:
                self.record(c, "; ".join(outcome.problems), "hang" if any(
                    "hang" in p or "slowloris" in p for p in outcome.problems) else "answer")
        if not self.alive():
            self.stats["crashes"] += 1
            self.name_the_crash(cases)
            return
        problem = valid_check(self.kilnd)
        self.stats["valid_checks"] += 1
        if problem:
            self.stats["valid_failed"] += 1
            print(f"FINDING valid request failed after the batch of cases {cases[0].index}..{cases[-1].index}: "
                  f"{problem}", flush=True)
            self.findings.append(("(batch)", f"valid request failed: {problem}"))
            if not self.alive():
                self.stats["crashes"] += 1
                self.name_the_crash(cases)

    def run(self) -> int:
        args = self.args
        seed = args.seed
        replays = [Case.from_json(json.loads(Path(p).read_text())) for p in args.replay]
        if not args.replay and not args.no_regressions:
            replays += [Case.from_json(json.loads(p.read_text())) for p in sorted((HERE / "regressions").glob("*.json"))]
        if args.only:
            indices = [int(i) for i in args.only.split(",")]
        elif args.replay:
            indices = []
        else:
            indices = list(range(args.cases))
        t0 = time.monotonic()
        self.start()
        print(f"netfuzz: seed {seed}, {len(indices)} cases + {len(replays)} replayed, batches of {args.batch}, "
              f"{args.concurrency} at a time, timeout {args.timeout:g} s; kilnd pid {self.kilnd.proc.pid} "
              f"(REST {self.kilnd.http_port}, gRPC {self.kilnd.port})", flush=True)
        # Warm-up: every batch size add_sub takes (1-8; each compiles its kernels once) before
        # any case, and RSS is sampled after the first --warmup cases.
        for batch in range(1, 9):
            if problem := valid_check(self.kilnd, batch):
                print(f"the valid request fails before any case: {problem}")
                return 2
        self.rss_before = rss_kib(self.kilnd.proc.pid)
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            if replays:
                self.run_batch(replays, pool)
            if indices and args.warmup and not args.only:
                warm = warmup_cases(seed, args.warmup, args.http_share)
                for i in range(0, len(warm), args.batch):
                    self.run_batch(warm[i:i + args.batch], pool)
                print(f"  warm-up: {len(warm)} cases, RSS {self.rss_before / 1024:.1f} -> "
                      f"{rss_kib(self.kilnd.proc.pid) / 1024:.1f} MiB", flush=True)
            self.rss.append(rss_kib(self.kilnd.proc.pid))
            self.rss_after = self.stats["cases"]
            batches = [indices[i:i + args.batch] for i in range(0, len(indices), args.batch)]
            for n, batch in enumerate(batches):
                self.run_batch([make_case(seed, i, args.http_share) for i in batch], pool)
                if (n + 1) % args.progress == 0 or n + 1 == len(batches):
                    print(f"  {self.stats['cases']} cases, {len(self.findings)} findings, "
                          f"RSS {rss_kib(self.kilnd.proc.pid) / 1024:.1f} MiB, "
                          f"{time.monotonic() - t0:.0f} s", flush=True)
        if not self.rss:
            self.rss.append(rss_kib(self.kilnd.proc.pid))
        self.rss.append(rss_kib(self.kilnd.proc.pid))
        rc = self.stop()
        return self.report(seed, time.monotonic() - t0, rc)

    def report(self, seed: int, seconds: float, exit_code: int | None) -> int:
        start, end = self.rss[0] / 1024, self.rss[-1] / 1024
        growth = end - start
        rss_ok = self.restarts > 0 or growth < self.args.rss_limit_mib
        summary = {
            "seed": seed, "cases": self.stats["cases"], "crashes": self.stats["crashes"], "hangs": self.stats["hangs"],
            "bad_answers": self.stats["bad_answers"], "valid_checks": self.stats["valid_checks"],
            "valid_failed": self.stats["valid_failed"], "rss_start_mib": round(start, 1),
            "rss_end_mib": round(end, 1), "rss_growth_mib": round(growth, 1), "rss_start_after_cases": self.rss_after,
            "rss_before_warmup_mib": round(self.rss_before / 1024, 1),
            "seconds": round(seconds, 1),
            "kilnd_exit": exit_code, "findings": [f for f, _ in self.findings],
            "kinds": dict(sorted(self.kinds.items())), "answers": dict(sorted(self.statuses.items())),
        }
        print("\nanswers: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.statuses.items())))
        print("kinds:   " + ", ".join(f"{k} x{v}" for k, v in sorted(self.kinds.items())))
        print(f"\n==== netfuzz summary ====\n"
              f"seed {seed}: {summary['cases']} cases in {seconds:.0f} s\n"
              f"crashes {summary['crashes']}, hangs {summary['hangs']}, bad answers {summary['bad_answers']}, "
              f"valid requests after each batch {summary['valid_checks'] - summary['valid_failed']}/"
              f"{summary['valid_checks']} OK\n"
              f"RSS start {start:.1f} MiB (after the warm-up, {self.rss_after} cases; {self.rss_before / 1024:.1f} MiB "
              f"before it), end {end:.1f} MiB, growth {growth:+.1f} MiB "
              f"(limit {self.args.rss_limit_mib} MiB)\nkilnd exit on SIGTERM: {exit_code}")
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(summary, indent=1) + "\n")
        ok = (not self.findings and rss_ok and exit_code == 0 and self.stats["crashes"] == 0)
        print("netfuzz: OK" if ok else "netfuzz: FAILED")
        return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=None, help="default: a fresh one (printed)")
    p.add_argument("--only", default="", help="comma-separated case indices of --seed to run")
    p.add_argument("--replay", nargs="*", default=[], help="finding files to run (JSON, as written)")
    p.add_argument("--no-regressions", action="store_true", help="skip the files in regressions/")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds after its script a case may take")
    p.add_argument("--http-share", type=float, default=0.55, help="fraction of cases sent to the REST port")
    p.add_argument("--rss-limit-mib", type=float, default=32.0)
    p.add_argument("--warmup", type=int, default=32, help="warm-up cases of every kind before the start RSS")
    p.add_argument("--progress", type=int, default=10, help="print a line every this many batches")
    p.add_argument("--kilnd", default=os.environ.get("KILND", str(REPO / "build/release/server/main/kilnd")))
    p.add_argument("--models", default=os.environ.get("KILN_MODELS", str(REPO / "models")))
    p.add_argument("--kilnd-arg", action="append", default=[], help="one more kilnd flag (repeatable)")
    p.add_argument("--findings", default=str(REPO / "build" / "netfuzz-findings"))
    p.add_argument("--json", default="", help="write the summary here")
    args = p.parse_args()
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "big")
    os.environ["KILND"] = args.kilnd
    return Campaign(args).run()


if __name__ == "__main__":
    sys.exit(main())
