"""Bounded soak and overload of kilnd serving fashion_mnist with dynamic batching (kiln issue #20).

kilnd is started here on loopback (a temporary repository holding models/fashion_mnist with a
dynamic_batching block, --max-request-bytes 1 MiB, --max-queue-size 1024 so that the bursts of a
Python sender that shares the cores with kilnd fit) and stopped with SIGTERM at the end. Phases:

  1. warm-up: three requests of each batch size 1..64 (run, capture, replay), so that no JIT capture
     falls inside the soak;
  2. peak: closed loop at each --peak-concurrency level (8, 32, 64 requests in flight) for
     --peak-seconds each; the best level's served rate is the peak (unless --rate);
  3. soak (--minutes, default 30): open-loop gRPC load at 80% of that peak (or --rate). Every block of
     100 requests holds 94 valid ones (Fashion-MNIST test images, each answer checked against a numpy
     forward pass of the weights), 5 malformed ones (wrong shape, wrong dtype, unknown input name, a
     batch over max_batch_size, a message over --max-request-bytes, raw bytes that do not match the
     shape) and 1 cancelled one (a client deadline of 0.2-2 ms, or the gRPC future cancelled 0-2 ms
     after it was sent), in a shuffled order;
  4. overload (--overload-seconds, default 30): valid requests only, offered at 4x the peak, each
     with a --overload-timeout deadline: each must be answered in time, served or rejected with
     UNAVAILABLE / RESOURCE_EXHAUSTED;
  5. normal service right after: 200 valid requests, 8 in flight, must all succeed.

Reported: valid requests failed (target 0; a wrong answer counts as failed), malformed requests that
were accepted, RSS growth of the kilnd process over the soak after its first sixth (5 minutes of a
30-minute run; scaled for shorter runs), p99 latency of valid requests in the first and last such
window, the overload's answers by status and its RSS, and the recovery batch. Exits 1 when a valid
request failed in the soak or the recovery, a malformed one was served, the RSS grew more than
--max-rss-growth-mib (32) in the soak or --max-overload-rss-mib (512) in the overload, an overload
request was not answered within its deadline or failed otherwise, or kilnd died.

  .venv/bin/python tests/bench/soak.py [--minutes 30] [--overload-seconds 30] [--rate R] [--json out.json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from builtin_models import mnist_cnn_forward, read_idx, read_safetensors  # noqa: E402
from kilnd_launcher import Kilnd  # noqa: E402

MODEL = "fashion_mnist"
MAX_BATCH = 64
MAX_REQUEST_BYTES = 1 << 20
DATA = Path("/usr/share/datasets/fashion-mnist")
MALFORMED = ["wrong_shape", "wrong_dtype", "unknown_input", "batch_over_max", "over_max_bytes", "short_raw"]
REJECTED_UNDER_LOAD = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
MiB = 1 << 20


def request(shape: list[int], raw: bytes, name: str = "INPUT", datatype: str = "FP32") -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name=MODEL)
    t = req.inputs.add()
    t.name, t.datatype = name, datatype
    t.shape.extend(shape)
    req.raw_input_contents.append(raw)
    return req


def malformed_request(kind: str) -> pb.ModelInferRequest:
    one = np.zeros((1, 1, 28, 28), np.float32)
    if kind == "wrong_shape":
        return request([1, 1, 28, 27], np.zeros((1, 1, 28, 27), np.float32).tobytes())
    if kind == "wrong_dtype":
        return request([1, 1, 28, 28], one.astype(np.float64).tobytes(), datatype="FP64")
    if kind == "unknown_input":
        return request([1, 1, 28, 28], one.tobytes(), name="NOT_AN_INPUT")
    if kind == "batch_over_max":
        return request([MAX_BATCH + 1, 1, 28, 28], np.zeros((MAX_BATCH + 1, 1, 28, 28), np.float32).tobytes())
    if kind == "over_max_bytes":  # 1.6 MB, over kilnd's --max-request-bytes of 1 MiB
        n = MAX_REQUEST_BYTES // (28 * 28 * 4) + 200
        return request([n, 1, 28, 28], np.zeros((n, 1, 28, 28), np.float32).tobytes())
    if kind == "short_raw":
        return request([1, 1, 28, 28], one.tobytes()[:-100])
    raise ValueError(kind)


def read_rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Sampler(threading.Thread):
    """kilnd's RSS once a second: (seconds since start, bytes)."""

    def __init__(self, pid: int, t0: float):
        super().__init__(daemon=True)
        self.pid, self.t0 = pid, t0
        self.samples: list[tuple[float, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            rss = read_rss_bytes(self.pid)
            if rss is not None:
                self.samples.append((time.monotonic() - self.t0, rss))
            self.halt.wait(1.0)

    def at(self, t: float) -> int | None:
        """the first sample at or after t"""
        for ts, rss in self.samples:
            if ts >= t:
                return rss
        return self.samples[-1][1] if self.samples else None

    def between(self, a: float, b: float) -> list[int]:
        return [rss for ts, rss in self.samples if a <= ts <= b]


class Load:
    """Requests on a few gRPC channels (round robin), answered through future callbacks."""

    def __init__(self, url: str, images: np.ndarray, reference: np.ndarray, channels: int = 4):
        self.channels = [grpc.insecure_channel(url, options=[("grpc.max_receive_message_length", 8 * MiB)])
                         for _ in range(channels)]
        self.stubs = [pbg.GRPCInferenceServiceStub(c) for c in self.channels]
        self.next_stub = 0
        self.valid = [request([1, 1, 28, 28], images[i:i + 1].tobytes()) for i in range(len(images))]
        self.reference = reference
        self.malformed = {k: malformed_request(k) for k in MALFORMED}
        self.lock = threading.Lock()
        self.counts: Counter = Counter()  # (phase, kind, status name) -> n
        self.failures: list[str] = []  # first few valid-request failures, for the report
        self.outstanding = 0
        self.latency: dict[str, list[array]] = {}  # phase -> per-window latencies (s) of served valid requests
        self.window_s = 1.0
        self.phase_t0 = time.monotonic()
        self.idle = threading.Condition(self.lock)

    def close(self, timeout: float = 10) -> bool:
        """Closes the channels; False when that did not finish within timeout (seen once, after a
        30-minute soak and a 30 s overload: grpc's Channel.close() waited forever on a lock)."""
        t = threading.Thread(target=lambda: [c.close() for c in self.channels], daemon=True)
        t.start()
        t.join(timeout)
        return not t.is_alive()

    def start_phase(self, phase: str, window_s: float) -> None:
        with self.lock:
            self.latency[phase] = []
            self.window_s = window_s
            self.phase_t0 = time.monotonic()

    def send(self, phase: str, kind: str, index: int, timeout: float) -> grpc.Future:
        req = self.malformed[kind] if kind in self.malformed else self.valid[index]
        stub = self.stubs[self.next_stub]
        self.next_stub = (self.next_stub + 1) % len(self.stubs)
        with self.lock:
            self.outstanding += 1
        t0 = time.monotonic()
        fut = stub.ModelInfer.future(req, timeout=timeout)
        fut.add_done_callback(lambda f: self._done(f, phase, kind, index, t0))
        return fut

    def _done(self, fut: grpc.Future, phase: str, kind: str, index: int, t0: float) -> None:
        now = time.monotonic()
        if fut.cancelled():
            code, resp = grpc.StatusCode.CANCELLED, None
        else:
            code = fut.code()
            resp = fut.result() if code == grpc.StatusCode.OK else None
        status = code.name
        wrong = ""
        if kind == "valid" and resp is not None:
            try:
                out = np.frombuffer(resp.raw_output_contents[0], np.float32).reshape(1, 10)
                err = float(np.abs(out - self.reference[index:index + 1]).max())
                if err > 1e-3:
                    wrong = f"output off the reference by {err:.2e}"
            except (IndexError, ValueError) as e:
                wrong = f"unreadable output: {e}"
            if wrong:
                status = "WRONG_OUTPUT"
        with self.lock:
            self.counts[(phase, kind, status)] += 1
            if kind == "valid" and status == "OK":
                w = int((t0 - self.phase_t0) / self.window_s)
                lat = self.latency.setdefault(phase, [])
                while len(lat) <= w:
                    lat.append(array("d"))
                lat[w].append(now - t0)
            elif kind == "valid" and len(self.failures) < 10:
                details = wrong or (fut.details() if not fut.cancelled() else "cancelled")
                self.failures.append(f"{phase}: {status}: {details}")
            self.outstanding -= 1
            if self.outstanding == 0:
                self.idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self.lock:
            return self.idle.wait_for(lambda: self.outstanding == 0, timeout)

    def closed_loop(self, phase: str, in_flight: int, seconds: float, timeout: float = 30) -> int:
        """Keeps in_flight valid requests outstanding for seconds; returns the requests served."""
        sem = threading.Semaphore(in_flight)
        done = [0]
        stop = time.monotonic() + seconds
        rng = random.Random(1)

        def release(f):
            if not f.cancelled() and f.code() == grpc.StatusCode.OK:
                done[0] += 1
            sem.release()

        while time.monotonic() < stop:
            if not sem.acquire(timeout=0.1):
                continue
            self.send(phase, "valid", rng.randrange(len(self.valid)), timeout).add_done_callback(release)
        return done[0]

    def open_loop(self, phase: str, rate: float, seconds: float, mixed: bool, timeout: float,
                  max_outstanding: int = 20000, seed: int = 2, progress=None, progress_s: float = 60) -> dict:
        """Sends at `rate` per second for `seconds` (on schedule: a late sender catches up in a burst).
        mixed: every 100 requests hold 5 malformed and 1 cancelled, shuffled. progress(elapsed s) is
        called every progress_s."""
        rng = random.Random(seed)
        start = time.monotonic()
        end = start + seconds
        n = sent = skipped = 0
        max_lag = 0.0
        cancels: list[tuple[float, int, grpc.Future]] = []
        block: list[str] = []
        m = c = 0
        next_progress = start + progress_s
        while True:
            now = time.monotonic()
            if progress and now >= next_progress:
                progress(now - start)
                next_progress += progress_s
            while cancels and cancels[0][0] <= now:
                heapq.heappop(cancels)[2].cancel()
            due = start + n / rate
            if due >= end:
                break
            if now < due:
                wake = min(due, cancels[0][0]) if cancels else due
                time.sleep(max(0.0, wake - now))
                continue
            max_lag = max(max_lag, now - due)
            n += 1
            if self.outstanding >= max_outstanding:
                skipped += 1
                continue
            kind, req_timeout, cancel_after = "valid", timeout, None
            if mixed:
                if not block:
                    block = ["valid"] * 94 + ["malformed"] * 5 + ["cancel"] * 1
                    rng.shuffle(block)
                slot = block.pop()
                if slot == "malformed":
                    kind = MALFORMED[m % len(MALFORMED)]
                    m += 1
                elif slot == "cancel":
                    if c % 2 == 0:
                        kind, req_timeout = "cancel_deadline", rng.uniform(0.0002, 0.002)
                    else:
                        kind, cancel_after = "cancel_future", rng.uniform(0.0, 0.002)
                    c += 1
            fut = self.send(phase, kind, rng.randrange(len(self.valid)), req_timeout)
            sent += 1
            if cancel_after is not None:
                heapq.heappush(cancels, (now + cancel_after, sent, fut))
        for _, _, fut in cancels:
            fut.cancel()
        elapsed = time.monotonic() - start
        return {"sent": sent, "skipped_client_backlog": skipped, "seconds": elapsed,
                "offered_per_s": sent / elapsed if elapsed > 0 else 0.0, "max_send_lag_s": max_lag}

    def phase_counts(self, phase: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        with self.lock:
            for (p, kind, status), v in self.counts.items():
                if p == phase:
                    out.setdefault(kind, {})[status] = v
        return out


def test_images(n: int = 16) -> np.ndarray:
    images = DATA / "t10k-images-idx3-ubyte.gz"
    if images.is_file():
        return read_idx(images)[:n].astype(np.float32).reshape(n, 1, 28, 28) / 255.0
    return np.random.default_rng(0).random((n, 1, 28, 28), dtype=np.float32)


def write_repo(repo: Path, queue_delay_us: int, preferred: list[int], batching: bool = True) -> None:
    (repo / MODEL / "1").mkdir(parents=True)
    shutil.copy2(ROOT / "models" / MODEL / "1" / "model.safetensors", repo / MODEL / "1" / "model.safetensors")
    lines = [l for l in (ROOT / "models" / MODEL / "config.pbtxt").read_text().splitlines()
             if not l.startswith("#") and not l.startswith("dynamic_batching")]
    pref = f" preferred_batch_size: [{', '.join(map(str, preferred))}]" if preferred else ""
    block = f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us}{pref} }}\n" if batching else ""
    (repo / MODEL / "config.pbtxt").write_text("\n".join(lines) + "\n" + block)


