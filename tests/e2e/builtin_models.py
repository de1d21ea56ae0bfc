"""Builtin-model fixtures shared by the e2e tests and tests/bench/serve_bench.py: random weights
for kiln_builtin's architectures written as safetensors (by a small writer here, not by kiln),
their model folders, and numpy forward passes of the same weights (the independent reference).

State-dict names are tinygrad's (beautiful_mnist's `layers` list; an MLP's Linear layers at
even indices)."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np

_DTYPES = {np.dtype(np.float32): "F32"}


def save_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": _DTYPES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _uniform(rng, shape, fan_in):
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def mnist_cnn_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = {}
    for i, (o, c, k) in {0: (32, 1, 5), 2: (32, 32, 5), 6: (64, 32, 3), 8: (64, 64, 3)}.items():
        w[f"layers.{i}.weight"] = _uniform(rng, (o, c, k, k), c * k * k)
        w[f"layers.{i}.bias"] = _uniform(rng, (o,), c * k * k)
    for i, c in {4: 32, 10: 64}.items():  # BatchNorm: non-trivial running statistics
        w[f"layers.{i}.weight"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        w[f"layers.{i}.bias"] = rng.uniform(-0.5, 0.5, c).astype(np.float32)
        w[f"layers.{i}.running_mean"] = rng.uniform(-0.2, 0.2, c).astype(np.float32)
        w[f"layers.{i}.running_var"] = rng.uniform(0.5, 2.0, c).astype(np.float32)
    w["layers.13.weight"] = _uniform(rng, (10, 576), 576)
    w["layers.13.bias"] = _uniform(rng, (10,), 576)
    return w


def mlp_weights(sizes: list[int], seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = {}
    for j, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
        w[f"layers.{2 * j}.weight"] = _uniform(rng, (o, i), i)
        w[f"layers.{2 * j}.bias"] = _uniform(rng, (o,), i)
    return w


def _conv(x, w, b):
    k = w.shape[-1]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w, optimize=True) + b[None, :, None, None]


def _bn(x, w, i, eps=1e-5):
    g, b = w[f"layers.{i}.weight"], w[f"layers.{i}.bias"]
    m, v = w[f"layers.{i}.running_mean"], w[f"layers.{i}.running_var"]
    s = (1, -1, 1, 1)
    return (x - m.reshape(s)) / np.sqrt(v.reshape(s) + eps) * g.reshape(s) + b.reshape(s)


def _pool(x):
    n, c, h, w_ = x.shape
    return x[:, :, : h // 2 * 2, : w_ // 2 * 2].reshape(n, c, h // 2, 2, w_ // 2, 2).max(axis=(3, 5))


def mnist_cnn_forward(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    relu = lambda t: np.maximum(t, 0)  # noqa: E731
    x = relu(_conv(x, w["layers.0.weight"], w["layers.0.bias"]))
    x = relu(_conv(x, w["layers.2.weight"], w["layers.2.bias"]))
    x = _pool(_bn(x, w, 4))
    x = relu(_conv(x, w["layers.6.weight"], w["layers.6.bias"]))
    x = relu(_conv(x, w["layers.8.weight"], w["layers.8.bias"]))
    x = _pool(_bn(x, w, 10)).reshape(x.shape[0], -1)
    return x @ w["layers.13.weight"].T + w["layers.13.bias"]


def mlp_forward(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    n = len(w) // 2
    for j in range(n):
        x = x @ w[f"layers.{2 * j}.weight"].T + w[f"layers.{2 * j}.bias"]
        if j < n - 1:
            x = np.maximum(x, 0)
    return x


def write_builtin_model(repo: Path, name: str, architecture: str, weights: dict,
                        input_dims: list[int], output_dims: list[int], max_batch_size: int,
                        max_queue_size: int = 0) -> None:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    save_safetensors(folder / "1" / "model.safetensors", weights)
    queue = (f"dynamic_batching {{ default_queue_policy {{ max_queue_size: {max_queue_size} }} }}\n"
             if max_queue_size else "")
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "kiln_builtin"\nmax_batch_size: {max_batch_size}\n'
        f'input [{{ name: "INPUT" data_type: TYPE_FP32 dims: {input_dims} }}]\n'
        f'output [{{ name: "OUTPUT" data_type: TYPE_FP32 dims: {output_dims} }}]\n'
        f'parameters {{ key: "architecture" value {{ string_value: "{architecture}" }} }}\n'
        + queue)


MLP_SIZES = [20, 32, 16, 5]


def make_repo(repo: Path) -> dict[str, dict]:
    """mnist (mnist_cnn, max batch 8), mlp (20-32-16-5, max batch 4), mnist_q1 (queue of 1)."""
    cnn = mnist_cnn_weights()
    mlp = mlp_weights(MLP_SIZES)
    write_builtin_model(repo, "mnist", "mnist_cnn", cnn, [1, 28, 28], [10], 8)
    write_builtin_model(repo, "mnist_q1", "mnist_cnn", cnn, [1, 28, 28], [10], 8, max_queue_size=1)
    write_builtin_model(repo, "mlp", "mlp", mlp, [MLP_SIZES[0]], [MLP_SIZES[-1]], 4)
    return {"mnist": cnn, "mlp": mlp}


def read_idx(path: Path) -> np.ndarray:
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], np.float32).reshape(info["shape"])
    return out
