"""kiln.v1.Engine over plain grpcio: a 20-op graph through Execute compared with numpy, then a
registered graph executed 100 times that compiles its kernels exactly once, and error codes.

The message classes are generated at test time with protoc (--python_out) into a temporary folder;
calls go through grpc.Channel.unary_unary with the messages' own serializers, so no grpcio-tools
stub package is needed."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import numpy as np
import pytest

PROTO_ROOT = Path(__file__).resolve().parents[2] / "proto"


@pytest.fixture(scope="module")
def pb():
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.fail("protoc is required to generate the kiln.v1 messages")
    out = Path(tempfile.mkdtemp(prefix="kiln_pb_"))
    subprocess.run([protoc, f"--proto_path={PROTO_ROOT}", f"--python_out={out}",
                    "kiln/v1/graph.proto", "kiln/v1/engine.proto"], check=True)
    for pkg in (out / "kiln", out / "kiln" / "v1"):
        (pkg / "__init__.py").touch()
    sys.path.insert(0, str(out))
    try:
        graph_pb2 = importlib.import_module("kiln.v1.graph_pb2")
        engine_pb2 = importlib.import_module("kiln.v1.engine_pb2")
        yield graph_pb2, engine_pb2
    finally:
        sys.path.remove(str(out))
        shutil.rmtree(out, ignore_errors=True)


class EngineStub:
    def __init__(self, channel, engine_pb2):
        def method(name, request, response):
            return channel.unary_unary(f"/kiln.v1.Engine/{name}",
                                       request_serializer=request.SerializeToString,
                                       response_deserializer=response.FromString)
        e = engine_pb2
        self.Execute = method("Execute", e.ExecuteRequest, e.ExecuteResponse)
        self.RegisterGraph = method("RegisterGraph", e.RegisterGraphRequest, e.RegisterGraphResponse)
        self.ExecuteRegistered = method("ExecuteRegistered", e.ExecuteRegisteredRequest,
                                        e.ExecuteResponse)
        self.ListKernels = method("ListKernels", e.ListKernelsRequest, e.ListKernelsResponse)


@pytest.fixture(scope="module")
def stub(kilnd, pb):
    channel = grpc.insecure_channel(kilnd.url)
    yield EngineStub(channel, pb[1])
    channel.close()


def twenty_op_graph(graph_pb2, scale: float = 0.5):
    """23 nodes (3 INPUTs + 20 ops); returns (graph, numpy reference function)."""
    g = graph_pb2.Graph(name="twenty_ops")
    g.inputs.add(name="A", dtype="float32", shape=[4, 8])
    g.inputs.add(name="B", dtype="float32", shape=[4, 8])
    g.inputs.add(name="C", dtype="float32", shape=[8])

    def node(op, dtype="float32", src=(), **arg):
        n = g.nodes.add(op=op, dtype=dtype, src=list(src))
        if "i" in arg:
            n.arg.int_value = arg["i"]
        if "f" in arg:
            n.arg.float_value = arg["f"]
        if "ints" in arg:
            n.arg.ints.values.extend(arg["ints"])
        if "reduce" in arg:
            n.arg.reduce.op, axes = arg["reduce"]
            n.arg.reduce.axes.extend(axes)
        return len(g.nodes) - 1

    a = node("INPUT", i=0)
    b = node("INPUT", i=1)
    c = node("INPUT", i=2)
    x3 = node("ADD", src=(a, b))                       # 1
    x4 = node("MUL", src=(x3, c))                      # 2 (C broadcast over rows)
    k = node("CONST", f=scale)                         # 3
    x6 = node("MUL", src=(x4, k))                      # 4
    x7 = node("SUB", src=(x6, a))                      # 5
    x8 = node("MAX", src=(x7, b))                      # 6
    x9 = node("NEG", src=(x8,))                        # 7
    x10 = node("EXP2", src=(x9,))                      # 8
    x11 = node("MUL", src=(x10, x10))                  # 9
    x12 = node("SQRT", src=(x11,))                     # 10
    one = node("CONST", f=1.0)                         # 11
    x14 = node("ADD", src=(x12, one))                  # 12
    x15 = node("RECIPROCAL", src=(x14,))               # 13
    t = node("CONST", f=0.75)                          # 14
    x17 = node("CMPLT", dtype="bool", src=(x15, t))    # 15
    x18 = node("WHERE", src=(x17, x15, x3))            # 16
    x19 = node("REDUCE_AXIS", src=(x18,), reduce=("ADD", [1]))  # 17
    x20 = node("PERMUTE", src=(x18,), ints=[1, 0])     # 18
    x21 = node("RESHAPE", src=(x19,), ints=[4])        # 19
    x22 = node("CAST", dtype="float64", src=(x21,))    # 20
    g.outputs.add(name="W", node=x18)
    g.outputs.add(name="T", node=x20)
    g.outputs.add(name="S", node=x22)

    def reference(A, B, C):
        x3 = A + B
        x6 = (x3 * C) * np.float32(scale)
        x8 = np.maximum(x6 - A, B)
        x10 = np.exp2(-x8)
        x12 = np.sqrt(x10 * x10)
        x15 = np.float32(1) / (x12 + np.float32(1))
        x18 = np.where(x15 < np.float32(0.75), x15, x3)
        return {"W": x18, "T": x18.T, "S": x18.sum(axis=1).astype(np.float64)}

    return g, reference


def tensor(engine_pb2, name, array):
    return engine_pb2.Tensor(name=name, dtype=str(array.dtype), shape=list(array.shape),
                             raw=array.tobytes())


def decode(t):
    return np.frombuffer(t.raw, dtype=np.dtype(t.dtype)).reshape(tuple(t.shape))


def inputs_for(engine_pb2, seed):
    rng = np.random.default_rng(seed)
    arrays = {"A": rng.standard_normal((4, 8)).astype(np.float32),
              "B": rng.standard_normal((4, 8)).astype(np.float32),
              "C": rng.standard_normal(8).astype(np.float32)}
    return arrays, [tensor(engine_pb2, n, a) for n, a in arrays.items()]


def check_outputs(response, want):
    got = {t.name: decode(t) for t in response.outputs}
    assert set(got) == set(want)
    for name, w in want.items():
        assert got[name].dtype == w.dtype, name
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_execute_twenty_ops_matches_numpy(stub, pb):
    graph_pb2, engine_pb2 = pb
    graph, reference = twenty_op_graph(graph_pb2)
    assert sum(n.op != "INPUT" for n in graph.nodes) == 20
    arrays, inputs = inputs_for(engine_pb2, 1)
    response = stub.Execute(engine_pb2.ExecuteRequest(graph=graph, inputs=inputs))
    check_outputs(response, reference(**arrays))
    assert len(response.kernels) >= 1
    for k in response.kernels:
        assert k.name and k.device
    # Same graph again, new inputs: nothing is compiled.
    arrays, inputs = inputs_for(engine_pb2, 2)
    again = stub.Execute(engine_pb2.ExecuteRequest(graph=graph, inputs=inputs))
    check_outputs(again, reference(**arrays))
    assert again.kernels_compiled == 0
    assert again.jit_cache_hit
    assert [k.name for k in again.kernels] == [k.name for k in response.kernels]


def test_registered_graph_compiles_once_over_100_runs(stub, pb):
    graph_pb2, engine_pb2 = pb
    graph, reference = twenty_op_graph(graph_pb2, scale=0.3125)  # kernels no other test compiled
    reg = stub.RegisterGraph(engine_pb2.RegisterGraphRequest(graph=graph))
    assert reg.graph_id
    assert reg.kernel_count >= 1
    assert reg.kernels_compiled >= 1
    again = stub.RegisterGraph(engine_pb2.RegisterGraphRequest(graph=graph))
    assert again.graph_id == reg.graph_id and again.kernels_compiled == 0
    compiled = 0
    for i in range(100):
        arrays, inputs = inputs_for(engine_pb2, 100 + i)
        response = stub.ExecuteRegistered(
            engine_pb2.ExecuteRegisteredRequest(graph_id=reg.graph_id, inputs=inputs))
        compiled += response.kernels_compiled
        assert len(response.kernels) == reg.kernel_count
        if i % 10 == 0:
            check_outputs(response, reference(**arrays))
    assert compiled == 0
    listing = stub.ListKernels(engine_pb2.ListKernelsRequest(graph_id=reg.graph_id))
    assert len(listing.kernels) >= 1
    assert sum(k.compiles for k in listing.kernels) == reg.kernels_compiled
    for k in listing.kernels:
        assert k.graph_id == reg.graph_id
        assert k.compiles <= 1
        assert k.graph_runs == 101  # the warm-up at registration + 100 runs
        assert k.launches % 101 == 0 and k.launches >= 101
        assert k.total_ns > 0
    everything = stub.ListKernels(engine_pb2.ListKernelsRequest())
    assert {k.graph_id for k in everything.kernels} >= {reg.graph_id}


def _code(call, request):
    with pytest.raises(grpc.RpcError) as err:
        call(request)
    return err.value.code(), err.value.details()


def test_engine_errors(stub, pb):
    graph_pb2, engine_pb2 = pb
    graph, _ = twenty_op_graph(graph_pb2)
    _, inputs = inputs_for(engine_pb2, 3)

    code, msg = _code(stub.ExecuteRegistered,
                      engine_pb2.ExecuteRegisteredRequest(graph_id="nope", inputs=inputs))
    assert code == grpc.StatusCode.NOT_FOUND and "graph_id" in msg

    bad = graph_pb2.Graph()
    bad.CopyFrom(graph)
    bad.nodes[6].src[0] = 9  # a later node: a cycle or dangling reference
    code, msg = _code(stub.Execute, engine_pb2.ExecuteRequest(graph=bad, inputs=inputs))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nodes[6].src[0]" in msg

    bad.CopyFrom(graph)
    bad.nodes[6].op = "CUSTOM"
    code, msg = _code(stub.Execute, engine_pb2.ExecuteRequest(graph=bad, inputs=inputs))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nodes[6].op" in msg

    bad.CopyFrom(graph)
    bad.nodes[6].op = "BUFFER"
    code, msg = _code(stub.Execute, engine_pb2.ExecuteRequest(graph=bad, inputs=inputs))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not accepted" in msg

    short = list(inputs)
    short[0] = engine_pb2.Tensor(name="A", dtype="float32", shape=[4, 8], raw=b"\0" * 127)
    code, msg = _code(stub.Execute, engine_pb2.ExecuteRequest(graph=graph, inputs=short))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "inputs[0].raw" in msg

    code, msg = _code(stub.Execute, engine_pb2.ExecuteRequest(graph=graph, inputs=inputs[:2]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "missing 'C'" in msg

    # The daemon still answers.
    arrays, inputs = inputs_for(engine_pb2, 4)
    ok = stub.Execute(engine_pb2.ExecuteRequest(graph=graph, inputs=inputs))
    assert len(ok.outputs) == 3
