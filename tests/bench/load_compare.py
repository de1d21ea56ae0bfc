"""Load comparison on the Fashion-MNIST CNN: kiln with dynamic batching, kiln without, and Triton
Inference Server itself (kiln issue #20).

Each server is started here on loopback ports, serves the same model (models/fashion_mnist: tinygrad's
beautiful_mnist CNN, max_batch_size 64, INPUT FP32 [1,28,28] -> OUTPUT FP32 [10], the same weights),
and is stopped at the end:
  kiln-batched  kilnd on a temporary repository holding models/fashion_mnist with
                `dynamic_batching { max_queue_delay_microseconds: D preferred_batch_size: [...] }`
  kiln          kilnd on the same model without a dynamic_batching block
  triton        tritonserver from PyPI's nvidia-pytriton wheel (installed on demand into .venv-bench,
                see tests/bench/bench_peers.py): the same CNN exported to ONNX from the safetensors
                weights, run by onnxruntime in Triton's Python backend, with the same dynamic_batching
                block and max_batch_size 64.
Before any load each server answers a few Fashion-MNIST test images, checked against a numpy forward
pass of the weights (tests/e2e/builtin_models.py) and Triton's against kiln's, within 1e-4.

Load: batch-1 requests, closed loop, at each --concurrency level, over gRPC and HTTP, from Triton's
stock perf_analyzer (.venv/bin/perf_analyzer, 2.41.0; three windows of --seconds/3 each; its requests carry
256 Fashion-MNIST test images in turn, or with --input-data random its own random bytes) and, over gRPC,
also from the C++ grpc_infer_bench (build/release/tests/bench/grpc_infer_bench, clients/cpp). Around
every run the model's KServe v2 statistics are read: inference_count / execution_count is the mean batch
each server executed. For kiln, kilnd's Prometheus counters kiln_jit_cache_misses_total and
kiln_compile_duration_seconds_count are read before and after a sweep that sends three requests of
each batch size 1..64 (before the load: with kiln's symbolic batch dim every size replays the model's one
trace, so the sweep should compile nothing; with `symbolic_batch` off a new size runs, is captured on its
second request and replayed from the third), and again around the load.

Client and servers share this machine's cores: the figures compare servers under the same client,
not absolute capacity.

  .venv/bin/python tests/bench/load_compare.py [--seconds 5] [--concurrency 1,8,32,64]
      [--protocols grpc,http] [--servers kiln-batched,kiln,triton] [--queue-delay-us 500]
      [--preferred-batch-sizes 8,16,32,64] [--tools perf_analyzer,grpc_infer_bench]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_peers import (Unavailable, TritonServer, cnn_onnx_bytes, dynamic_batching_block,  # noqa: E402
                         free_port, write_triton_repo)
from builtin_models import mnist_cnn_forward, read_idx, read_safetensors  # noqa: E402
from kilnd_launcher import Kilnd  # noqa: E402

MODEL = "fashion_mnist"
MAX_BATCH = 64
DATA = Path("/usr/share/datasets/fashion-mnist")
PERF_ANALYZER = ROOT / ".venv" / "bin" / "perf_analyzer"
ALL_SERVERS = ["kiln-batched", "kiln", "triton"]


@dataclass
class Row:
    server: str
    protocol: str
    tool: str
    concurrency: int
    throughput: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    inferences: int = 0
    executions: int = 0
    error: str = ""


@dataclass
class Running:
    name: str
    url: str
    http_url: str
    stop: object
    metrics_url: str = ""
    notes: list[str] = field(default_factory=list)


def test_images(n: int = 8) -> np.ndarray:
    images = DATA / "t10k-images-idx3-ubyte.gz"
    if images.is_file():
        return read_idx(images)[:n].astype(np.float32).reshape(n, 1, 28, 28) / 255.0
    return np.random.default_rng(0).random((n, 1, 28, 28), dtype=np.float32)


def model_stats(client) -> tuple[int, int]:
    s = client.get_inference_statistics(MODEL).model_stats
    return sum(m.inference_count for m in s), sum(m.execution_count for m in s)


def scrape(url: str) -> dict[str, float]:
    """Prometheus text: the sum over all label sets of each metric name."""
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


COMPILE_METRICS = ("kiln_jit_cache_misses_total", "kiln_compile_duration_seconds_count")


def compile_counts(server: Running) -> dict[str, float] | None:
    if not server.metrics_url:
        return None
    try:
        m = scrape(server.metrics_url)
    except OSError:
        return None
    return {k: m.get(k, float("nan")) for k in COMPILE_METRICS}


def infer(client, x: np.ndarray) -> np.ndarray:
    inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(np.ascontiguousarray(x))
    return client.infer(MODEL, [inp]).as_numpy("OUTPUT")


def batch_sweep(server: Running, images: np.ndarray, reps: int) -> None:
    """reps requests of each batch size 1..64 (tiles of the test images). kiln's JIT runs a new input
    signature once, captures it on the second call and replays from the third: three requests per
    size leave every batch size the dynamic batcher may form captured, so the load windows measure
    replays (one request per size would leave a capture of each size inside the measured load)."""
    c = grpcclient.InferenceServerClient(url=server.url)
    try:
        for b in range(1, MAX_BATCH + 1):
            x = np.resize(images, (b, 1, 28, 28)).astype(np.float32)
            for _ in range(reps):
                infer(c, x)
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# servers


def model_config_text(batching: str) -> str:
    lines = [l for l in (ROOT / "models" / MODEL / "config.pbtxt").read_text().splitlines()
             if not l.startswith("#") and not l.startswith("dynamic_batching")]
    return "\n".join(lines) + "\n" + batching


def start_kiln(name: str, batching: str, scratch: Path, extra: list[str]) -> Running:
    repo = scratch / f"repo_{name}"
    (repo / MODEL / "1").mkdir(parents=True)
    shutil.copy2(ROOT / "models" / MODEL / "1" / "model.safetensors", repo / MODEL / "1" / "model.safetensors")
    (repo / MODEL / "config.pbtxt").write_text(model_config_text(batching))
    metrics_port = free_port()
    k = Kilnd(repo, [f"--metrics-port={metrics_port}", f"--max-queue-size={4 * MAX_BATCH}", *extra])
    return Running(name, k.url, k.http_url, lambda: k.stop(), metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
                   notes=[f"pid {k.proc.pid}"])


def start_triton(batching: str, scratch: Path, weights: dict, ort_threads: int) -> Running:
    repo = scratch / "repo_triton"
    write_triton_repo(repo, MODEL, cnn_onnx_bytes(weights), MAX_BATCH, batching)
    t = TritonServer(repo, scratch / "tritonserver.log", ort_threads=ort_threads)
    return Running("triton", t.url, t.http_url, lambda: t.stop(),
                   notes=[f"pid {t.proc.pid}", "Python backend + onnxruntime "
                          f"({'default' if ort_threads <= 0 else ort_threads} intra-op threads)"])


# ---------------------------------------------------------------------------------------------
# load tools


def write_perf_analyzer_data(path: Path, images: np.ndarray) -> None:
    """perf_analyzer's --input-data file: one batch-1 request per image, taken in turn."""
    entries = [{"INPUT": [float(v) for v in img.reshape(-1)]} for img in images]
    path.write_text(json.dumps({"data": entries}))


