"""Triton's trace extension against a real kilnd started with --trace-file, with the stock
tritonclient (grpc and http): get/update_trace_settings globally and per model, sampling by
trace_rate and trace_count, the trace files in Triton's JSON format (a trace object naming the
model, then one object per timestamp: REQUEST_START <= QUEUE_START <= COMPUTE_START <= COMPUTE_END
<= REQUEST_END), log_frequency's indexed files, the rest written at shutdown, and the refusals
(trace_file changes, unknown settings, TENSORS, an unknown model, tracing without --trace-file).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import Kilnd

ORDER = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END"]


def add_sub_inputs(m, k):
    a = m.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.full((1, 16), k, np.float32))
    b = m.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    return [a, b]


def read_traces(path: Path) -> dict[int, dict]:
    """{id: {"model_name", "model_version", "request_id", "timestamps": {name: ns}}}"""
    traces: dict[int, dict] = {}
    for obj in json.loads(path.read_text()):
        t = traces.setdefault(obj["id"], {"timestamps": {}})
        if "model_name" in obj:
            t.update(model_name=obj["model_name"], model_version=obj["model_version"],
                     request_id=obj.get("request_id", ""))
        for ts in obj.get("timestamps", []):
            t["timestamps"][ts["name"]] = ts["ns"]
    return traces


def wait_for(path: Path, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), path


def check_trace(t: dict, model: str) -> None:
    assert t["model_name"] == model and t["model_version"] == 1
    ts = t["timestamps"]
    assert list(ts) == ORDER, ts
    values = [ts[n] for n in ORDER]
    assert values == sorted(values) and values[0] > 0, ts


def test_trace_settings_and_files(models, tmp_path):
    trace_file = tmp_path / "trace.json"
    server = Kilnd(models, [f"--trace-file={trace_file}"])
    try:
        g = grpcclient.InferenceServerClient(url=server.url)
        h = httpclient.InferenceServerClient(url=server.http_url)
        assert "trace" in h.get_server_metadata()["extensions"]

        s = h.get_trace_settings()
        assert s["trace_level"] == ["OFF"] and s["trace_file"] == str(trace_file)
        assert s["trace_mode"] == "triton" and s["trace_count"] == "-1"

        # Globally over gRPC: every request, three traces, written when the count runs out.
        g.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                                          "trace_count": "3", "log_frequency": "0"})
        for k in range(5):
            g.infer("add_sub", add_sub_inputs(grpcclient, k), request_id=f"req{k}")
        first = trace_file.with_name("trace.json.0")
        wait_for(first)
        traces = read_traces(first)
        assert len(traces) == 3
        for t in traces.values():
            check_trace(t, "add_sub")
        assert sorted(t["request_id"] for t in traces.values()) == ["req0", "req1", "req2"]
        gs = g.get_trace_settings(as_json=True)["settings"]
        assert gs["trace_count"]["value"] == ["0"] and gs["trace_level"]["value"] == ["TIMESTAMPS"]

        # Per model over REST: reduce_sum every 2nd request, unlimited, 2 traces per file.
        s = h.update_trace_settings(model_name="reduce_sum",
                                    settings={"trace_rate": "2", "trace_count": "-1", "log_frequency": "2"})
        assert s["trace_rate"] == "2" and s["trace_level"] == ["TIMESTAMPS"]  # inherited
        for k in range(4):
            x = httpclient.InferInput("X", [1, 8], "FP32")
            x.set_data_from_numpy(np.full((1, 8), k, np.float32))
            h.infer("reduce_sum", [x])
        second = trace_file.with_name("trace.json.1")
        wait_for(second)
        traces = read_traces(second)
        assert len(traces) == 2
        for t in traces.values():
            check_trace(t, "reduce_sum")
        # add_sub still uses the global settings, whose count is spent.
        g.infer("add_sub", add_sub_inputs(grpcclient, 9))
        # Clearing the model's rate (null) brings the global one back.
        s = h.update_trace_settings(model_name="reduce_sum", settings={"trace_rate": None})
        assert s["trace_rate"] == "1"

        # One more reduce_sum trace (rate 1 now) stays collected until shutdown (log_frequency 2).
        x = httpclient.InferInput("X", [1, 8], "FP32")
        x.set_data_from_numpy(np.ones((1, 8), np.float32))
        h.infer("reduce_sum", [x])

        for bad, words in (({"trace_file": "/tmp/kiln_evil_trace.json"}, "trace_file"),
                           ({"trace_level": ["TENSORS"]}, "TENSORS"),
                           ({"trace_rate": "0"}, "trace_rate"),
                           ({"trace_colour": "1"}, "unknown trace setting")):
            for c in (g, h):
                with pytest.raises(InferenceServerException, match=words):
                    c.update_trace_settings(settings=bad)
        with pytest.raises(InferenceServerException, match="no_such_model"):
            h.update_trace_settings(model_name="no_such_model", settings={"trace_rate": "1"})
        with pytest.raises(InferenceServerException, match="no_such_model"):
            g.get_trace_settings(model_name="no_such_model")
        assert not Path("/tmp/kiln_evil_trace.json").exists()
        g.close()
        h.close()
    finally:
        assert server.stop() == 0
    # At shutdown the last collected trace went to the next indexed file (log_frequency 2).
    third = trace_file.with_name("trace.json.2")
    traces = read_traces(third)
    assert len(traces) == 1
    check_trace(next(iter(traces.values())), "reduce_sum")


def test_tracing_needs_a_trace_file(models):
    server = Kilnd(models)
    try:
        h = httpclient.InferenceServerClient(url=server.http_url)
        with pytest.raises(InferenceServerException, match="--trace-file"):
            h.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        assert h.get_trace_settings()["trace_level"] == ["OFF"]
        h.close()
    finally:
        assert server.stop() == 0
