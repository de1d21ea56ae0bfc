"""Triton's stock perf_analyzer (2.41.0, installed into .venv by deploy/install-deps.sh) against a real
kilnd, unchanged: gRPC sync, gRPC async, gRPC streaming and HTTP, on a kiln_graph and a kiln_builtin model.

perf_analyzer exits non-zero when any request fails or when the server's statistics cannot be read, so
a zero exit already says the protocol, the statistics extension and the model metadata it reads all
work. On top of that each run checks:
  - its CSV (Inferences/Second, p50) is positive;
  - the server section it printed from kilnd's ModelStatistics: the success count equals the inference
    and execution counts (batch 1, no batching), and equals the requests the client counted in the
    same window give or take the requests that complete while the statistics are being read (1%);
  - kilnd's own statistics counted at least every request perf_analyzer reported, and no failure.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

ROOT = Path(__file__).resolve().parents[2]
PERF_ANALYZER = ROOT / ".venv" / "bin" / "perf_analyzer"
CONCURRENCY = 2


@pytest.fixture(scope="module")
def perf_analyzer() -> Path:
    if not os.access(PERF_ANALYZER, os.X_OK):
        pytest.fail(f"{PERF_ANALYZER} is missing: deploy/install-deps.sh installs it")
    return PERF_ANALYZER


def model_counts(client, model: str) -> tuple[int, int]:
    s = client.get_inference_statistics(model, "1").model_stats[0].inference_stats
    return s.success.count, s.fail.count


def run_perf_analyzer(pa: Path, kilnd, tmp_path: Path, model: str, mode: str) -> tuple[dict, dict]:
    out_csv = tmp_path / f"{model}_{mode}.csv"
    url = kilnd.http_url if mode == "http" else kilnd.url
    args = [str(pa), "-m", model, "-u", url, "-i", "http" if mode == "http" else "grpc",
            "-b", "1", f"--concurrency-range={CONCURRENCY}", "--measurement-mode=count_windows",
            "--measurement-request-count=150", "--max-trials=5",
            # a compatibility test, not a benchmark: any three windows count as stable (shared CI cores)
            "--stability-percentage=1000", "-f", str(out_csv)]
    if mode == "async":
        args.append("--async")
    if mode == "streaming":
        args.append("--streaming")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=240)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"perf_analyzer {mode} on {model} exited {proc.returncode}:\n{text}"
    with open(out_csv) as f:
        row = next(csv.DictReader(f))
    fields = {}
    for key, pattern in {
        "client_requests": r"Client:\s*\n\s*Request count: (\d+)",
        "server_inferences": r"Server:\s*\n\s*Inference count: (\d+)",
        "server_executions": r"Execution count: (\d+)",
        "server_successes": r"Successful request count: (\d+)",
    }.items():
        m = re.search(pattern, text)
        assert m, f"perf_analyzer printed no '{key}' ({pattern}):\n{text}"
        fields[key] = int(m.group(1))
    return row, fields


@pytest.mark.parametrize("model", ["add_sub", "fashion_mnist"])
@pytest.mark.parametrize("mode", ["sync", "async", "streaming", "http"])
def test_perf_analyzer_unchanged(perf_analyzer, kilnd, client, tmp_path, model, mode):
    before_ok, before_fail = model_counts(client, model)
    row, f = run_perf_analyzer(perf_analyzer, kilnd, tmp_path, model, mode)
    after_ok, after_fail = model_counts(client, model)

    assert float(row["Inferences/Second"]) > 0
    assert int(row["p50 latency"]) > 0
    assert f["server_inferences"] == f["server_successes"]  # batch-1 requests
    if model == "add_sub":  # its config batches dynamically: executions merge requests
        assert 0 < f["server_executions"] <= f["server_successes"]
    else:
        assert f["server_executions"] == f["server_successes"]
    # perf_analyzer reads the statistics over another connection while the load keeps running, so a few
    # requests that complete during those reads land on either side of the window edges.
    slack = max(2 * CONCURRENCY, f["client_requests"] // 100)
    assert abs(f["server_successes"] - f["client_requests"]) <= slack, f
    assert after_fail == before_fail
    assert after_ok - before_ok >= f["client_requests"]