def p99_ms(windows: list[array], first: int, last: int) -> float | None:
    vals = [v for w in windows[first:last] for v in w]
    return float(np.percentile(vals, 99) * 1e3) if vals else None


def warm_up(url: str, images: np.ndarray) -> None:
    """Three requests of each batch size 1..64: kiln's JIT runs a new batch size, captures it on the
    second request (lowering every kernel again, and keeping the buffers its replays use) and replays
    from the third. Without this the captures of the sizes the batcher forms fall inside the soak:
    seconds of a busy device lane, and RSS steps that are not leaks."""
    with grpc.insecure_channel(url) as ch:
        stub = pbg.GRPCInferenceServiceStub(ch)
        for b in range(1, MAX_BATCH + 1):
            x = np.resize(images, (b, 1, 28, 28)).astype(np.float32)
            for _ in range(3):
                stub.ModelInfer(request([b, 1, 28, 28], x.tobytes()), timeout=300)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30, help="soak length (default 30)")
    ap.add_argument("--overload-seconds", type=float, default=30, help="overload phase at 4x peak (default 30)")
    ap.add_argument("--rate", type=float, default=0, help="soak offered load per second (default 80%% of the peak)")
    ap.add_argument("--load-fraction", type=float, default=0.8,
                    help="soak offered load as a fraction of the measured peak (default 0.8)")
    ap.add_argument("--peak-seconds", type=float, default=3, help="per closed-loop level (default 3)")
    ap.add_argument("--peak-concurrency", default="8,32,64",
                    help="closed-loop levels; the peak is the best one's served rate (default 8,32,64)")
    ap.add_argument("--overload-factor", type=float, default=4)
    ap.add_argument("--timeout", type=float, default=30, help="deadline of a valid soak request, s")
    ap.add_argument("--overload-timeout", type=float, default=10, help="deadline of an overload request, s")
    ap.add_argument("--queue-delay-us", type=int, default=500)
    ap.add_argument("--max-queue-size", type=int, default=1024,
                    help="kilnd --max-queue-size: room for the Python sender's bursts (default 1024)")
    ap.add_argument("--preferred-batch-sizes", default="8,16,32,64")
    ap.add_argument("--no-dynamic-batching", action="store_true",
                    help="serve the model without its dynamic_batching block (the comparison run)")
    ap.add_argument("--max-rss-growth-mib", type=float, default=32)
    ap.add_argument("--max-overload-rss-mib", type=float, default=512,
                    help="bound on kilnd's RSS growth in the overload (default 512: measured, kilnd's RSS rises "
                         "by some 370 MiB in the first 30 s of 4x overload and then stays flat)")
    ap.add_argument("--kilnd", default="", help="kilnd binary (default $KILND, else $KILN_BUILD_DIR/server/main/kilnd)")
    ap.add_argument("--json", default="", help="write the summary here as JSON")
    args = ap.parse_args()

    if args.kilnd:
        os.environ["KILND"] = args.kilnd
    elif not os.environ.get("KILND"):
        build = Path(os.environ.get("KILN_BUILD_DIR", "build/release"))
        os.environ["KILND"] = str(build if build.is_absolute() else ROOT / build) + "/server/main/kilnd"
    preferred = [int(b) for b in args.preferred_batch_sizes.split(",") if b]
    soak_s = args.minutes * 60
    warm_s = min(300.0, soak_s / 6)  # the first 5 minutes of 30; scaled down for short runs
    weights = read_safetensors(ROOT / "models" / MODEL / "1" / "model.safetensors")
    images = test_images()
    reference = mnist_cnn_forward(weights, images)

    scratch = Path(tempfile.mkdtemp(prefix="kiln_soak_"))
    write_repo(scratch / "repo", args.queue_delay_us, preferred, not args.no_dynamic_batching)
    server = Kilnd(scratch / "repo", ["--metrics-port=-1", f"--max-request-bytes={MAX_REQUEST_BYTES}",
                                      f"--max-queue-size={args.max_queue_size}"])
    pid = server.proc.pid
    print(f"soak: kilnd pid {pid} at {server.url}, {MODEL} "
          + ("without dynamic_batching" if args.no_dynamic_batching else
             f"with dynamic_batching {{ max_queue_delay_microseconds: {args.queue_delay_us} "
             f"preferred_batch_size: {preferred} }}"), flush=True)
    summary: dict = {"kilnd": os.environ["KILND"], "minutes": args.minutes, "overload_seconds": args.overload_seconds}
    problems: list[str] = []
    load = None
    sampler = None
    closed = True
    try:
        t = time.monotonic()
        rss0 = read_rss_bytes(pid) or 0
        warm_up(server.url, images)
        rss1 = read_rss_bytes(pid) or 0
        summary["rss_before_warm_up_mib"], summary["rss_after_warm_up_mib"] = rss0 / MiB, rss1 / MiB
        print(f"warm-up: batch sizes 1..{MAX_BATCH}, 3 requests each, in {time.monotonic() - t:.1f} s; kilnd RSS "
              f"{rss0 / MiB:.1f} -> {rss1 / MiB:.1f} MiB", flush=True)
        load = Load(server.url, images, reference)

        # --- peak
        if args.rate > 0:
            rate = args.rate
            summary["peak_per_s"] = None
            print(f"soak rate: {rate:.0f}/s (--rate)")
        else:
            load.closed_loop("peak-warm", 8, 1.0)
            levels = {}
            for conc in [int(c) for c in args.peak_concurrency.split(",") if c]:
                done = load.closed_loop("peak", conc, args.peak_seconds)
                load.wait_idle(30)
                levels[conc] = done / args.peak_seconds
            peak = max(levels.values())
            rate = args.load_fraction * peak
            summary["peak_per_s"], summary["peak_levels"] = peak, levels
            pc = load.phase_counts("peak").get("valid", {})
            print("peak: closed loop, served/s by requests in flight: "
                  + ", ".join(f"{c}: {r:.0f}" for c, r in levels.items())
                  + f" ({pc}); soak rate {args.load_fraction:.0%} of {peak:.0f}/s = {rate:.0f}/s", flush=True)
            if set(pc) - {"OK"}:
                problems.append(f"peak phase: valid requests not served: {pc}")
        summary["soak_rate_per_s"] = rate

        # --- soak
        sampler = Sampler(pid, time.monotonic())
        sampler.start()
        load.start_phase("soak", warm_s)
        print(f"soak: {args.minutes:g} min at {rate:.0f}/s (94% valid, 5% malformed, 1% cancelled); "
              f"windows of {warm_s:.0f} s", flush=True)
        def progress(elapsed: float) -> None:
            valid = load.phase_counts("soak").get("valid", {})
            rss = read_rss_bytes(pid)
            print(f"  {elapsed:5.0f} s: valid {dict(sorted(valid.items()))}, kilnd RSS "
                  f"{(rss or 0) / MiB:.1f} MiB", flush=True)

        sent = load.open_loop("soak", rate, soak_s, mixed=True, timeout=args.timeout, progress=progress,
                              progress_s=max(10.0, min(60.0, soak_s / 10)))
        soak_end = time.monotonic() - sampler.t0
        drained = load.wait_idle(args.timeout + 10)
        counts = load.phase_counts("soak")
        valid = counts.get("valid", {})
        valid_failed = sum(v for k, v in valid.items() if k != "OK")
        malformed_served = sum(counts.get(k, {}).get("OK", 0) for k in MALFORMED)
        rss_mark, rss_end = sampler.at(warm_s), sampler.at(soak_end)
        rss_growth = (rss_end - rss_mark) if rss_mark and rss_end else None
        rss_peak = max(sampler.between(warm_s, soak_end), default=None)
        windows = load.latency.get("soak", [])
        n_windows = max(1, int(round(soak_s / warm_s)))
        p99_first, p99_last = p99_ms(windows, 0, 1), p99_ms(windows, n_windows - 1, n_windows)
        summary["soak"] = {**sent, "drained": drained, "counts": counts, "valid_failed": valid_failed,
                           "malformed_served": malformed_served, "rss_at_mark_mib": (rss_mark or 0) / MiB,
                           "rss_end_mib": (rss_end or 0) / MiB, "rss_growth_mib": (rss_growth or 0) / MiB,
                           "rss_peak_after_mark_mib": (rss_peak or 0) / MiB, "window_s": warm_s,
                           "p99_first_ms": p99_first, "p99_last_ms": p99_last}
        print(f"soak: sent {sent['sent']} ({sent['offered_per_s']:.0f}/s offered, max send lag "
              f"{sent['max_send_lag_s'] * 1e3:.1f} ms, {sent['skipped_client_backlog']} skipped for client backlog)")
        for kind in ["valid", *MALFORMED, "cancel_deadline", "cancel_future"]:
            print(f"  {kind:<16} {dict(sorted(counts.get(kind, {}).items()))}")
        print(f"  valid requests failed: {valid_failed} (target 0); malformed served: {malformed_served}")
        print(f"  kilnd RSS: {(rss_mark or 0) / MiB:.1f} MiB at {warm_s:.0f} s, {(rss_end or 0) / MiB:.1f} MiB at "
              f"the end: growth {(rss_growth or 0) / MiB:+.1f} MiB (limit {args.max_rss_growth_mib:g}); "
              f"peak after the mark {(rss_peak or 0) / MiB:.1f} MiB")
        fmt = lambda v: f"{v:.2f} ms" if v is not None else "-"  # noqa: E731
        print(f"  p99 of valid requests: first window {fmt(p99_first)}, last window {fmt(p99_last)}"
              + (f" (x{p99_last / p99_first:.2f})" if p99_first and p99_last else ""), flush=True)
        if valid_failed:
            problems.append(f"soak: {valid_failed} valid requests failed: {load.failures[:5]}")
        if malformed_served:
            problems.append(f"soak: {malformed_served} malformed requests were served")
        if not drained:
            problems.append("soak: requests still outstanding after their deadline")
        if rss_growth is None:
            problems.append("soak: kilnd's RSS could not be read")
        elif rss_growth > args.max_rss_growth_mib * MiB:
            problems.append(f"soak: kilnd's RSS grew {rss_growth / MiB:.1f} MiB (> {args.max_rss_growth_mib:g})")

        # --- overload
        if args.overload_seconds > 0:
            base = summary.get("peak_per_s") or rate / args.load_fraction
            over_rate = args.overload_factor * base
            rss_before = read_rss_bytes(pid)
            t_over = time.monotonic() - sampler.t0
            load.start_phase("overload", 1.0)
            print(f"overload: {args.overload_seconds:g} s at {over_rate:.0f}/s ({args.overload_factor:g}x peak), "
                  f"deadline {args.overload_timeout:g} s", flush=True)
            sent = load.open_loop("overload", over_rate, args.overload_seconds, mixed=False,
                                  timeout=args.overload_timeout)
            drained = load.wait_idle(args.overload_timeout + 10)
            t_after = time.monotonic() - sampler.t0
            ov = load.phase_counts("overload").get("valid", {})
            served = ov.get("OK", 0)
            rejected = sum(v for k, v in ov.items() if k in {c.name for c in REJECTED_UNDER_LOAD})
            unanswered = ov.get("DEADLINE_EXCEEDED", 0)
            other = sum(ov.values()) - served - rejected - unanswered
            rss_max = max(sampler.between(t_over, t_after) + [read_rss_bytes(pid) or 0])
            over_growth = rss_max - (rss_before or rss_max)
            summary["overload"] = {**sent, "drained": drained, "counts": ov, "served": served, "rejected": rejected,
                                   "unanswered": unanswered, "other_errors": other,
                                   "rss_before_mib": (rss_before or 0) / MiB, "rss_max_mib": rss_max / MiB,
                                   "rss_growth_mib": over_growth / MiB}
            print(f"  sent {sent['sent']} ({sent['offered_per_s']:.0f}/s offered, "
                  f"{sent['skipped_client_backlog']} skipped for client backlog): served {served}, rejected "
                  f"(UNAVAILABLE/RESOURCE_EXHAUSTED) {rejected}, not answered within the deadline {unanswered}, "
                  f"other {other} {dict(sorted(ov.items()))}")
            print(f"  kilnd RSS: {(rss_before or 0) / MiB:.1f} MiB before, at most {rss_max / MiB:.1f} MiB "
                  f"({over_growth / MiB:+.1f} MiB, limit {args.max_overload_rss_mib:g})", flush=True)
            if unanswered or not drained:
                problems.append(f"overload: {unanswered} requests not answered within {args.overload_timeout:g} s"
                                + ("" if drained else " (some still outstanding)"))
            if other:
                problems.append(f"overload: {other} requests failed otherwise: {ov}")
            if over_growth > args.max_overload_rss_mib * MiB:
                problems.append(f"overload: kilnd's RSS grew {over_growth / MiB:.1f} MiB")

            # --- normal service right after
            load.start_phase("after", 1.0)
            with load.lock:
                before_failures = len(load.failures)
            sem = threading.Semaphore(8)
            for i in range(200):
                sem.acquire()
                load.send("after", "valid", i % len(images), 30).add_done_callback(lambda _f: sem.release())
            load.wait_idle(60)
            after = load.phase_counts("after").get("valid", {})
            after_failed = sum(v for k, v in after.items() if k != "OK")
            summary["after_overload"] = {"counts": after, "failed": after_failed}
            print(f"after the overload: 200 valid requests, 8 in flight: {after}", flush=True)
            if after_failed:
                problems.append(f"after the overload: {after_failed} of 200 valid requests failed: "
                                f"{load.failures[before_failures:before_failures + 5]}")
    finally:
        if sampler:
            sampler.halt.set()
        if load:
            closed = load.close()
            if not closed:
                print("soak: the gRPC channels did not close within 10 s; exiting without waiting for them")
        alive = server.proc.poll() is None
        logs = server.logs()
        rc = server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    summary["kilnd_exit"] = rc
    if sampler:
        summary["rss_mib_per_s"] = [(round(t, 1), round(r / MiB, 1)) for t, r in sampler.samples]
    if not alive:
        problems.append(f"kilnd died during the run (exit {server.proc.returncode}); log tail:\n{logs[-2000:]}")
    elif rc != 0:
        problems.append(f"kilnd exited {rc} on SIGTERM")
    summary["problems"] = problems
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
    print("soak: " + ("PASS" if not problems else "FAIL:\n  " + "\n  ".join(problems)), flush=True)
    exit_code = 1 if problems else 0
    if not closed:  # interpreter shutdown would wait on grpc's stuck close
        sys.stderr.flush()
        os._exit(exit_code)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
