"""kilnd --beam (issue #21 item 1): kernels are tuned by BEAM in the background while kilnd serves with the
heuristic's kernels, and the tuned ones are swapped in once the searches have drained.

A real kilnd with --beam 1 (BEAM_BUDGET=1, a private KILN_CACHE_DIR) serves the bundled fashion_mnist model to the
stock tritonclient.grpc. Checked, against a numpy forward pass of the same CNN (builtin_models.mnist_cnn_forward):
the first requests answer at once and right while searches are pending (kiln_beam_pending > 0); the searches drain
(kiln_beam_pending 0, kiln_beam_searches_total > 0, kiln_beam_generation moved on, scraped as Prometheus text); the
requests after the swap are right too. A second kilnd on the same cache file searches nothing.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from builtin_models import mnist_cnn_forward, read_idx, read_safetensors
from kilnd_launcher import Kilnd

DATA = Path("/usr/share/datasets/fashion-mnist")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def beam_metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("kiln_beam_"):
                out[s.name] = s.value
    return out


def infer(client, x: np.ndarray) -> np.ndarray:
    inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(np.ascontiguousarray(x))
    return client.infer("fashion_mnist", [inp]).as_numpy("OUTPUT")


def test_background_tuning_swaps_in_and_stays_right(models, tmp_path):
    x = read_idx(DATA / "t10k-images-idx3-ubyte.gz")[:16].astype(np.float32).reshape(16, 1, 28, 28) / 255.0
    want = mnist_cnn_forward(read_safetensors(models / "fashion_mnist" / "1" / "model.safetensors"),
                             x.astype(np.float64))
    env = {"BEAM_BUDGET": "1", "KILN_CACHE_DIR": str(tmp_path / "cache")}
    port = free_port()
    server = Kilnd(models, ["--beam=1", f"--metrics-port={port}"], env=env)
    try:
        client = grpcclient.InferenceServerClient(url=server.url)
        t0 = time.monotonic()
        np.testing.assert_allclose(infer(client, x[:8]), want[:8], rtol=1e-3, atol=1e-3)
        first_s = time.monotonic() - t0
        m = beam_metrics(port)
        assert m["kiln_beam_pending"] > 0, m  # searching in the background, not before answering
        generation = m["kiln_beam_generation"]
        deadline = time.monotonic() + 240
        while True:
            np.testing.assert_allclose(infer(client, x[8:]), want[8:], rtol=1e-3, atol=1e-3)
            m = beam_metrics(port)
            if m["kiln_beam_pending"] == 0 and m["kiln_beam_generation"] > generation:
                break
            assert time.monotonic() < deadline, f"searches did not drain: {m}"
            time.sleep(0.5)
        assert m["kiln_beam_searches_total"] > 0, m
        # After the swap: tuned kernels (a new trace, then its replays), still the numpy logits.
        for _ in range(3):
            np.testing.assert_allclose(infer(client, x[:8]), want[:8], rtol=1e-3, atol=1e-3)
        assert first_s < 30, f"the first request waited {first_s:.1f} s (for searches?)"
        client.close()
    finally:
        assert server.stop() == 0, server.logs()[-3000:]

    # A restart on the same cache file: every choice is found, nothing is searched.
    port = free_port()
    server = Kilnd(models, ["--beam=1", f"--metrics-port={port}"], env=env)
    try:
        client = grpcclient.InferenceServerClient(url=server.url)
        np.testing.assert_allclose(infer(client, x[:8]), want[:8], rtol=1e-3, atol=1e-3)
        m = beam_metrics(port)
        assert m.get("kiln_beam_searches_total", 0) == 0 and m["kiln_beam_pending"] == 0, m
        client.close()
    finally:
        assert server.stop() == 0, server.logs()[-3000:]
