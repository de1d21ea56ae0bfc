"""Triton's classification extension (issue #25 item 4): a requested output with
`class_count=k` (tritonclient's spelling of the output parameter `classification`) comes back as
BYTES "value:index" strings of the k largest values per batch item, over gRPC and REST. The
expected strings are built from numpy's argsort of the raw output of the same request."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from kilnd_launcher import Kilnd

MODELS = Path(os.environ.get("KILN_MODELS", Path(__file__).resolve().parents[2] / "models"))


@pytest.fixture(scope="module")
def server():
    s = Kilnd(MODELS, ["--metrics-port=-1"])
    yield s
    assert s.stop() == 0


def expected(raw: np.ndarray, k: int) -> list[list[bytes]]:
    rows = []
    for row in raw.reshape(raw.shape[0], -1):
        order = np.argsort(-row, kind="stable")[:k]
        rows.append([f"{float(row[i]):f}:{i}".encode() for i in order])
    return rows


def strings(array) -> list[list[bytes]]:
    """BYTES elements as bytes (gRPC gives bytes; REST's JSON gives str)."""
    return [[c if isinstance(c, bytes) else str(c).encode() for c in row] for row in array]


def inputs(module, a, b):
    out = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        t = module.InferInput(name, list(value.shape), "FP32")
        t.set_data_from_numpy(value)
        out.append(t)
    return out


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_class_count_returns_the_top_k_strings(server, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    client = module.InferenceServerClient(server.url if protocol == "grpc" else server.http_url)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 16), dtype=np.float32), rng.standard_normal((3, 16), dtype=np.float32)
    raw = client.infer("add_sub", inputs(module, a, b)).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(raw, a + b)
    kw = {} if protocol == "grpc" else {"binary_data": False}
    requested = [module.InferRequestedOutput("OUTPUT0", class_count=4, **kw),
                 module.InferRequestedOutput("OUTPUT1", **kw)]
    result = client.infer("add_sub", inputs(module, a, b), outputs=requested)
    classes = result.as_numpy("OUTPUT0")
    assert classes.shape == (3, 4)
    assert strings(classes) == expected(raw, 4)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)  # not classified
    # k above the element count: every element, in order
    whole = client.infer("add_sub", inputs(module, a, b),
                         outputs=[module.InferRequestedOutput("OUTPUT0", class_count=100, **kw)])
    assert strings(whole.as_numpy("OUTPUT0")) == expected(raw, 16)


def test_fashion_mnist_top_class_is_the_argmax(server):
    client = grpcclient.InferenceServerClient(server.url)
    x = np.random.default_rng(3).random((2, 1, 28, 28), dtype=np.float32)
    t = grpcclient.InferInput("INPUT", [2, 1, 28, 28], "FP32")
    t.set_data_from_numpy(x)
    logits = client.infer("fashion_mnist", [t]).as_numpy("OUTPUT")
    top = client.infer("fashion_mnist", [t], outputs=[grpcclient.InferRequestedOutput("OUTPUT", class_count=1)])
    got = [bytes(r[0]).decode().split(":") for r in top.as_numpy("OUTPUT")]
    assert [int(i) for _, i in got] == list(np.argmax(logits, axis=1))
    assert [v for v, _ in got] == [f"{float(logits[r].max()):f}" for r in range(2)]
