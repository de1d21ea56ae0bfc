"""kiln_builtin models (mnist_cnn, mlp) served by a real kilnd: outputs equal a numpy forward
pass of the same random weights; the JIT trace cache replays repeated batch sizes (metrics);
ModelStreamInfer with tritonclient's start_stream / async_stream_infer (per-request errors stay
on the open stream); the bounded per-model queue; the queue/pending/compile/memory metrics."""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from builtin_models import MLP_SIZES, make_repo, mlp_forward, mnist_cnn_forward
from conftest import Kilnd
from test_kilnd_metrics import _free_port, scrape, total


@pytest.fixture(scope="module")
def repo():
    path = Path(tempfile.mkdtemp(prefix="kiln_builtin_"))
    weights = make_repo(path)
    yield path, weights
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def server(repo):
    port = _free_port()
    s = Kilnd(repo[0], [f"--metrics-port={port}"])
    s.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def bclient(server):
    c = grpcclient.InferenceServerClient(url=server.url)
    yield c
    c.close()


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 1, 28, 28), dtype=np.float32)


def infer(client, model: str, x: np.ndarray, request_id: str = "") -> np.ndarray:
    inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp], request_id=request_id).as_numpy("OUTPUT")


def test_models_ready_with_metadata(bclient):
    for name in ("mnist", "mlp", "mnist_q1"):
        assert bclient.is_model_ready(name)
    md = bclient.get_model_metadata("mnist")
    assert md.platform == "kiln_builtin"
    assert list(md.inputs[0].shape) == [-1, 1, 28, 28]
    assert list(md.outputs[0].shape) == [-1, 10]


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_mnist_cnn_matches_numpy(bclient, repo, batch):
    x = images(batch, seed=batch)
    got = infer(bclient, "mnist", x)
    want = mnist_cnn_forward(repo[1]["mnist"], x)
    assert got.shape == (batch, 10) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_mlp_sizes_from_weights_match_numpy(bclient, repo):
    md = bclient.get_model_metadata("mlp")
    assert list(md.inputs[0].shape) == [-1, MLP_SIZES[0]]
    x = np.random.default_rng(7).standard_normal((4, MLP_SIZES[0])).astype(np.float32)
    got = infer(bclient, "mlp", x)
    np.testing.assert_allclose(got, mlp_forward(repo[1]["mlp"], x), rtol=1e-4, atol=1e-5)


def test_repeated_batch_size_replays_trace(server, bclient, repo):
    # Two requests of 2 rows: the model's one trace (a symbolic batch dim) has run and been captured.
    for seed in (1, 2):
        infer(bclient, "mnist", images(2, seed=seed))
    before = scrape(server.metrics_url)
    x = images(5, seed=11)
    want = mnist_cnn_forward(repo[1]["mnist"], x)
    for i in range(6):  # a new batch size: 12 replays of the same trace
        np.testing.assert_allclose(infer(bclient, "mnist", x), want, rtol=1e-4, atol=1e-4)
        x2 = images(5, seed=100 + i)  # new data through the same trace
        np.testing.assert_allclose(infer(bclient, "mnist", x2),
                                   mnist_cnn_forward(repo[1]["mnist"], x2), rtol=1e-4, atol=1e-4)
    after = scrape(server.metrics_url)

    def delta(name):
        return total(after, name) - total(before, name)

    assert delta("kiln_jit_cache_misses") == 0  # no new signature: batch 5 is bound at replay
    assert delta("kiln_jit_cache_hits") == 12
    assert delta("kiln_kernel_launches") > 0  # replayed launches are counted
    assert delta("kiln_kernel_duration_seconds_count") == 0  # ... but not timed


def test_stream_infer_with_errors_keeps_stream_open(bclient, repo):
    results: queue.Queue = queue.Queue()
    bclient.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        sent = {}
        for i in range(6):
            batch = 1 + i % 3
            x = images(batch, seed=200 + i)
            if i in (1, 4):  # wrong item shape: a per-request error
                x = np.zeros((batch, 1, 28, 27), dtype=np.float32)
            inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            bclient.async_stream_infer("mnist", [inp], request_id=f"r{i}")
            sent[f"r{i}"] = x
        got = [results.get(timeout=120) for _ in range(6)]
    finally:
        bclient.stop_stream()
    errors = [e for _, e in got if e is not None]
    oks = [r for r, e in got if e is None]
    assert len(errors) == 2 and len(oks) == 4
    for e in errors:
        assert "inputs[0].shape[3]" in e.message() and "expects 28, got 27" in e.message()
    for r in oks:
        rid = r.get_response().id
        np.testing.assert_allclose(r.as_numpy("OUTPUT"), mnist_cnn_forward(repo[1]["mnist"], sent[rid]),
                                   rtol=1e-4, atol=1e-4)
    assert sorted(r.get_response().id for r in oks) == ["r0", "r2", "r3", "r5"]
    # The daemon serves unary calls as before.
    assert infer(bclient, "mnist", images(1, 0)).shape == (1, 10)


def test_bounded_queue_rejects_with_limit(server, bclient):
    before = scrape(server.metrics_url)
    n = 16
    done: queue.Queue = queue.Queue()
    x = images(8, seed=3)
    inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    for i in range(n):
        bclient.async_infer("mnist_q1", [inp], callback=lambda result, error: done.put((result, error)))
    got = [done.get(timeout=300) for _ in range(n)]
    rejected = [e for _, e in got if e is not None]
    ok = [r for r, e in got if e is None]
    assert len(ok) + len(rejected) == n and len(ok) >= 1 and len(rejected) >= 1
    for e in rejected:
        # Triton's answer to a full dynamic-batching queue: UNAVAILABLE, naming the limit.
        assert e.status() == "StatusCode.UNAVAILABLE"
        assert "max_queue_size 1" in e.message()
    after = scrape(server.metrics_url)
    mv = {"model": "mnist_q1", "version": "1"}
    assert total(after, "nv_inference_request_failure", reason="REJECTED", **mv) - \
        total(before, "nv_inference_request_failure", reason="REJECTED", **mv) == len(rejected)
    assert total(after, "nv_inference_request_success", **mv) - \
        total(before, "nv_inference_request_success", **mv) == len(ok)
    assert total(after, "nv_inference_pending_request_count", **mv) == 0
    assert infer(bclient, "mnist_q1", images(2, 1)).shape == (2, 10)


def test_queue_compile_memory_metrics(server, bclient):
    before = scrape(server.metrics_url)
    for b in (1, 2, 1):
        infer(bclient, "mlp", np.ones((b, MLP_SIZES[0]), dtype=np.float32))
    after = scrape(server.metrics_url)
    mv = {"model": "mlp", "version": "1"}

    def delta(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    assert delta("kiln_queue_duration_seconds_count", **mv) == 3
    assert delta("nv_inference_request_success", **mv) == 3
    assert delta("nv_inference_queue_duration_us", **mv) >= 0
    assert total(after, "nv_inference_queue_duration_us", **mv) > 0
    assert total(after, "nv_inference_pending_request_count", **mv) == 0
    assert total(after, "kiln_compile_duration_seconds_count") >= 1
    assert total(after, "kiln_device_memory_bytes", device="CPU") > 0
    stats = bclient.get_inference_statistics("mlp", "1")
    s = stats.model_stats[0].inference_stats
    assert s.success.count >= 3 and s.queue.count == s.success.count
