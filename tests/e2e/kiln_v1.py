"""Helpers for tests that speak kiln.v1.Engine over plain grpcio: message classes generated at
test time with protoc into a temporary folder, a stub over grpc.Channel.unary_unary, graph
builders, and the daemon's memory figures from /proc."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc

PROTO_ROOT = Path(__file__).resolve().parents[2] / "proto"


def generate_messages():
    """(graph_pb2, engine_pb2, cleanup): the kiln.v1 message modules."""
    protoc = shutil.which("protoc")
    if protoc is None:
        raise RuntimeError("protoc is required to generate the kiln.v1 messages")
    out = Path(tempfile.mkdtemp(prefix="kiln_pb_"))
    subprocess.run([protoc, f"--proto_path={PROTO_ROOT}", f"--python_out={out}",
                    "kiln/v1/graph.proto", "kiln/v1/engine.proto"], check=True)
    for pkg in (out / "kiln", out / "kiln" / "v1"):
        (pkg / "__init__.py").touch()
    sys.path.insert(0, str(out))
    graph_pb2 = importlib.import_module("kiln.v1.graph_pb2")
    engine_pb2 = importlib.import_module("kiln.v1.engine_pb2")

    def cleanup():
        sys.path.remove(str(out))
        shutil.rmtree(out, ignore_errors=True)

    return graph_pb2, engine_pb2, cleanup


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


class GraphBuilder:
    """Appends nodes to a kiln.v1.Graph; each call returns the new node's index."""

    def __init__(self, graph_pb2, name="g"):
        self.g = graph_pb2.Graph(name=name)

    def input(self, name, shape, dtype="float32"):
        self.g.inputs.add(name=name, dtype=dtype, shape=list(shape))
        return self.node("INPUT", dtype=dtype, i=len(self.g.inputs) - 1)

    def node(self, op, dtype="float32", src=(), **arg):
        n = self.g.nodes.add(op=op, dtype=dtype, src=list(src))
        if "i" in arg:
            n.arg.int_value = arg["i"]
        if "f" in arg:
            n.arg.float_value = arg["f"]
        if "ints" in arg:
            n.arg.ints.values.extend(arg["ints"])
        if "reduce" in arg:
            n.arg.reduce.op, axes = arg["reduce"]
            n.arg.reduce.axes.extend(axes)
        return len(self.g.nodes) - 1

    def output(self, name, node):
        self.g.outputs.add(name=name, node=node)


def rpc_error(call, request, **kwargs):
    """(code, details) of a call that must fail."""
    try:
        call(request, **kwargs)
    except grpc.RpcError as err:
        return err.code(), err.details()
    raise AssertionError("the call succeeded")


def proc_status_kib(pid: int, field: str) -> int:
    """A VmRSS / VmHWM / VmSize figure of process `pid`, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)
