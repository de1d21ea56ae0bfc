"""Triton's response cache (issue #25 item 4): `--cache-config local,size=N` and a model's
`response_cache { enable: true }`. Identical requests get identical answers (checked against
numpy), the second from the cache: nv_cache_* metrics and the statistics' cache_hit / cache_miss
count them, and a hit is no inference or execution (Triton's accounting). Anything in the key
(inputs, requested outputs) changing is a miss; the cache is LRU by bytes."""

from __future__ import annotations

import os
import re
import shutil
import socket
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from kilnd_launcher import Kilnd

MODELS = Path(os.environ.get("KILN_MODELS", Path(__file__).resolve().parents[2] / "models"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp_path: Path, size: int) -> tuple[Kilnd, int]:
    repo = tmp_path / "repo"
    shutil.copytree(MODELS / "add_sub" / "1", repo / "cached" / "1")
    text = (MODELS / "add_sub" / "config.pbtxt").read_text().replace('name: "add_sub"', "")
    (repo / "cached" / "config.pbtxt").write_text(text + "response_cache { enable: true }\n")
    port = free_port()
    return Kilnd(repo, [f"--metrics-port={port}", f"--cache-config=local,size={size}"]), port


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.findall(rf'^{name}\{{[^}}]*model="cached"[^}}]*\}} (\S+)$', text, re.M)
    return sum(float(v) for v in found)


def infer(client, a, b, outputs=None, module=grpcclient):
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        t = module.InferInput(name, list(value.shape), "FP32")
        t.set_data_from_numpy(value)
        inputs.append(t)
    requested = None if outputs is None else [module.InferRequestedOutput(o) for o in outputs]
    return client.infer("cached", inputs, outputs=requested)


def test_identical_requests_hit_and_answer_the_same(tmp_path):
    server, port = start(tmp_path, 1 << 20)
    try:
        client = grpcclient.InferenceServerClient(server.url)
        rng = np.random.default_rng(1)
        a, b = rng.random((2, 16), dtype=np.float32), rng.random((2, 16), dtype=np.float32)
        first, second = infer(client, a, b), infer(client, a, b)
        for r in (first, second):
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
        assert metric(port, "nv_cache_num_hits_per_model") == 1
        assert metric(port, "nv_cache_num_misses_per_model") == 1
        assert metric(port, "nv_cache_hit_duration_per_model") >= 0
        assert metric(port, "nv_inference_request_success") == 2  # a hit is a success ...
        assert metric(port, "nv_inference_count") == 2  # ... but no inference (batch 2, once)
        assert metric(port, "nv_inference_exec_count") == 1
        # other inputs, other requested outputs: misses
        infer(client, a, b + 1)
        only = infer(client, a, b, outputs=["OUTPUT1"])
        np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), a - b)
        assert only.as_numpy("OUTPUT0") is None
        assert metric(port, "nv_cache_num_misses_per_model") == 3
        # the same request over REST (binary tensors): the same key, a hit
        http = httpclient.InferenceServerClient(server.http_url)
        r = infer(http, a, b, module=httpclient)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        assert metric(port, "nv_cache_num_hits_per_model") == 2
        stats = client.get_inference_statistics("cached", as_json=True)["model_stats"][0]
        s = stats["inference_stats"]
        assert int(s["cache_hit"]["count"]) == 2 and int(s["cache_miss"]["count"]) == 3
        assert int(s["success"]["count"]) == 5 and int(stats["execution_count"]) == 3
    finally:
        assert server.stop() == 0


def test_the_cache_is_lru_by_bytes(tmp_path):
    # an entry of this model is about 400 bytes (key + outputs): two fit in 1000, three do not
    server, port = start(tmp_path, 1000)
    try:
        client = grpcclient.InferenceServerClient(server.url)
        x = {k: np.full((1, 16), i, np.float32) for i, k in enumerate("ABC")}
        y = np.ones((1, 16), np.float32)
        for k in "ABACAB":
            np.testing.assert_array_equal(infer(client, x[k], y).as_numpy("OUTPUT0"), x[k] + y)
        # A miss, B miss, A hit, C miss (evicts B, the least recent), A hit, B miss
        assert metric(port, "nv_cache_num_hits_per_model") == 2
        assert metric(port, "nv_cache_num_misses_per_model") == 4
    finally:
        assert server.stop() == 0
