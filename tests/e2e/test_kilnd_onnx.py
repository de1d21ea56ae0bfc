"""ONNX models served by kilnd from a Triton-style repository, driven by the stock tritonclient (gRPC and HTTP).

The repository holds kiln's Fashion-MNIST CNN exported to ONNX (a partial config: platform onnxruntime_onnx and
max_batch_size only), the same weights as the kiln_builtin fashion_mnist model, a small model without any
config.pbtxt, one configured with Triton's `backend: "onnxruntime"`, and seven bad models. Outputs are compared with
onnxruntime on the same inputs; the bad models are load errors with clear reasons while kilnd keeps serving.
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from kilnd_launcher import Kilnd
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_model(path: Path, **kw) -> None:
    """y = relu(x @ w + b), x (N, 4) float32, dynamic batch."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.linspace(-1, 1, 12).astype(np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [0.5, -0.25, 0.0])
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", kw.get("opset", 17))])
    m.ir_version = kw.get("ir", 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(path))


def write_bad_models(repo: Path) -> dict[str, str]:
    """Seven broken models; returns name -> words the load error must contain."""
    cfg = 'platform: "onnxruntime_onnx"\n'
    expect = {}

    def folder(name: str) -> Path:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(cfg)
        return repo / name / "1" / "model.onnx"

    tiny_model(repo / "tmp_tiny.onnx")
    data = (repo / "tmp_tiny.onnx").read_bytes()
    folder("bad_truncated").write_bytes(data[: len(data) // 2])
    expect["bad_truncated"] = "not a valid ONNX model"
    tiny_model(folder("bad_ir99"), ir=99)
    expect["bad_ir99"] = "IR version 99 is not supported"
    m = onnx.load(str(repo / "tmp_tiny.onnx"))
    m.graph.node[2].op_type = "FancyNewOp"
    onnx.save(m, str(folder("bad_unknown_op")))
    expect["bad_unknown_op"] = "FancyNewOp"
    m = onnx.load(str(repo / "tmp_tiny.onnx"))
    m.graph.node[0].input[0] = "y"  # MatMul reads Relu's output: a cycle
    onnx.save(m, str(folder("bad_cyclic")))
    expect["bad_cyclic"] = "cycle"
    m = onnx.load(str(repo / "tmp_tiny.onnx"))
    w = m.graph.initializer[0]
    w.ClearField("float_data")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="../../secret.bin")
    onnx.save(m, str(folder("bad_external_escape")))
    (repo / "secret.bin").write_bytes(b"\0" * 48)
    expect["bad_external_escape"] = "must not leave the model's folder"
    m = onnx.load(str(repo / "tmp_tiny.onnx"))
    m.graph.initializer[1].dims[0] = 1 << 40
    onnx.save(m, str(folder("bad_huge_dim")), save_as_external_data=False)
    expect["bad_huge_dim"] = "has more than"
    m = onnx.load(str(repo / "tmp_tiny.onnx"))
    w = m.graph.initializer[0]
    w.raw_data = np.zeros(5, np.float32).tobytes()
    w.ClearField("float_data")
    onnx.save(m, str(folder("bad_short_initializer")))
    expect["bad_short_initializer"] = "needs 48"
    (repo / "tmp_tiny.onnx").unlink()
    return expect


def read_idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    repo = tmp_path_factory.mktemp("onnx_repo")
    # the CNN: exported by Debian's torch from the fashion_mnist weights; a partial config
    (repo / "cnn_onnx" / "1").mkdir(parents=True)
    r = subprocess.run(["/usr/bin/python3", str(REPO_ROOT / "tests/onnx/export_models.py"), "cnn", "--weights",
                        str(REPO_ROOT / "models/fashion_mnist/1/model.safetensors"), "--out",
                        str(repo / "cnn_onnx" / "1" / "model.onnx")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (repo / "cnn_onnx" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 64\n')
    shutil.copytree(REPO_ROOT / "models" / "fashion_mnist", repo / "fashion_mnist")
    tiny_model(repo / "noconfig" / "1" / "model.onnx")
    tiny_model(repo / "backend_spelling" / "1" / "model.onnx")
    (repo / "backend_spelling" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 8\ninput [{ name: "x" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [3] }]\n')
    bad = write_bad_models(repo)
    port = _free_port()
    server = Kilnd(repo, [f"--metrics-port={port}"])
    server.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield repo, server, bad
    server.stop()


def test_missing_config_is_completed_from_the_graph(setup):
    repo, server, _ = setup
    client = grpcclient.InferenceServerClient(server.url)
    cfg = client.get_model_config("noconfig", as_json=True)["config"]
    assert cfg["platform"] == "onnxruntime_onnx"
    assert int(cfg["max_batch_size"]) == 4  # every input/output starts with the symbolic dim N
    assert [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in cfg["input"]] == [("x", "TYPE_FP32", [4])]
    assert [(o["name"], o["data_type"], [int(d) for d in o["dims"]]) for o in cfg["output"]] == [("y", "TYPE_FP32", [3])]
    partial = client.get_model_config("cnn_onnx", as_json=True)["config"]
    assert int(partial["max_batch_size"]) == 64
    assert [int(d) for d in partial["input"][0]["dims"]] == [1, 28, 28]
    assert [int(d) for d in partial["output"][0]["dims"]] == [10]


@pytest.mark.parametrize("name", ["noconfig", "backend_spelling"])
def test_tiny_model_grpc_and_http_match_onnxruntime(setup, name):
    repo, server, _ = setup
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    want = ort.InferenceSession(str(repo / name / "1" / "model.onnx")).run(None, {"x": x})[0]
    g = grpcclient.InferenceServerClient(server.url)
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    got = g.infer(name, [inp]).as_numpy("y")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    h = httpclient.InferenceServerClient(server.http_url)
    hin = httpclient.InferInput("x", list(x.shape), "FP32")
    hin.set_data_from_numpy(x)
    got_http = h.infer(name, [hin]).as_numpy("y")
    np.testing.assert_allclose(got_http, want, rtol=1e-5, atol=1e-6)


def test_cnn_onnx_matches_onnxruntime_and_builtin_accuracy(setup):
    repo, server, _ = setup
    d = "/usr/share/datasets/fashion-mnist"
    images = read_idx(f"{d}/t10k-images-idx3-ubyte.gz").astype(np.float32).reshape(-1, 1, 28, 28) / 255.0
    labels = read_idx(f"{d}/t10k-labels-idx1-ubyte.gz")
    sess = ort.InferenceSession(str(repo / "cnn_onnx" / "1" / "model.onnx"))
    client = grpcclient.InferenceServerClient(server.url)
    correct = {"cnn_onnx": 0, "fashion_mnist": 0}
    for start in range(0, len(images), 64):
        batch = images[start:start + 64]
        for model, iname, oname in (("cnn_onnx", "INPUT", "OUTPUT"), ("fashion_mnist", "INPUT", "OUTPUT")):
            inp = grpcclient.InferInput(iname, list(batch.shape), "FP32")
            inp.set_data_from_numpy(batch)
            out = client.infer(model, [inp]).as_numpy(oname)
            correct[model] += int((out.argmax(1) == labels[start:start + 64]).sum())
            if model == "cnn_onnx" and start < 64 * 4:
                np.testing.assert_allclose(out, sess.run(None, {"INPUT": batch})[0], rtol=1e-3, atol=1e-4)
    assert correct["cnn_onnx"] == correct["fashion_mnist"], correct
    assert abs(correct["cnn_onnx"] / len(images) - 0.8973) < 0.0005, correct


def test_cnn_onnx_one_trace_for_every_batch_size(setup):
    """The exported CNN's input and output share the symbolic first dim: batch sizes 1..64 (max_batch_size) all replay
    the model's one JIT trace (a symbolic batch dim), each answer close to onnxruntime's."""
    repo, server, _ = setup
    sess = ort.InferenceSession(str(repo / "cnn_onnx" / "1" / "model.onnx"))
    client = grpcclient.InferenceServerClient(server.url)
    rng = np.random.default_rng(11)
    for n in range(1, 65):
        x = rng.random((n, 1, 28, 28), dtype=np.float32)
        inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer("cnn_onnx", [inp]).as_numpy("OUTPUT")
        assert out.shape == (n, 10)
        np.testing.assert_allclose(out, sess.run(None, {"INPUT": x})[0], rtol=1e-3, atol=1e-4)
    with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
        text = r.read().decode()
    created = [s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "kiln_jit_traces_created_total" and s.labels.get("model") == "cnn_onnx"]
    assert created == [1.0], created


def test_bad_models_are_load_errors_and_kilnd_keeps_serving(setup):
    repo, server, bad = setup
    client = grpcclient.InferenceServerClient(server.url)
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    for name, words in bad.items():
        entry = index[name]
        assert entry.get("state") == "UNAVAILABLE", entry
        assert words in entry.get("reason", ""), (name, entry)
        assert not client.is_model_ready(name)
    # an explicit load reports the same error and the daemon still answers
    with pytest.raises(Exception) as e:
        client.load_model("bad_unknown_op")
    assert "FancyNewOp" in str(e.value)
    assert client.is_server_live() and client.is_model_ready("noconfig")
    x = np.ones((1, 4), np.float32)
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    assert client.infer("noconfig", [inp]).as_numpy("y").shape == (1, 3)
