"""model_warmup with Triton's semantics (issue #25 item 4): the samples run before the model
reports READY (their kernel compiles show in kilnd's engine metrics before any request; a model
without warm-up compiles nothing until its first request), warm-up runs are no inference requests
(statistics and nv_inference_count stay 0), and a failing warm-up fails the load, naming it."""

from __future__ import annotations

import os
import re
import shutil
import socket
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from kilnd_launcher import Kilnd

MODELS = Path(os.environ.get("KILN_MODELS", Path(__file__).resolve().parents[2] / "models"))
WARMUP = """
model_warmup [{
  name: "rows" batch_size: 2 count: 3
  inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [16] random_data: true } }
  inputs { key: "INPUT1" value { data_type: TYPE_FP32 dims: [16] input_data_file: "in1.bin" } }
}, {
  name: "zeros"
  inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [16] zero_data: true } }
  inputs { key: "INPUT1" value { data_type: TYPE_FP32 dims: [16] zero_data: true } }
}]
"""
BAD = {  # name -> (model_warmup text, words of the load error)
    "bad_input": ('model_warmup [{ name: "w" inputs { key: "NOPE" value { data_type: TYPE_FP32 '
                  'dims: [16] zero_data: true } } }]', "model_warmup[0] ('w')"),
    "bad_file_size": ('model_warmup [{ name: "f" inputs { key: "INPUT0" value { data_type: TYPE_FP32 '
                      'dims: [16] input_data_file: "in1.bin" } } inputs { key: "INPUT1" value { '
                      'data_type: TYPE_FP32 dims: [16] zero_data: true } } }]', None),
    "bad_missing_file": ('model_warmup [{ name: "m" inputs { key: "INPUT0" value { data_type: TYPE_FP32 '
                         'dims: [16] input_data_file: "nothere.bin" } } }]', "warmup/nothere.bin is missing"),
    "bad_batch": ('model_warmup [{ name: "b" batch_size: 9 inputs { key: "INPUT0" value { '
                  'data_type: TYPE_FP32 dims: [16] zero_data: true } } }]', "batch_size 9 is outside 1..8"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model(repo: Path, name: str, warmup: str, in1: bytes | None = None) -> None:
    shutil.copytree(MODELS / "add_sub" / "1", repo / name / "1")
    text = (MODELS / "add_sub" / "config.pbtxt").read_text().replace('name: "add_sub"', "")
    (repo / name / "config.pbtxt").write_text(text + warmup)
    if in1 is not None:
        (repo / name / "warmup").mkdir()
        (repo / name / "warmup" / "in1.bin").write_bytes(in1)


def compiles(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    counts = re.findall(r"^kiln_compile_duration_seconds_count(?:\{[^}]*\})? (\S+)$", text, re.M)
    return sum(float(c) for c in counts)


def start(repo: Path) -> tuple[Kilnd, int]:
    port = free_port()
    return Kilnd(repo, [f"--metrics-port={port}", "--strict-readiness=false"]), port


def test_warmup_runs_before_ready_and_counts_in_no_statistics(tmp_path):
    repo = tmp_path / "warm"
    model(repo, "warm", WARMUP, np.arange(16, dtype=np.float32).tobytes())
    for name, (text, _) in BAD.items():
        model(repo, name, text, np.zeros(3, np.float32).tobytes() if name == "bad_file_size" else None)
    server, port = start(repo)
    try:
        client = grpcclient.InferenceServerClient(server.url)
        assert client.is_model_ready("warm")
        assert compiles(port) > 0, "the warm-up compiled nothing before the first request"
        stats = client.get_inference_statistics("warm", as_json=True)["model_stats"][0]
        assert int(stats.get("inference_count", 0)) == 0 and int(stats.get("execution_count", 0)) == 0
        logs = server.logs()
        ran = logs.index("model_warmup[0] ('rows') ran 3 time(s)")
        assert ran < logs.index("model_warmup[1] ('zeros') ran 1 time(s)") < logs.index("model 'warm' loaded")
        a = np.random.default_rng(0).random((1, 16), dtype=np.float32)
        b = np.ones((1, 16), np.float32)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        np.testing.assert_array_equal(client.infer("warm", inputs).as_numpy("OUTPUT0"), a + b)
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        for name, (_, words) in BAD.items():
            assert index[name]["state"] == "UNAVAILABLE" and "model_warmup[0]" in index[name]["reason"], index[name]
            if words:
                assert words in index[name]["reason"], index[name]
        assert "has 12 bytes; the input needs 64" in index["bad_file_size"]["reason"]
    finally:
        assert server.stop() == 0


def test_without_warmup_nothing_compiles_before_the_first_request(tmp_path):
    repo = tmp_path / "cold"
    model(repo, "cold", "")
    server, port = start(repo)
    try:
        assert grpcclient.InferenceServerClient(server.url).is_model_ready("cold")
        assert compiles(port) == 0
    finally:
        assert server.stop() == 0
