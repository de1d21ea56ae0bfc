"""Client: kilnd over gRPC — KServe v2 inference (inference.GRPCInferenceService) and kiln's graph
service (kiln.v1.Engine). Tensors are numpy arrays in and out; errors raise KilnError with the
gRPC status code name and the server's message.

The KServe messages come from kiln.kserve: the same messages under kiln's own proto package
(`kiln.kserve.*`, files kiln/kserve/*.proto), so the package loads beside tritonclient.grpc (whose
`inference.*` symbols would otherwise clash in protobuf's default pool); on the wire they are
KServe v2's, sent to /inference.GRPCInferenceService/<Method> (generate_protos.py)."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import grpc
import numpy as np

from kiln.kserve import grpc_service_pb2, grpc_service_pb2_grpc
from kiln.v1 import engine_pb2, engine_pb2_grpc, graph_pb2

DEFAULT_URL = "localhost:8001"

# numpy dtype name <-> KServe datatype (kserve-v2-protocol.md §7)
_KSERVE = {"bool": "BOOL", "int8": "INT8", "uint8": "UINT8", "int16": "INT16", "uint16": "UINT16",
           "int32": "INT32", "uint32": "UINT32", "int64": "INT64", "uint64": "UINT64",
           "float16": "FP16", "float32": "FP32", "float64": "FP64"}
_NUMPY = {v: k for k, v in _KSERVE.items()}


class KilnError(RuntimeError):
    """A failed call: `code` is the gRPC status code name ("INVALID_ARGUMENT")."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _call(fn, request, timeout):
    try:
        return fn(request, timeout=timeout)
    except grpc.RpcError as e:  # grpc.Call carries code() and details()
        raise KilnError(e.code().name, e.details() or "") from None


def to_tensor_proto(name: str, array: np.ndarray) -> engine_pb2.Tensor:
    array = np.ascontiguousarray(array)
    return engine_pb2.Tensor(name=name, dtype=array.dtype.name, shape=list(array.shape),
                             raw=array.tobytes())


def from_tensor_proto(t: engine_pb2.Tensor) -> np.ndarray:
    return np.frombuffer(t.raw, dtype=np.dtype(t.dtype)).reshape(tuple(t.shape)).copy()


class Client:
    """One channel to kilnd's gRPC port (`url` = host:port; default $KILN_URL or localhost:8001).
    Thread-safe; close() when done (or use as a context manager)."""

    def __init__(self, url: str | None = None, timeout: float = 60.0):
        self.url = url or os.environ.get("KILN_URL", DEFAULT_URL)
        self.timeout = timeout
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        self._channel = grpc.insecure_channel(self.url, options=options)
        self._engine = engine_pb2_grpc.EngineStub(self._channel)
        self._inference = grpc_service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ** kiln.v1.Engine **

    def execute(self, graph: graph_pb2.Graph, inputs: Mapping[str, np.ndarray] | None = None,
                device: str = "") -> tuple[dict[str, np.ndarray], engine_pb2.ExecuteResponse]:
        """Runs `graph` once; returns ({output name: array}, the raw response with timings)."""
        request = engine_pb2.ExecuteRequest(graph=graph, device=device)
        for name, array in (inputs or {}).items():
            request.inputs.append(to_tensor_proto(name, array))
        response = _call(self._engine.Execute, request, self.timeout)
        return {t.name: from_tensor_proto(t) for t in response.outputs}, response

    # ** KServe v2 **

    def _kserve(self):
        return self._inference, grpc_service_pb2

    def live(self) -> bool:
        stub, pb = self._kserve()
        return _call(stub.ServerLive, pb.ServerLiveRequest(), self.timeout).live

    def ready(self) -> bool:
        stub, pb = self._kserve()
        return _call(stub.ServerReady, pb.ServerReadyRequest(), self.timeout).ready

    def models(self) -> list[dict]:
        stub, pb = self._kserve()
        index = _call(stub.RepositoryIndex, pb.RepositoryIndexRequest(), self.timeout)
        return [{"name": m.name, "version": m.version, "state": m.state, "reason": m.reason}
                for m in index.models]

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] = (),
              version: str = "") -> dict[str, np.ndarray]:
        """ModelInfer with raw tensors; returns {output name: array}."""
        stub, pb = self._kserve()
        request = pb.ModelInferRequest(model_name=model, model_version=version)
        for name, array in inputs.items():
            array = np.ascontiguousarray(array)
            datatype = _KSERVE.get(array.dtype.name)
            if datatype is None:
                raise KilnError("INVALID_ARGUMENT", f"input {name}: dtype {array.dtype} has no "
                                                    "KServe datatype")
            request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
            request.raw_input_contents.append(array.tobytes())
        for name in outputs:
            request.outputs.add(name=name)
        response = _call(stub.ModelInfer, request, self.timeout)
        result = {}
        for out, raw in zip(response.outputs, response.raw_output_contents):
            result[out.name] = np.frombuffer(raw, dtype=np.dtype(_NUMPY[out.datatype])).reshape(
                tuple(out.shape)).copy()
        return result


_default: Client | None = None


def default_client() -> Client:
    """The Client Tensor uses: set_server(url) or $KILN_URL or localhost:8001."""
    global _default
    if _default is None:
        _default = Client()
    return _default


def set_server(url: str) -> Client:
    """Points kiln.Tensor (and default_client()) at the kilnd gRPC address `url`."""
    global _default
    if _default is not None:
        _default.close()
    _default = Client(url)
    return _default
