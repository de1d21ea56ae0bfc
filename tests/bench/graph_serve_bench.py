"""Closed-loop gRPC latency of a kiln_graph model (models/add_sub: OUTPUT0 = INPUT0 + INPUT1,
OUTPUT1 = INPUT0 - INPUT1, FP32 (1, 16)) on kilnd at concurrency 1, with the stock tritonclient.
Reports client p50/p99/mean latency and the server's mean compute_infer (ModelStatistics) over the
window, after a warm-up of 5 calls (so the window sees the steady state: JIT replays since issue
#18, eager runs before it). Checks every answer against numpy.

kilnd comes from $KILN_BUILD_DIR/server/main/kilnd (default build/release), or $KILND when set;
GRAPH_BENCH_SECONDS sets the window (default 5)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from conftest import Kilnd  # noqa: E402


def main() -> int:
    if "KILND" not in os.environ:
        build = Path(os.environ.get("KILN_BUILD_DIR", "build/release"))
        if not build.is_absolute():
            build = ROOT / build
        os.environ["KILND"] = str(build / "server" / "main" / "kilnd")
    seconds = float(os.environ.get("GRAPH_BENCH_SECONDS", "5"))
    model = "add_sub"
    server = Kilnd(ROOT / "models", ["--metrics-port=-1"])
    try:
        client = grpcclient.InferenceServerClient(url=server.url)
        rng = np.random.default_rng(0)
        a = rng.random((1, 16), dtype=np.float32)
        b = rng.random((1, 16), dtype=np.float32)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        for _ in range(5):
            client.infer(model, inputs)
        s0 = client.get_inference_statistics(model, "1").model_stats[0].inference_stats
        lat = []
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            r = client.infer(model, inputs)
            lat.append(time.perf_counter() - t0)
            if not (np.array_equal(r.as_numpy("OUTPUT0"), a + b) and np.array_equal(r.as_numpy("OUTPUT1"), a - b)):
                print("graph_serve_bench: wrong answer")
                return 1
        s1 = client.get_inference_statistics(model, "1").model_stats[0].inference_stats
        n = max(1, s1.success.count - s0.success.count)
        compute_us = (s1.compute_infer.ns - s0.compute_infer.ns) / n / 1e3
        lat_ms = np.array(lat) * 1e3
        print(f"graph_serve_bench: kilnd {os.environ['KILND']}, model {model} (kiln_graph), batch 1, "
              f"concurrency 1, {seconds:g} s")
        print(f"{'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'compute us':>10}")
        print(f"{len(lat) / seconds:>9.1f} {np.percentile(lat_ms, 50):>8.3f} {np.percentile(lat_ms, 99):>8.3f} "
              f"{lat_ms.mean():>8.3f} {compute_us:>10.1f}")
        client.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
