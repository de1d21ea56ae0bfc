"""kilnd's standard gRPC services seen by a plain grpcio client: grpc.health.v1 and server
reflection (v1alpha), which is off unless kilnd runs with --grpc-reflection (issue #26: it listed
every service to anyone). Messages are hand-encoded so no extra stub package is needed."""

from __future__ import annotations

import grpc
import pytest

from kilnd_launcher import Kilnd


@pytest.fixture(scope="module")
def channel(kilnd):
    ch = grpc.insecure_channel(kilnd.url)
    yield ch
    ch.close()


def _raw(channel, method, kind="unary_unary"):
    factory = getattr(channel, kind)
    return factory(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)


def test_health_check_serving(channel):
    check = _raw(channel, "/grpc.health.v1.Health/Check")
    assert check(b"") == b"\x08\x01"  # HealthCheckResponse{status: SERVING}
    service = b"inference.GRPCInferenceService"
    assert check(b"\x0a" + bytes([len(service)]) + service) == b"\x08\x01"


def test_reflection_is_off_by_default(channel):
    info = _raw(channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                "stream_stream")
    with pytest.raises(grpc.RpcError) as err:
        list(info(iter([b"\x3a\x00"])))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.fixture(scope="module")
def reflective_channel(models):
    server = Kilnd(models, ["--grpc-reflection"])
    ch = grpc.insecure_channel(server.url)
    yield ch
    ch.close()
    assert server.stop() == 0


def test_reflection_lists_services_when_enabled(reflective_channel):
    channel = reflective_channel
    info = _raw(channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                "stream_stream")
    # ServerReflectionRequest{list_services: ""} (field 7)
    (response,) = list(info(iter([b"\x3a\x00"])))
    for name in (b"inference.GRPCInferenceService", b"grpc.health.v1.Health",
                 b"grpc.reflection.v1alpha.ServerReflection"):
        assert name in response
    # ServerReflectionRequest{file_containing_symbol: "inference.GRPCInferenceService"} (field 4)
    symbol = b"inference.GRPCInferenceService"
    (response,) = list(info(iter([b"\x22" + bytes([len(symbol)]) + symbol])))
    assert b"inference/grpc_service.proto" in response
    assert b"inference/model_config.proto" in response