def run_perf_analyzer(server: Running, protocol: str, conc: int, seconds: float, scratch: Path,
                      use_async: bool, input_data: str) -> Row:
    row = Row(server.name, protocol, "perf_analyzer", conc)
    out = scratch / f"pa_{server.name}_{protocol}_{conc}.csv"
    window_ms = max(500, int(seconds * 1000 / 3))
    url = server.url if protocol == "grpc" else server.http_url
    args = [str(PERF_ANALYZER), "-m", MODEL, "-u", url, "-i", protocol, "-b", "1",
            f"--concurrency-range={conc}:{conc}", f"--measurement-interval={window_ms}",
            # three windows, taken as they come (shared cores: a stability rule would only add trials)
            "--stability-percentage=999", "--max-trials=3", "-f", str(out), f"--input-data={input_data}"]
    if use_async:
        args.append("--async")
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=120 + 10 * seconds)
    except subprocess.TimeoutExpired:
        row.error = "perf_analyzer timed out"
        return row
    if r.returncode != 0 or not out.exists():
        row.error = f"perf_analyzer exit {r.returncode}: " + (r.stdout + r.stderr).strip()[-400:]
        return row
    with open(out) as f:
        rec = next(csv.DictReader(f))
    row.throughput = float(rec["Inferences/Second"])
    row.p50_ms = int(rec["p50 latency"]) / 1e3
    row.p99_ms = int(rec["p99 latency"]) / 1e3
    return row


