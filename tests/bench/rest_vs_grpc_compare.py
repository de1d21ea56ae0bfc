#!/usr/bin/env python3
"""kilnd over HTTP (JSON and binary tensor data, stock tritonclient.http) beside gRPC (stock
tritonclient.grpc): closed-loop load at concurrency 1, 4, 16 on one model at batch 1.
Reports throughput, p50/p99 latency and p50 server overhead (client latency minus the mean
compute_infer time from the model's statistics over the same run).

Starts its own kilnd on free loopback ports (KILND, default build/release/server/main/kilnd;
KILN_MODELS, default models/). Usage: rest_vs_grpc_compare.py [--requests N] [--model M]
(tests/bench/serve_bench.py, from the gRPC issue, is the place this mode belongs once merged.)
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from kilnd_launcher import Kilnd  # noqa: E402


def make_request(mode: str, lib, x: np.ndarray, y: np.ndarray):
    binary = mode != "http-json"
    ins = []
    for name, arr in (("INPUT0", x), ("INPUT1", y)):
        i = lib.InferInput(name, list(arr.shape), "FP32")
        if mode == "grpc":
            i.set_data_from_numpy(arr)
        else:
            i.set_data_from_numpy(arr, binary_data=binary)
        ins.append(i)
    if mode == "grpc":
        outs = [lib.InferRequestedOutput("OUTPUT0")]
    else:
        outs = [lib.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    return ins, outs


def compute_stats(client, model):
    (entry,) = client.get_inference_statistics(model, as_json=True)["model_stats"] \
        if isinstance(client, grpcclient.InferenceServerClient) else \
        client.get_inference_statistics(model)["model_stats"]
    ci = entry["inference_stats"]["compute_infer"]
    return int(ci.get("count", 0)), int(ci.get("ns", 0))


def run(server: Kilnd, mode: str, concurrency: int, requests: int, model: str):
    lib = grpcclient if mode == "grpc" else httpclient
    url = server.url if mode == "grpc" else server.http_url
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    y = np.ones((1, 16), np.float32)
    want = x + y
    stats_client = grpcclient.InferenceServerClient(server.url)
    latencies: list[float] = []
    lock = threading.Lock()
    per_thread = max(1, requests // concurrency)

    def worker():
        client = lib.InferenceServerClient(url) if mode == "grpc" else \
            lib.InferenceServerClient(url, concurrency=1)
        ins, outs = make_request(mode, lib, x, y)
        mine = []
        for _ in range(per_thread):
            t0 = time.perf_counter()
            r = client.infer(model, ins, outputs=outs)
            mine.append(time.perf_counter() - t0)
            assert np.array_equal(r.as_numpy("OUTPUT0"), want)
        client.close()
        with lock:
            latencies.extend(mine)

    c0, ns0 = compute_stats(stats_client, model)
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    c1, ns1 = compute_stats(stats_client, model)
    stats_client.close()
    lat = np.array(latencies) * 1e6
    compute_us = (ns1 - ns0) / max(c1 - c0, 1) / 1e3
    return {"mode": mode, "concurrency": concurrency, "requests": len(lat),
            "throughput": len(lat) / wall, "p50_us": float(np.percentile(lat, 50)),
            "p99_us": float(np.percentile(lat, 99)), "compute_us": compute_us,
            "overhead_p50_us": float(np.percentile(lat, 50)) - compute_us}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--model", default="add_sub")
    ap.add_argument("--concurrency", default="1,4,16")
    args = ap.parse_args()
    os.environ.setdefault("KILND", str(REPO / "build/release/server/main/kilnd"))
    server = Kilnd(Path(os.environ.get("KILN_MODELS", REPO / "models")), ["--metrics-port=-1"])
    try:
        for mode in ("grpc", "http-json", "http-binary"):
            run(server, mode, 1, 50, args.model)  # warm-up
        print(f"{'mode':12s} {'conc':>4s} {'req/s':>9s} {'p50 us':>9s} {'p99 us':>9s} "
              f"{'compute us':>10s} {'overhead p50 us':>15s}")
        for conc in (int(c) for c in args.concurrency.split(",")):
            for mode in ("grpc", "http-json", "http-binary"):
                r = run(server, mode, conc, args.requests, args.model)
                print(f"{r['mode']:12s} {r['concurrency']:4d} {r['throughput']:9.0f} "
                      f"{r['p50_us']:9.0f} {r['p99_us']:9.0f} {r['compute_us']:10.0f} "
                      f"{r['overhead_p50_us']:15.0f}", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
