"""Closed-loop gRPC load on kilnd with the stock tritonclient: the kiln_builtin mnist_cnn model,
batch 1, at concurrency 1, 4 and 16. Reports throughput, client p50/p99/mean latency and the
overhead = mean client latency - mean compute (ModelStatistics compute_infer ns / count over the
window; the statistics give means only), also with the mean queue time taken out. Then the same
levels from the C++ grpc_infer_bench and from Triton's stock perf_analyzer (.venv/bin/perf_analyzer).

Weights: models/fashion_mnist/1/model.safetensors when present (model fashion_mnist), else a
temporary repository with random weights (tests/e2e/builtin_models.py). kilnd comes from
$KILN_BUILD_DIR/server/main/kilnd (default build/release). SERVE_BENCH_SECONDS sets the window
per concurrency (default 5)."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from builtin_models import make_repo  # noqa: E402
from conftest import Kilnd  # noqa: E402


def stats(client, model):
    s = client.get_inference_statistics(model, "1").model_stats[0].inference_stats
    return s.success.count, s.compute_infer.ns, s.queue.ns, s.success.ns


def run_level(url, model, x, concurrency, seconds, input_name):
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    stop = time.monotonic() + seconds
    barrier = threading.Barrier(concurrency)

    def worker(out):
        c = grpcclient.InferenceServerClient(url=url)
        inp = grpcclient.InferInput(input_name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        barrier.wait()
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            c.infer(model, [inp])
            out.append(time.perf_counter() - t0)
        c.close()

    threads = [threading.Thread(target=worker, args=(l,)) for l in latencies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return np.array([v for l in latencies for v in l])


def perf_analyzer_levels(url: str, model: str, seconds: float) -> int:
    """The same levels from Triton's stock perf_analyzer (C++, sync gRPC; installed into .venv by
    deploy/install-deps.sh). Its 'Server' line splits kilnd's statistics into overhead, queue and
    compute; p50 - compute is the issue's 'latency minus compute' without a Python client's own cost (compute is
    a mean, so mean latency - compute is printed too: under load the two disagree)."""
    pa = ROOT / ".venv" / "bin" / "perf_analyzer"
    if not os.access(pa, os.X_OK):
        print(f"serve_bench: {pa} is missing (deploy/install-deps.sh installs it)")
        return 1
    print(f"perf_analyzer (Triton 2.41.0, sync gRPC), {seconds:g} s windows:")
    print(f"{'conc':>4} {'req/s':>9} {'p50 us':>8} {'p99 us':>8} {'compute us':>10} {'queue us':>9} "
          f"{'srv ovh us':>10} {'p50-compute us':>14} {'mean-compute us':>15}")
    with tempfile.TemporaryDirectory(prefix="kiln_pa_") as tmp:
        for conc in (1, 4, 16):
            out = Path(tmp) / f"c{conc}.csv"
            r = subprocess.run([str(pa), "-m", model, "-u", url, "-i", "grpc", "-b", "1",
                                f"--concurrency-range={conc}", f"--measurement-interval={int(seconds * 1000)}",
                                "--stability-percentage=25", "--max-trials=10", "-f", str(out), "--verbose-csv"],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                return 1
            with open(out) as f:
                row = next(csv.DictReader(f))
            m = re.search(r"overhead (\d+) usec", r.stdout)
            compute = int(row["Server Compute Input"]) + int(row["Server Compute Infer"]) + int(
                row["Server Compute Output"])
            p50 = int(row["p50 latency"])
            print(f"{conc:>4} {float(row['Inferences/Second']):>9.1f} {p50:>8} {int(row['p99 latency']):>8} "
                  f"{compute:>10} {int(row['Server Queue']):>9} {m.group(1) if m else '?':>10} {p50 - compute:>14} "
                  f"{int(row['Avg latency']) - compute:>15}")
    return 0


def main() -> int:
    build = Path(os.environ.get("KILN_BUILD_DIR", "build/release"))
    if not build.is_absolute():
        build = ROOT / build
    os.environ["KILND"] = str(build / "server" / "main" / "kilnd")
    seconds = float(os.environ.get("SERVE_BENCH_SECONDS", "5"))
    tmp = None
    weights = ROOT / "models" / "fashion_mnist" / "1" / "model.safetensors"
    if weights.is_file():
        repo, model, source = ROOT / "models", "fashion_mnist", "trained fashion_mnist weights"
    else:
        tmp = Path(tempfile.mkdtemp(prefix="kiln_serve_bench_"))
        make_repo(tmp)
        repo, model, source = tmp, "mnist", "random weights (no models/fashion_mnist yet)"
    server = Kilnd(repo, ["--metrics-port=-1", "--max-queue-size=64"])
    try:
        client = grpcclient.InferenceServerClient(url=server.url)
        x = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
        input_name = client.get_model_metadata(model).inputs[0].name
        inp = grpcclient.InferInput(input_name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        for _ in range(5):  # run, capture, replays: the window measures replays only
            client.infer(model, [inp])
        # The floor every request pays in this client and the loopback gRPC stack: a no-op RPC.
        live = []
        for _ in range(500):
            t0 = time.perf_counter()
            client.is_server_live()
            live.append(time.perf_counter() - t0)
        floor_us = float(np.percentile(live, 50)) * 1e6
        print(f"serve_bench: kilnd {server.url}, model {model} (kiln_builtin mnist_cnn, {source}), "
              f"batch 1, {seconds:g} s per level")
        print(f"{'conc':>4} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} "
              f"{'compute us':>10} {'queue us':>9} {'overhead us':>11} {'excl queue us':>13} "
              f"{'in-server us':>12} {'srv ovh us':>10}")
        for conc in (1, 4, 16):
            n0, c0, q0, s0 = stats(client, model)
            lat = run_level(server.url, model, x, conc, seconds, input_name)
            n1, c1, q1, s1 = stats(client, model)
            count = max(1, n1 - n0)
            compute_us = (c1 - c0) / count / 1e3
            queue_us = (q1 - q0) / count / 1e3
            # in-server: the statistics' success duration (request arrival to response, inside kilnd);
            # its part outside the queue and the compute is the server's own overhead, without the
            # Python client's serialization and gRPC stack that the latency columns include.
            server_us = (s1 - s0) / count / 1e3
            p50, p99 = np.percentile(lat, 50) * 1e3, np.percentile(lat, 99) * 1e3
            mean_us = lat.mean() * 1e6
            print(f"{conc:>4} {len(lat) / seconds:>9.1f} {p50:>8.3f} {p99:>8.3f} {mean_us / 1e3:>8.3f} "
                  f"{compute_us:>10.1f} {queue_us:>9.1f} {mean_us - compute_us:>11.1f} "
                  f"{mean_us - compute_us - queue_us:>13.1f} {server_us:>12.1f} "
                  f"{server_us - compute_us - queue_us:>10.1f}")
            if conc == 1:
                print(f"{'':>4} ServerLive p50 {floor_us:.1f} us (tritonclient + loopback gRPC floor); "
                      f"p50 overhead above that floor: {p50 * 1e3 - compute_us - floor_us:.1f} us")
            if n1 - n0 != len(lat):
                print(f"serve_bench: statistics counted {n1 - n0} successes for {len(lat)} requests")
                return 1
        client.close()
        # The same levels from C++ (clients/cpp's KilnClient), without the Python client's own cost.
        cpp = build / "tests" / "bench" / "grpc_infer_bench"
        if cpp.is_file():
            r = subprocess.run([str(cpp), "--address", server.url, "--model", model, "--seconds", f"{seconds:g}"],
                               capture_output=True, text=True, timeout=600)
            print(r.stdout + r.stderr, end="")
            if r.returncode != 0:
                return 1
        if perf_analyzer_levels(server.url, model, seconds) != 0:
            return 1
    finally:
        assert server.stop() == 0
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