def run_grpc_infer_bench(binary: Path, server: Running, conc: int, seconds: float) -> Row:
    row = Row(server.name, "grpc", "grpc_infer_bench", conc)
    try:
        r = subprocess.run([str(binary), "--address", server.url, "--model", MODEL, "--seconds", f"{seconds:g}",
                            "--concurrency", str(conc)], capture_output=True, text=True, timeout=120 + 2 * seconds)
    except subprocess.TimeoutExpired:
        row.error = "grpc_infer_bench timed out"
        return row
    # its table: conc req/s p50us p99us compute_us p50-compute
    m = re.search(rf"^\s*{conc}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", r.stdout, re.M)
    if r.returncode != 0 or not m:
        row.error = f"grpc_infer_bench exit {r.returncode}: " + (r.stdout + r.stderr).strip()[-400:]
        if not m:
            return row
    row.throughput, row.p50_ms, row.p99_ms = float(m.group(1)), float(m.group(2)) / 1e3, float(m.group(3)) / 1e3
    return row


# ---------------------------------------------------------------------------------------------
# report


def fmt_ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a > 0 and b > 0 else "-"


def print_table(rows: list[Row]) -> None:
    print(f"\n{'server':<13} {'proto':<5} {'tool':<16} {'conc':>4} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'requests':>9} {'executions':>10} {'req/exec':>8}")
    for r in rows:
        ratio = f"{r.inferences / r.executions:.2f}" if r.executions else "-"
        if r.error and not r.throughput:
            print(f"{r.server:<13} {r.protocol:<5} {r.tool:<16} {r.concurrency:>4}  FAILED: {r.error}")
            continue
        print(f"{r.server:<13} {r.protocol:<5} {r.tool:<16} {r.concurrency:>4} {r.throughput:>9.1f} "
              f"{r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.inferences:>9} {r.executions:>10} {ratio:>8}"
              + (f"  ({r.error})" if r.error else ""))


def print_ratios(rows: list[Row]) -> None:
    by = {(r.server, r.protocol, r.tool, r.concurrency): r for r in rows if r.throughput > 0}
    keys = sorted({(r.protocol, r.tool, r.concurrency) for r in rows}, key=lambda k: (k[0], k[1], k[2]))
    pairs = [("kiln-batched", "kiln"), ("kiln-batched", "triton"), ("kiln", "triton")]
    print("\nratios (throughput a/b; p99 a/b: below 1 means a is faster)")
    print(f"{'proto':<5} {'tool':<16} {'conc':>4} " + " ".join(f"{a + '/' + b:>26}" for a, b in pairs))
    for p, t, c in keys:
        cells = []
        for a, b in pairs:
            ra, rb = by.get((a, p, t, c)), by.get((b, p, t, c))
            if ra and rb:
                cells.append(f"{fmt_ratio(ra.throughput, rb.throughput):>6} thr {fmt_ratio(ra.p99_ms, rb.p99_ms):>6} p99")
            else:
                cells.append("-")
        print(f"{p:<5} {t:<16} {c:>4} " + " ".join(f"{x:>26}" for x in cells))


