#!/usr/bin/env python3
"""Healthy REST latency while hostile clients hold connections (issue #26): a client calls add_sub
inference + the readiness probe back to back on one keep-alive connection and its latency p50/p99
is measured in three scenarios, on a fresh kilnd each:

  alone          nobody else
  slow           N slow clients dripping one byte every 2 s (half a request head, half a body)
  slow+streams   the same plus M training event streams (Server-Sent Events) left open and
                 unread, on a queued job behind a running one (--data-dir, Fashion-MNIST)

A call that fails or takes longer than --call-timeout counts as a failure; the percentiles are
over every call, failed ones included (a starved call shows as its timeout). Several binaries can be compared, e.g. the cpp-httplib kilnd of main against this
one: rest_slow_clients.py --kilnd /path/old/kilnd --kilnd build/release/server/main/kilnd

Usage: rest_slow_clients.py [--kilnd PATH]... [--seconds S] [--slow N] [--streams M]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from kilnd_launcher import Kilnd  # noqa: E402
from slow_clients import HealthyClient, SlowClients  # noqa: E402

JOB = {"architecture": "mlp", "mlpSizes": [784, 16, 10], "batchSize": 8, "steps": 1000000,
       "checkpointInterval": 0, "evalImages": 100, "seed": 3, "outputModel": "bench_mlp",
       "dataset": {"idxDir": "fashion-mnist"}}


def post(port, path, obj, timeout=30):
    body = json.dumps(obj).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "
              f"{len(body)}\r\n\r\n".encode() + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return json.loads(data.partition(b"\r\n\r\n")[2])


def open_streams(port, job_id, n, timeout):
    """Opens up to n event streams (each waits at most `timeout` for its response head); returns
    the sockets that got one."""
    opened = []

    def one():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            s.sendall(f"GET /v1/training/jobs/{job_id}/events HTTP/1.1\r\nHost: x\r\n"
                      "Accept: text/event-stream\r\n\r\n".encode())
            if s.recv(4096).startswith(b"HTTP/1.1 200"):
                opened.append(s)
            else:
                s.close()
        except OSError:
            pass

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return opened


def scenario(binary, name, args):
    os.environ["KILND"] = binary
    data = Path(tempfile.mkdtemp(prefix="kiln_bench_rest_"))
    extra = ["--metrics-port=-1"]
    if name == "slow+streams":
        extra += [f"--data-dir={data}", "--resume-jobs=false"]
    server = Kilnd(Path(os.environ.get("KILN_MODELS", REPO / "models")), extra)
    port = server.http_port
    slow, streams, jobs, note = None, [], [], ""
    try:
        HealthyClient(port, timeout=args.call_timeout).run(1)  # warm-up: compile, connect
        if name == "slow+streams":
            jobs = [post(port, "/v1/training/jobs", JOB),
                    post(port, "/v1/training/jobs", {**JOB, "seed": 4})]
            streams = open_streams(port, jobs[1]["id"], args.streams, args.call_timeout)
            note = f"{len(streams)}/{args.streams} streams opened"
        if name != "alone":
            slow = SlowClients(port, args.slow, interval=2.0).start()
        client = HealthyClient(port, timeout=args.call_timeout).run(args.seconds)
        p50, p99 = client.percentiles()
        return {"calls": len(client.latencies) - client.failed_calls,
                "failures": client.failed_calls, "p50": p50, "p99": p99, "note": note}
    finally:
        if slow is not None:
            slow.stop()
        for s in streams:
            s.close()
        for j in reversed(jobs):
            if "id" in j:
                try:
                    post(port, f"/v1/training/jobs/{j['id']}:cancel", {})
                except OSError:
                    pass
        server.stop(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", action="append",
                    help="kilnd binary (repeat to compare); default build/release")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--streams", type=int, default=70)
    ap.add_argument("--call-timeout", type=float, default=10)
    ap.add_argument("--scenarios", default="alone,slow,slow+streams")
    args = ap.parse_args()
    binaries = args.kilnd or [str(REPO / "build/release/server/main/kilnd")]
    print(f"{'kilnd':40s} {'scenario':13s} {'ok calls':>8s} {'failed':>6s} {'p50 ms':>8s} "
          f"{'p99 ms':>8s}  note", flush=True)
    for binary in binaries:
        for name in args.scenarios.split(","):
            r = scenario(binary, name, args)
            print(f"{binary[-40:]:40s} {name:13s} {r['calls']:8d} {r['failures']:6d} "
                  f"{r['p50']:8.1f} {r['p99']:8.1f}  {r['note']}", flush=True)


if __name__ == "__main__":
    main()
