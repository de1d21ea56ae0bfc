#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/seed-*) and dictionaries
(tests/fuzz/dict/*.dict) from the project's own inputs: the bundled model repository (models/),
graphs recorded by the Python client (clients/python, kiln.Tensor), KServe requests as the e2e
tests send them (tritonclient's protos, the REST bodies of tests/e2e/test_kilnd_rest.py), the
nn/state test's reference safetensors writer (tests/engine/nn/state/state_ref.py), the first items
of the Fashion-MNIST files the training tests use, GGUF files written by llama.cpp's `gguf` package
(the reference of tests/engine/nn/gguf_test), and UOp text printed by the engine (DEBUG=5
kernel ASTs, passed as files with --uop). Dictionaries come from ops.def, dtype.cc and
model_config.proto, so they follow the sources.

  .venv/bin/python tests/fuzz/make_seeds.py [--uop FILE...]

Deterministic: the same sources give the same files. Crash regressions (crash-*) are never touched.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import re
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "tests" / "engine" / "nn" / "state"))

from google.protobuf import json_format, text_format  # noqa: E402
from kiln.kserve import grpc_service_pb2, model_config_pb2  # noqa: E402
from kiln.tensor import Tensor  # noqa: E402
from kiln.v1 import graph_pb2  # noqa: E402

CORPUS = ROOT / "tests" / "fuzz" / "corpus"
DICT = ROOT / "tests" / "fuzz" / "dict"
FASHION = Path("/usr/share/datasets/fashion-mnist")


def put(target: str, name: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob(f"seed-{name}"):
        old.unlink()
    (d / f"seed-{name}").write_bytes(data)


def clear_seeds(target: str) -> None:
    d = CORPUS / target
    if d.is_dir():
        for f in d.glob("seed-*"):
            f.unlink()


# ** kiln.v1.Graph (graph) **

def graphs() -> dict[str, graph_pb2.Graph]:
    out = {}
    for model in ("add_sub", "reduce_sum"):
        g = graph_pb2.Graph()
        text_format.Parse((ROOT / "models" / model / "1" / "model.graph.pbtxt").read_text(), g)
        out[f"model-{model}"] = g
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    w = Tensor(np.ones((4, 2), dtype=np.float32))
    out["matmul-relu"] = (x @ w).relu()._graph()[0]
    out["softmax"] = x.softmax(axis=-1)._graph()[0]
    out["pad-shrink-getitem"] = x.pad(((1, 0), (0, 2))).shrink(((0, 3), (1, 5)))[1:, 2]._graph()[0]
    out["permute-expand-max"] = x.reshape(3, 1, 4).expand(3, 2, 4).permute(2, 0, 1).max(axis=0)._graph()[0]
    i = Tensor(np.array([1, -2, 3], dtype=np.int32))
    out["int-where-cast"] = ((i < 0).where(i * 2, i) + 1).cast(np.float16)._graph()[0]
    out["log-softmax-mean-var"] = (x.log_softmax(axis=0).mean() + x.var(axis=1).sum())._graph()[0]
    out["sigmoid-tanh-pow"] = (x.sigmoid() * x.tanh() + x.abs() ** 2).min(axis=1)._graph()[0]
    dyn = graph_pb2.Graph()
    text_format.Parse((ROOT / "models" / "reduce_sum" / "1" / "model.graph.pbtxt").read_text(), dyn)
    out["dynamic-dims"] = dyn
    return out


# ** ModelInferRequest (grpc_infer) **

def infer_requests() -> dict[str, grpc_service_pb2.ModelInferRequest]:
    out = {}
    r = grpc_service_pb2.ModelInferRequest(model_name="add_sub", id="req-1")
    for name in ("INPUT0", "INPUT1"):
        r.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        r.raw_input_contents.append(np.arange(16, dtype=np.float32).tobytes())
    r.outputs.add(name="OUTPUT1")
    out["add_sub-raw"] = r
    r = grpc_service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        t = r.inputs.add(name=name, datatype="FP32", shape=[2, 16])
        t.contents.fp32_contents.extend([0.5 * k for k in range(32)])
    out["add_sub-typed-batch2"] = r
    r = grpc_service_pb2.ModelInferRequest(model_name="reduce_sum")
    r.inputs.add(name="X", datatype="FP32", shape=[3, 8])
    r.raw_input_contents.append(np.ones((3, 8), dtype=np.float32).tobytes())
    out["reduce_sum-raw"] = r
    r = grpc_service_pb2.ModelInferRequest(model_name="fashion_mnist")
    r.inputs.add(name="INPUT", datatype="FP32", shape=[1, 1, 28, 28])
    r.raw_input_contents.append(np.zeros((1, 1, 28, 28), dtype=np.float32).tobytes())
    out["fashion_mnist-raw"] = r
    # all_types (fuzz_configs.h): every datatype, BYTES framing, typed contents.
    r = grpc_service_pb2.ModelInferRequest(model_name="all_types")
    raws = [
        ("B", "BOOL", [1, 2], np.array([[True, False]]).tobytes()),
        ("U8", "UINT8", [1, 2, 3], bytes(range(6))),
        ("F16", "FP16", [1, 2], np.array([[1.5, -2.0]], dtype=np.float16).tobytes()),
        ("BF16", "BF16", [1, 2], b"\x80\x3f\x00\x40"),
        ("I32", "INT32", [1, 2, 2], np.array([1, -2, 3, -4], dtype=np.int32).tobytes()),
        ("S", "BYTES", [1, 2], struct.pack("<I", 3) + b"abc" + struct.pack("<I", 0)),
    ]
    for name, dt, shape, data in raws:
        r.inputs.add(name=name, datatype=dt, shape=shape)
        r.raw_input_contents.append(data)
    r.outputs.add(name="OUT_S")
    out["all_types-raw"] = r
    r = grpc_service_pb2.ModelInferRequest(model_name="all_types")
    t = r.inputs.add(name="B", datatype="BOOL", shape=[2, 1])
    t.contents.bool_contents.extend([True, False])
    t = r.inputs.add(name="U8", datatype="UINT8", shape=[2, 2, 1])
    t.contents.uint_contents.extend([1, 2, 3, 4])
    t = r.inputs.add(name="I64", datatype="INT64", shape=[2, 1])
    t.contents.int64_contents.extend([-1, 2**40])
    t = r.inputs.add(name="U64", datatype="UINT64", shape=[2, 1])
    t.contents.uint64_contents.extend([0, 2**63])
    t = r.inputs.add(name="F64", datatype="FP64", shape=[2, 1])
    t.contents.fp64_contents.extend([1e-300, -2.5])
    t = r.inputs.add(name="S", datatype="BYTES", shape=[2, 1])
    t.contents.bytes_contents.extend([b"x", b""])
    out["all_types-typed"] = r
    return out


# ** REST bodies (rest_infer): byte 0 = config index, bytes 1..4 = header length (LE u32) **

CONFIG_INDEX = {"add_sub": 0, "reduce_sum": 1, "fashion_mnist": 2, "all_types": 3}
NO_HEADER = 0xFFFFFFFF


def rest(model: str, body: bytes, header_length: int = NO_HEADER) -> bytes:
    return bytes([CONFIG_INDEX[model]]) + struct.pack("<I", header_length) + body


def rest_bodies() -> dict[str, bytes]:
    out = {}
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    body = {"id": "r1", "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a.tolist()},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": a.flatten().tolist()}],
        "outputs": [{"name": "OUTPUT0"}], "parameters": {"binary_data_output": False}}
    out["add_sub-json"] = rest("add_sub", json.dumps(body).encode())
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
         "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32",
         "parameters": {"binary_data_size": 64}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                    {"name": "OUTPUT1", "parameters": {"binary_data": False}}]}).encode()
    out["add_sub-binary"] = rest("add_sub", header + a.tobytes() * 2, len(header))
    x = np.ones((2, 8), dtype=np.float32)
    out["reduce_sum-json"] = rest("reduce_sum", json.dumps({"inputs": [
        {"name": "X", "shape": [2, 8], "datatype": "FP32", "data": x.tolist()}]}).encode())
    out["reduce_sum-raw-body"] = rest("reduce_sum", x.tobytes()[:32], 0)
    out["fashion_mnist-raw-body"] = rest("fashion_mnist", np.zeros(784, np.float32).tobytes(), 0)
    out["all_types-json"] = rest("all_types", json.dumps({"inputs": [
        {"name": "B", "shape": [1, 2], "datatype": "BOOL", "data": [[True, False]]},
        {"name": "U8", "shape": [1, 2, 1], "datatype": "UINT8", "data": [0, 255]},
        {"name": "I8", "shape": [1, 3], "datatype": "INT8", "data": [-128, 0, 127]},
        {"name": "U64", "shape": [1, 1], "datatype": "UINT64", "data": [18446744073709551615]},
        {"name": "F64", "shape": [1, 1], "datatype": "FP64", "data": [1e-300]},
        {"name": "S", "shape": [1, 2], "datatype": "BYTES", "data": ["hello", "\u00e9"]}],
        "outputs": [{"name": "OUT_S", "parameters": {"binary_data": False}}]}).encode())
    f16 = np.array([1.5, -2.0], dtype=np.float16).tobytes()
    header = json.dumps({"inputs": [
        {"name": "B", "shape": [1, 1], "datatype": "BOOL", "data": [True]},
        {"name": "U8", "shape": [1, 2, 1], "datatype": "UINT8", "data": [1, 2]},
        {"name": "F16", "shape": [1, 2], "datatype": "FP16", "parameters": {"binary_data_size": 4}},
        {"name": "S", "shape": [1, 1], "datatype": "BYTES",
         "parameters": {"binary_data_size": 7}}]}).encode()
    out["all_types-binary"] = rest("all_types", header + f16 + struct.pack("<I", 3) + b"abc",
                                   len(header))
    return out


# ** config.pbtxt / JSON ModelConfig (model_config) **

ALL_TYPES_CONFIG = re.search(r'R"pb\((.*?)\)pb"',
                             (ROOT / "tests/fuzz/fuzz_configs.h").read_text(), re.S).group(1)


def configs() -> dict[str, bytes]:
    out = {}
    texts = {m: (ROOT / "models" / m / "config.pbtxt").read_text()
             for m in ("add_sub", "reduce_sum", "fashion_mnist")}
    texts["all_types"] = ALL_TYPES_CONFIG
    for name, text in texts.items():
        out[f"{name}-pbtxt"] = text.encode()
        msg = text_format.Parse(text, model_config_pb2.ModelConfig())
        out[f"{name}-json"] = json_format.MessageToJson(msg, indent=None).encode()
    # A REST repository load body (POST /v2/repository/models/<m>/load) carrying a config.
    out["load-body"] = json.dumps({"parameters": {"config": out["add_sub-json"].decode()}}).encode()
    return out


# ** ONNX models (onnx) **

def onnx_models() -> dict[str, bytes]:
    """Small models built with onnx.helper, each covering a part of the loader and the runner:
    initializers (raw and typed), symbolic dims, nested graphs (If, Loop), sequences, attributes
    of every kind, quantization, shape arithmetic folded on the host, external data (refused
    without a folder)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    def model(nodes, inputs, outputs, inits=(), opset=17, **kw):
        g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8, **kw)
        return m.SerializeToString()

    def vi(name, dtype, dims):
        return h.make_tensor_value_info(name, dtype, dims)

    rng = np.random.default_rng(0)
    w = nh.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = h.make_tensor("b", T.FLOAT, [3], [0.5, -1.0, 2.0])  # typed float_data
    out = {}
    out["mlp"] = model([h.make_node("MatMul", ["x", "w"], ["xw"]), h.make_node("Add", ["xw", "b"], ["y0"]),
                        h.make_node("Relu", ["y0"], ["y"])],
                       [vi("x", T.FLOAT, ["batch", 4])], [vi("y", T.FLOAT, ["batch", 3])], [w, b])
    k = nh.from_array(rng.standard_normal((2, 1, 3, 3)).astype(np.float32), "k")
    shape = nh.from_array(np.array([1, -1], dtype=np.int64), "shape")
    out["conv"] = model([
        h.make_node("Conv", ["img", "k"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1]),
        h.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Reshape", ["p", "shape"], ["f"]),
        h.make_node("Softmax", ["f"], ["s"], axis=-1)],
        [vi("img", T.FLOAT, [1, 1, 6, 6])], [vi("s", T.FLOAT, [1, 18])], [k, shape])
    out["shape_math"] = model([
        h.make_node("Shape", ["x"], ["sh"]),
        h.make_node("Gather", ["sh", "zero"], ["d0"], axis=0),
        h.make_node("Unsqueeze", ["d0", "zero1"], ["d0u"]),
        h.make_node("Concat", ["d0u", "minus1"], ["new"], axis=0),
        h.make_node("Reshape", ["x", "new"], ["r"]),
        h.make_node("Slice", ["r", "starts", "ends", "axes"], ["sl"]),
        h.make_node("Cast", ["sl"], ["y"], to=T.INT32),
        h.make_node("Transpose", ["y"], ["t"], perm=[1, 0])],
        [vi("x", T.FLOAT, [2, 3, 4])], [vi("t", T.INT32, [None, None])],
        [nh.from_array(np.array(0, dtype=np.int64), "zero"), nh.from_array(np.array([0], dtype=np.int64), "zero1"),
         nh.from_array(np.array([-1], dtype=np.int64), "minus1"),
         nh.from_array(np.array([1], dtype=np.int64), "starts"), nh.from_array(np.array([10], dtype=np.int64), "ends"),
         nh.from_array(np.array([1], dtype=np.int64), "axes")])
    then_g = h.make_graph([h.make_node("Neg", ["x"], ["t_out"])], "then", [], [vi("t_out", T.FLOAT, [3])])
    else_g = h.make_graph([h.make_node("Abs", ["x"], ["e_out"])], "else", [], [vi("e_out", T.FLOAT, [3])])
    out["if"] = model([h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                       h.make_node("Greater", ["s", "z"], ["cond"]),
                       h.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
                      [vi("x", T.FLOAT, [3])], [vi("y", T.FLOAT, [3])],
                      [nh.from_array(np.array(0, dtype=np.float32), "z")])
    body = h.make_graph([h.make_node("Add", ["acc_in", "one"], ["acc_out"]),
                         h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                        [vi("iter", T.INT64, []), vi("cond_in", T.BOOL, []), vi("acc_in", T.FLOAT, [2])],
                        [vi("cond_out", T.BOOL, []), vi("acc_out", T.FLOAT, [2])])
    out["loop"] = model([h.make_node("Loop", ["trip", "cond", "a"], ["final"], body=body)],
                        [vi("a", T.FLOAT, [2])], [vi("final", T.FLOAT, [2])],
                        [nh.from_array(np.array(3, dtype=np.int64), "trip"),
                         nh.from_array(np.array(True), "cond"), nh.from_array(np.ones(2, np.float32), "one")])
    out["sequence"] = model([h.make_node("SplitToSequence", ["x"], ["seq"], axis=0),
                             h.make_node("SequenceAt", ["seq", "idx"], ["y"])],
                            [vi("x", T.FLOAT, [4, 2])], [vi("y", T.FLOAT, [2])],
                            [nh.from_array(np.array(1, dtype=np.int64), "idx")])
    out["quant"] = model([h.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"]),
                          h.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"])],
                         [vi("x", T.FLOAT, [8])], [vi("y", T.FLOAT, [8])],
                         [nh.from_array(np.array(0.1, dtype=np.float32), "scale"),
                          nh.from_array(np.array(3, dtype=np.uint8), "zp")])
    out["attention"] = model([
        h.make_node("MatMul", ["q", "kt"], ["s"]), h.make_node("Div", ["s", "scale"], ["sd"]),
        h.make_node("Softmax", ["sd"], ["p"], axis=-1), h.make_node("MatMul", ["p", "v"], ["o"]),
        h.make_node("LayerNormalization", ["o", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)],
        [vi("q", T.FLOAT, ["b", "seq", 8]), vi("kt", T.FLOAT, ["b", 8, "seq"]), vi("v", T.FLOAT, ["b", "seq", 8])],
        [vi("y", T.FLOAT, ["b", "seq", 8])],
        [nh.from_array(np.array(2.8284, dtype=np.float32), "scale"), nh.from_array(np.ones(8, np.float32), "gamma"),
         nh.from_array(np.zeros(8, np.float32), "beta")])
    out["constant_attrs"] = model([
        h.make_node("Constant", [], ["c"], value=h.make_tensor("cv", T.INT64, [2], [1, 2])),
        h.make_node("Constant", [], ["f"], value_floats=[1.0, 2.5]),
        h.make_node("Expand", ["x", "c"], ["e"]),
        h.make_node("Where", ["m", "e", "zerof"], ["y"]),
        h.make_node("ArgMax", ["y"], ["am"], axis=1, keepdims=1, select_last_index=0),
        h.make_node("Pad", ["y", "pads"], ["pd"], mode="reflect")],
        [vi("x", T.FLOAT, [1, 2]), vi("m", T.BOOL, [1, 2])], [vi("am", T.INT64, [1, 1]), vi("pd", T.FLOAT, [1, 4])],
        [nh.from_array(np.array(0, dtype=np.float32), "zerof"),
         nh.from_array(np.array([0, 1, 0, 1], dtype=np.int64), "pads")])
    ext = onnx.TensorProto()
    ext.name, ext.data_type = "w", T.FLOAT
    ext.dims.extend([4, 3])
    ext.data_location = T.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", "48")):
        e = ext.external_data.add()
        e.key, e.value = key, value
    out["external"] = model([h.make_node("MatMul", ["x", "w"], ["y"])],
                            [vi("x", T.FLOAT, [1, 4])], [vi("y", T.FLOAT, [1, 3])], [ext])
    out["float16_opset13"] = model([h.make_node("Mul", ["x", "x"], ["y"]),
                                    h.make_node("ReduceMean", ["y"], ["m"], axes=[0], keepdims=1)],
                                   [vi("x", T.FLOAT16, [4, 2])], [vi("m", T.FLOAT16, [1, 2])], opset=13)
    return out


# ** safetensors, checkpoint manifests **

def safetensors_files(tmp: Path) -> dict[str, bytes]:
    import state_ref

    p = tmp / "ref.safetensors"
    state_ref.write(str(p))
    out = {"state_ref": p.read_bytes()}
    # A checkpoint as Trainer::SaveCheckpoint lays it out (SafeSave: largest item size first, then
    # by name; compact header padded to 8 with spaces; metadata as the job manager writes it).
    tensors = {"model.l1.weight": np.arange(6, dtype=np.float32).reshape(3, 2) / 8,
               "model.l1.bias": np.zeros(3, np.float32), "optim.t": np.array([3], np.int32),
               "optim.m.0": np.ones((3, 2), np.float32), "optim.b1_t": np.array(0.729, np.float32)}
    meta = {"data_rng": " ".join(str(v) for v in range(1, 11)), "format": "kiln-checkpoint-1",
            "job": "job-0001", "seed": "7", "step": "42"}
    out["checkpoint"] = kiln_layout(tensors, meta)
    return out


def kiln_layout(tensors: dict[str, np.ndarray], meta: dict[str, str]) -> bytes:
    dt = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    items = sorted(tensors.items(), key=lambda kv: (-kv[1].itemsize, kv[0]))
    parts = ['"__metadata__":{' + ",".join(f"{json.dumps(k)}:{json.dumps(v)}"
                                           for k, v in sorted(meta.items())) + "}"]
    off, blobs = 0, []
    for name, arr in items:
        data = np.ascontiguousarray(arr).tobytes()
        shape = ",".join(str(d) for d in arr.shape)
        parts.append(f'{json.dumps(name)}:{{"dtype":"{dt[arr.dtype]}","shape":[{shape}],'
                     f'"data_offsets":[{off},{off + len(data)}]}}')
        off += len(data)
        blobs.append(data)
    header = ("{" + ",".join(parts) + "}").encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    return struct.pack("<Q", len(header)) + header + b"".join(blobs)


def manifest(step: int, data: bytes) -> bytes:
    # checkpoint_manifest.cc FormatCheckpointManifest
    return (f"kiln-checkpoint 1\nstep {step}\nfile ckpt-{step:010d}.safetensors\n"
            f"bytes {len(data)}\nsha256 {hashlib.sha256(data).hexdigest()}\n").encode()


# ** IDX (idx): byte 0 = rank selector (0 any, 1 labels, 2 images) | 4 gzip **

def idx_files() -> dict[str, bytes]:
    images = gzip.decompress((FASHION / "t10k-images-idx3-ubyte.gz").read_bytes())
    labels = gzip.decompress((FASHION / "t10k-labels-idx1-ubyte.gz").read_bytes())
    img2 = struct.pack(">I", 0x803) + struct.pack(">III", 2, 28, 28) + images[16:16 + 2 * 784]
    lab2 = struct.pack(">I", 0x801) + struct.pack(">I", 2) + labels[8:10]
    return {"images-2": bytes([2]) + img2, "labels-2": bytes([1]) + lab2,
            "images-2-gz": bytes([2 | 4]) + gzip.compress(img2, mtime=0),
            "labels-2-gz-any": bytes([0]) + gzip.compress(lab2, mtime=0),
            "two-members": bytes([1]) + gzip.compress(lab2[:6], mtime=0) + gzip.compress(lab2[6:], mtime=0)}


# ** dictionaries **

def ops() -> list[str]:
    return re.findall(r"^KILN_OP\((\w+),", (ROOT / "engine/uop/ops.def").read_text(), re.M)


def dtype_names() -> list[str]:
    pairs = re.findall(r'\{"(\w+)", "(\w+)", \d+, -?\d+\}', (ROOT / "engine/dtype/dtype.cc").read_text())
    return sorted({n for p in pairs for n in p})


def write_dict(name: str, tokens: list[str]) -> None:
    DICT.mkdir(parents=True, exist_ok=True)
    lines = [f"# {name}: generated by tests/fuzz/make_seeds.py"]
    for t in dict.fromkeys(tokens):
        esc = "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else f"\\x{ord(c):02x}" for c in t)
        lines.append(f'"{esc}"')
    (DICT / f"{name}.dict").write_text("\n".join(lines) + "\n")


KSERVE_TYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
                "FP16", "BF16", "FP32", "FP64", "BYTES"]
TENSOR_NAMES = ["INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1", "X", "SUM", "INPUT", "OUTPUT", "B", "U8",
                "F16", "S", "I32", "OUT_S", "OUT_F32"]
MODELS = ["add_sub", "reduce_sum", "fashion_mnist", "all_types"]
JSON_TOKENS = ["{", "}", "[", "]", ",", ":", "true", "false", "null", "-0", "1e308", "\\u0000",
               "\\ud800", "\\\\", "\"\""]


def dictionaries() -> None:
    wire_dtypes = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                   "float16", "bfloat16", "float32", "float64"]
    write_dict("graph", ops() + ["INPUT"] + wire_dtypes)
    write_dict("grpc_infer", KSERVE_TYPES + TENSOR_NAMES + MODELS)
    rest_keys = ["id", "inputs", "outputs", "name", "datatype", "shape", "data", "parameters",
                 "binary_data_size", "binary_data", "binary_data_output", "shared_memory_region",
                 "classification"]
    write_dict("rest_infer", [f'"{k}"' for k in rest_keys] + [f'"{t}"' for t in KSERVE_TYPES]
               + [f'"{n}"' for n in TENSOR_NAMES] + JSON_TOKENS)
    proto = (ROOT / "proto/inference/model_config.proto").read_text()
    fields = re.findall(r"^\s*(?:repeated\s+|optional\s+)?[\w.<>, ]+\s+(\w+)\s*=\s*\d+;", proto, re.M)
    enums = re.findall(r"^\s*([A-Z][A-Z0-9_]+)\s*=\s*\d+;", proto, re.M)
    write_dict("model_config", fields + enums + ["kiln_graph", "kiln_builtin", "kiln_onnx",
                                                 "architecture", "mnist_cnn", "mlp", "{", "}",
                                                 "[", "]", ":", "-1"])
    st = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', "BOOL", "U8", "I8", "U16",
          "I16", "F16", "BF16", "U32", "I32", "F32", "F64", "U64", "I64"] + JSON_TOKENS
    write_dict("safetensors", st)
    write_dict("checkpoint", st + ["kiln-checkpoint 1\n", "step ", "file ", "bytes ", "sha256 ",
                                   "ckpt-0000000042.safetensors", "\x00"])
    import onnx.defs
    onnx_ops = sorted({sch.name for sch in onnx.defs.get_all_schemas() if sch.domain in ("", "ai.onnx")})
    write_dict("onnx", onnx_ops + ["ai.onnx", "ai.onnx.ml", "com.microsoft", "location", "offset", "length",
                                   "axis", "axes", "perm", "pads", "kernel_shape", "strides", "to", "value"])
    axis = ["GLOBAL", "LOCAL", "LOOP", "GROUP_REDUCE", "REDUCE", "UPCAST", "UNROLL", "THREAD"]
    write_dict("uop_text", ops() + dtype_names() + axis +
               [".vec(4)", ".ptr()", ".ptr(local)", "roots", "tag=", "axis(", "var(", "reduce(",
                "nan", "inf", "-inf", "true", "false", "%", "=", "(", ")", ",", "\\x", "#"])


def gguf_files(tmp: Path) -> dict[str, bytes]:
    """Small GGUF files from llama.cpp's own writer: every tensor type kiln reads and every metadata value type
    (tests/engine/nn/gguf_ref.py), and one with a 64-byte alignment and nested arrays."""
    import subprocess
    out = tmp / "kiln_gguf_seeds"
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(ROOT / "tests/engine/nn/gguf_ref.py"), "synthetic", str(out)],
                   check=True, capture_output=True)
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize
    w = GGUFWriter(out / "aligned.gguf", arch="llama")
    w.data_alignment = 64
    w.add_uint32("general.alignment", 64)
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "ab"])
    w.add_array("tokenizer.ggml.merges", ["a b"])
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    w.add_tensor("q4_1", quantize(x, GGMLQuantizationType.Q4_1), raw_dtype=GGMLQuantizationType.Q4_1)
    w.add_tensor("f16", x.astype(np.float16), raw_dtype=GGMLQuantizationType.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"types": (out / "types.gguf").read_bytes(), "aligned": (out / "aligned.gguf").read_bytes()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--uop", nargs="*", default=[], help="UOp text files (DEBUG=5 kernel ASTs)")
    ap.add_argument("--tmp", default="/tmp", help="scratch folder")
    args = ap.parse_args()
    for t in ("graph", "grpc_infer", "rest_infer", "model_config", "safetensors", "checkpoint", "idx",
              "onnx", "gguf"):
        clear_seeds(t)
    for name, g in graphs().items():
        put("graph", name, g.SerializeToString())
    for name, r in infer_requests().items():
        put("grpc_infer", name, r.SerializeToString())
    for name, b in rest_bodies().items():
        put("rest_infer", name, b)
    for name, c in configs().items():
        put("model_config", name, c)
    files = safetensors_files(Path(args.tmp))
    for name, f in files.items():
        put("safetensors", name, f)
    put("checkpoint", "step42", manifest(42, files["checkpoint"]) + b"\0" + files["checkpoint"])
    put("checkpoint", "state_ref", manifest(7, files["state_ref"]) + b"\0" + files["state_ref"])
    for name, f in idx_files().items():
        put("idx", name, f)
    for name, m in onnx_models().items():
        put("onnx", name, m)
    for name, g in gguf_files(Path(args.tmp)).items():
        put("gguf", name, g)
    if args.uop:
        clear_seeds("uop_text")
        for i, path in enumerate(args.uop):
            put("uop_text", f"{i:02d}-{Path(path).stem}", Path(path).read_bytes())
    dictionaries()


if __name__ == "__main__":
    main()