# ---------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5, help="measured seconds per level (default 5)")
    ap.add_argument("--concurrency", default="1,8,32,64", help="closed-loop levels (default 1,8,32,64)")
    ap.add_argument("--protocols", default="grpc,http")
    ap.add_argument("--servers", default=",".join(ALL_SERVERS))
    ap.add_argument("--tools", default="perf_analyzer,grpc_infer_bench",
                    help="perf_analyzer (gRPC and HTTP) and/or grpc_infer_bench (gRPC only)")
    ap.add_argument("--queue-delay-us", type=int, default=500, help="dynamic_batching max_queue_delay_microseconds")
    ap.add_argument("--preferred-batch-sizes", default="8,16,32,64",
                    help="dynamic_batching preferred_batch_size list ('' for none)")
    ap.add_argument("--pa-grpc-mode", choices=["async", "sync"], default="async",
                    help="perf_analyzer over gRPC: --async (default) or sync (a thread per request in flight)")
    ap.add_argument("--pa-http-mode", choices=["async", "sync"], default="sync",
                    help="perf_analyzer over HTTP: sync (default: 2.41.0's --async over HTTP died with SIGSEGV "
                         "and 'received CURLMsg=0' at 64 in flight against tritonserver) or async")
    ap.add_argument("--ort-threads", type=int, default=0,
                    help="onnxruntime intra-op threads in Triton's model.py (0 = onnxruntime's default)")
    ap.add_argument("--input-data", choices=["images", "random"], default="images",
                    help="perf_analyzer's requests: Fashion-MNIST test images (default; what a user sends) or "
                         "its own 'random' data (random bytes: about 1 float in 256 is subnormal, which slows any "
                         "CPU kernel that multiplies it, kiln's conv1 11x at batch 22)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the batch-size 1..64 sweep")
    ap.add_argument("--sweep-reps", type=int, default=3,
                    help="requests per batch size in the sweep (default 3: run, capture, replay)")
    ap.add_argument("--kilnd", default="", help="kilnd binary (default $KILN_BUILD_DIR/server/main/kilnd)")
    ap.add_argument("--kilnd-args", default="", help="more kilnd flags, e.g. '--inline-execution=false'")
    ap.add_argument("--kiln-instances", type=int, default=0,
                    help="instance_group count for the kiln servers (0: no instance_group, one instance)")
    args = ap.parse_args()

    build = Path(os.environ.get("KILN_BUILD_DIR", "build/release"))
    if not build.is_absolute():
        build = ROOT / build
    kilnd = Path(args.kilnd) if args.kilnd else build / "server" / "main" / "kilnd"
    os.environ["KILND"] = str(kilnd)
    levels = [int(c) for c in args.concurrency.split(",") if c]
    protocols = [p for p in args.protocols.split(",") if p]
    servers = [s for s in args.servers.split(",") if s]
    tools = [t for t in args.tools.split(",") if t]
    preferred = [int(b) for b in args.preferred_batch_sizes.split(",") if b]
    for s in servers:
        if s not in ALL_SERVERS:
            ap.error(f"--servers: unknown {s!r} (known: {', '.join(ALL_SERVERS)})")
    batching = dynamic_batching_block(args.queue_delay_us, preferred)
    instances = (f"instance_group [ {{ count: {args.kiln_instances} kind: KIND_CPU }} ]\n"
                 if args.kiln_instances > 0 else "")
    weights = read_safetensors(ROOT / "models" / MODEL / "1" / "model.safetensors")
    images = test_images()
    reference = mnist_cnn_forward(weights, images)
    cpp = build / "tests" / "bench" / "grpc_infer_bench"

    print(f"load_compare: model {MODEL} (kiln_builtin mnist_cnn, trained weights), batch-1 requests, "
          f"concurrency {levels}, {args.seconds:g} s per level, protocols {protocols}")
    print(f"  batched servers: {batching.strip()}")
    if instances:
        print(f"  kiln servers: {instances.strip()}")
    print(f"  perf_analyzer gRPC {args.pa_grpc_mode}, HTTP {args.pa_http_mode}, input data {args.input_data} "
          f"({PERF_ANALYZER}); "
          f"grpc_infer_bench: {cpp if cpp.is_file() else 'not built (' + str(cpp) + ')'}")
    if "perf_analyzer" in tools and not os.access(PERF_ANALYZER, os.X_OK):
        print(f"load_compare: {PERF_ANALYZER} is missing (deploy/install-deps.sh installs it)")
        return 1

    rows: list[Row] = []
    problems: list[str] = []
    outputs: dict[str, np.ndarray] = {}
    compile_report: list[str] = []
    scratch = Path(tempfile.mkdtemp(prefix="kiln_load_compare_"))
    pa_data = "random"
    if args.input_data == "images":
        pa_data = str(scratch / "pa_images.json")
        write_perf_analyzer_data(Path(pa_data), test_images(256))
    try:
        for name in servers:
            print(f"\n== {name}")
            try:
                if name == "triton":
                    server = start_triton(batching, scratch, weights, args.ort_threads)
                elif not kilnd.is_file():
                    raise Unavailable(f"kilnd binary {kilnd} is missing (build the release preset)")
                else:
                    server = start_kiln(name, instances + (batching if name == "kiln-batched" else ""), scratch,
                                        args.kilnd_args.split())
            except (Unavailable, RuntimeError) as e:
                msg = f"{name}: NOT RUN: {e}"
                print(msg)
                problems.append(msg.splitlines()[0])
                continue
            print(f"  {server.url} (gRPC), {server.http_url} (HTTP); " + "; ".join(server.notes))
            try:
                c = grpcclient.InferenceServerClient(url=server.url)
                y = infer(c, images)
                outputs[name] = y
                err = float(np.abs(y - reference).max())
                ok = err <= 1e-4
                print(f"  {len(images)} Fashion-MNIST test images: max |out - numpy reference| = {err:.2e}"
                      f" ({'ok' if ok else 'MISMATCH'})")
                if not ok:
                    problems.append(f"{name}: outputs differ from the numpy reference by {err:.2e}")
                for i in range(len(images)):  # batch 1 too
                    yi = infer(c, images[i:i + 1])
                    if float(np.abs(yi - reference[i:i + 1]).max()) > 1e-4:
                        problems.append(f"{name}: batch-1 output of image {i} differs from the reference")
                        break
                if not args.no_sweep:
                    before = compile_counts(server)
                    t0 = time.monotonic()
                    batch_sweep(server, images, args.sweep_reps)
                    dt = time.monotonic() - t0
                    after = compile_counts(server)
                    if before and after:
                        delta = {k: after[k] - before[k] for k in COMPILE_METRICS}
                        line = (f"{name}: sweep of batch sizes 1..{MAX_BATCH} ({args.sweep_reps} requests each, "
                                f"{dt:.1f} s): "
                                + ", ".join(f"{k} +{v:g}" for k, v in delta.items()))
                    else:
                        line = (f"{name}: sweep of batch sizes 1..{MAX_BATCH} ({args.sweep_reps} requests each): "
                                f"{dt:.1f} s"
                                + ("" if name == "triton" else "; compile metrics not readable"))
                    print("  " + line)
                    compile_report.append(line)
                load_before = compile_counts(server)
                for protocol in protocols:
                    for tool in tools:
                        if tool == "grpc_infer_bench" and (protocol != "grpc" or not cpp.is_file()):
                            continue
                        for conc in levels:
                            i0, e0 = model_stats(c)
                            if tool == "perf_analyzer":
                                mode = args.pa_grpc_mode if protocol == "grpc" else args.pa_http_mode
                                row = run_perf_analyzer(server, protocol, conc, args.seconds, scratch,
                                                        mode == "async", pa_data)
                            else:
                                row = run_grpc_infer_bench(cpp, server, conc, args.seconds)
                            i1, e1 = model_stats(c)
                            row.inferences, row.executions = i1 - i0, e1 - e0
                            rows.append(row)
                            print(f"  {protocol:<4} {tool:<16} conc {conc:>3}: {row.throughput:9.1f}/s  "
                                  f"p50 {row.p50_ms:7.2f} ms  p99 {row.p99_ms:7.2f} ms  "
                                  f"req/exec {row.inferences}/{row.executions}"
                                  + (f"  ERROR {row.error}" if row.error else ""), flush=True)
                            if row.error:
                                problems.append(f"{name} {protocol} {tool} conc {conc}: {row.error}")
                load_after = compile_counts(server)
                if load_before and load_after:
                    line = (f"{name}: during the load: "
                            + ", ".join(f"{k} +{load_after[k] - load_before[k]:g}" for k in COMPILE_METRICS))
                    print("  " + line)
                    compile_report.append(line)
                c.close()
            finally:
                rc = server.stop()
                if rc not in (0, None):
                    problems.append(f"{name}: exited {rc} on SIGTERM")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    if "triton" in outputs:
        for k in ("kiln-batched", "kiln"):
            if k in outputs:
                d = float(np.abs(outputs["triton"] - outputs[k]).max())
                print(f"\ntriton vs {k} outputs on the same images: max |diff| = {d:.2e}"
                      f" ({'ok' if d <= 1e-4 else 'MISMATCH'})")
                if d > 1e-4:
                    problems.append(f"triton and {k} outputs differ by {d:.2e}")
    print_table(rows)
    print_ratios(rows)
    if compile_report:
        print("\nJIT compiles (kilnd /metrics: " + ", ".join(COMPILE_METRICS) + ")")
        for line in compile_report:
            print("  " + line)
    if problems:
        print("\nproblems:")
        for p in problems:
            print("  " + p)
    # A peer that cannot run here is reported (above, with the reason), not failed; a kiln server that
    # cannot, a wrong answer or a failed run is a failure.
    failed = [p for p in problems if not p.startswith("triton: NOT RUN")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
