"""Issue #26 probes against a real kilnd: no request ends the process, a client that does not read
its stream cannot grow the daemon, and nothing outside the model repository is read.

  C1   a config override marking fashion_mnist's INPUT `optional`, then an infer with no inputs:
       the builtin path called inputs.at(0) and the process aborted.
  guard  an exception thrown where requests execute (failpoints infer.execute / graph.execute,
       action `throw`) answers INTERNAL with a request id; the next request succeeds.
  rlimit under an address-space limit a run that cannot allocate answered UNIMPLEMENTED with an
       empty message (gRPC's answer to an exception escaping a handler).
  stream a ModelStreamInfer client that sends and never reads grew RSS 201 -> 385 MB in 60 s.
  links  a model folder linked outside the repository loaded READY; a config.pbtxt linked to a
       secret leaked its first token in the load error and the repository index. (Links that
       stay inside the repository, as in a Kubernetes ConfigMap volume, still load.)"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from kiln_v1 import EngineStub, GraphBuilder, generate_messages, proc_status_kib, rpc_error
from kilnd_launcher import Kilnd

SECRET = "TOPSECRET_API_KEY_12345"


def add_sub_inputs(batch=1, value=1.0):
    x = np.full((batch, 16), value, np.float32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = grpcclient.InferInput(name, [batch, 16], "FP32")
        i.set_data_from_numpy(x)
        inputs.append(i)
    return inputs


def fashion_input(batch=1):
    i = grpcclient.InferInput("INPUT", [batch, 1, 28, 28], "FP32")
    i.set_data_from_numpy(np.random.default_rng(0).random((batch, 1, 28, 28), dtype=np.float32))
    return i


# ---- C1 ----

def test_c1_optional_input_never_reaches_the_builtin_path(kilnd):
    client = grpcclient.InferenceServerClient(url=kilnd.url)
    config = {"name": "fashion_mnist", "platform": "kiln_builtin", "max_batch_size": 64,
              "input": [{"name": "INPUT", "data_type": "TYPE_FP32", "dims": [1, 28, 28],
                         "optional": True}],
              "output": [{"name": "OUTPUT", "data_type": "TYPE_FP32", "dims": [10]}],
              "parameters": {"architecture": {"string_value": "mnist_cnn"}}}
    with pytest.raises(InferenceServerException) as err:
        client.load_model("fashion_mnist", config=json.dumps(config))
    assert "optional" in err.value.message() and "'INPUT' cannot be optional" in err.value.message()
    # The version that served keeps serving; an infer without inputs is a clear error.
    with pytest.raises(InferenceServerException) as err:
        client.infer("fashion_mnist", [])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "missing input 'INPUT'" in err.value.message()
    conn = http.client.HTTPConnection("127.0.0.1", kilnd.http_port, timeout=30)
    conn.request("POST", "/v2/models/fashion_mnist/infer", body=json.dumps({"inputs": []}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 400 and b"missing input" in response.read()
    conn.close()
    assert kilnd.proc.poll() is None
    assert client.infer("fashion_mnist", [fashion_input()]).as_numpy("OUTPUT").shape == (1, 10)
    client.close()


# ---- exceptions become INTERNAL with a request id ----

@pytest.fixture(scope="module")
def throwing(models):
    server = Kilnd(models, ["--metrics-port=-1"],
                   wrapper=["env", "KILN_FAILPOINTS=infer.execute=throw@1,graph.execute=throw@1"])
    yield server
    assert server.stop() == 0


def test_an_exception_in_execution_answers_internal(throwing):
    client = grpcclient.InferenceServerClient(url=throwing.url)
    with pytest.raises(InferenceServerException) as err:
        client.infer("add_sub", add_sub_inputs())
    assert err.value.status() == "StatusCode.INTERNAL"
    assert "request id" in err.value.message() and "failpoint" not in err.value.message()
    out = client.infer("add_sub", add_sub_inputs(value=2.0))
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), np.full((1, 16), 4.0, np.float32))
    client.close()

    graph_pb2, engine_pb2, cleanup = generate_messages()
    try:
        channel = grpc.insecure_channel(throwing.url)
        stub = EngineStub(channel, engine_pb2)
        b = GraphBuilder(graph_pb2)
        x = b.input("x", [2])
        b.output("y", b.node("NEG", src=(x,)))
        t = engine_pb2.Tensor(name="x", dtype="float32", shape=[2], raw=np.ones(2, np.float32).tobytes())
        code, msg = rpc_error(stub.Execute, engine_pb2.ExecuteRequest(graph=b.g, inputs=[t]))
        assert code == grpc.StatusCode.INTERNAL and "request id" in msg, msg
        out = stub.Execute(engine_pb2.ExecuteRequest(graph=b.g, inputs=[t]))
        np.testing.assert_array_equal(np.frombuffer(out.outputs[0].raw, np.float32), [-1, -1])
        channel.close()
    finally:
        cleanup()
    assert throwing.proc.poll() is None
    logs = throwing.logs()
    assert logs.count("request id") >= 2 and "failpoint infer.execute fired" in logs


# ---- address-space limit ----

def test_an_allocation_failure_is_a_clear_status(models):
    """kilnd under an address-space limit 1.25 GiB above its idle size, with no engine memory
    limit: the 1 GiB device value of a 1 GiB output fits, its host copy does not
    (std::bad_alloc). The answer is RESOURCE_EXHAUSTED with a message (before: gRPC caught the
    escaped exception and answered UNIMPLEMENTED with an empty one); the next request succeeds."""
    if shutil.which("prlimit") is None:
        pytest.fail("prlimit (util-linux) is required")
    probe = Kilnd(models, ["--metrics-port=-1"])
    time.sleep(1)  # its threads have started
    idle = proc_status_kib(probe.proc.pid, "VmSize")
    assert probe.stop() == 0
    limit = (idle << 10) + (1280 << 20)
    server = Kilnd(models, ["--metrics-port=-1", "--max-run-memory-bytes=0", "--max-memory-bytes=-1",
                            "--inline-execution=false"],
                   wrapper=["prlimit", f"--as={limit}", "--"])
    graph_pb2, engine_pb2, cleanup = generate_messages()
    try:
        channel = grpc.insecure_channel(server.url, options=[("grpc.max_receive_message_length", -1)])
        stub = EngineStub(channel, engine_pb2)
        b = GraphBuilder(graph_pb2)
        c = b.node("CONST", f=1.0)
        b.output("a", b.node("EXPAND", src=(b.node("RESHAPE", src=(c,), ints=[1]),), ints=[1 << 28]))
        code, msg = rpc_error(stub.Execute, engine_pb2.ExecuteRequest(graph=b.g), timeout=120)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "out of memory" in msg, (code, msg)
        b = GraphBuilder(graph_pb2)
        x = b.input("x", [2])
        b.output("y", b.node("NEG", src=(x,)))
        t = engine_pb2.Tensor(name="x", dtype="float32", shape=[2], raw=np.ones(2, np.float32).tobytes())
        out = stub.Execute(engine_pb2.ExecuteRequest(graph=b.g, inputs=[t]), timeout=60)
        np.testing.assert_array_equal(np.frombuffer(out.outputs[0].raw, np.float32), [-1, -1])
        channel.close()
        assert server.proc.poll() is None
    finally:
        cleanup()
        server.stop()


# ---- a stream whose client does not read ----

@pytest.fixture(scope="module")
def stream_server(models):
    server = Kilnd(models, ["--metrics-port=-1", "--stream-max-pending-responses=32"])
    yield server
    assert server.stop() == 0


def test_unread_stream_is_closed_and_its_memory_freed(stream_server):
    server = stream_server
    channel = grpc.insecure_channel(server.url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    x = np.ones((8, 16), np.float32).tobytes()

    def request(k):
        r = service_pb2.ModelInferRequest(model_name="add_sub", id=str(k))
        for name in ("INPUT0", "INPUT1"):
            t = r.inputs.add(name=name, datatype="FP32")
            t.shape.extend([8, 16])
            r.raw_input_contents.append(x)
        return r

    # Warm up (compiles) and measure the baseline.
    list(stub.ModelStreamInfer(iter([request(-1)]), timeout=60))
    rss_before = proc_status_kib(server.proc.pid, "VmRSS")
    start = time.monotonic()
    responses = stub.ModelStreamInfer((request(k) for k in range(20000)), timeout=120)
    time.sleep(3)  # the client reads nothing while the server answers
    received = 0
    with pytest.raises(grpc.RpcError) as err:
        for _ in responses:
            received += 1
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()
    assert "waiting for the client to read" in err.value.details()
    assert "--stream-max-pending-responses" in err.value.details()
    assert received < 20000
    assert time.monotonic() - start < 90
    time.sleep(1)
    rss_after = proc_status_kib(server.proc.pid, "VmRSS")
    assert rss_after - rss_before < 64 * 1024, (rss_before, rss_after)  # KiB; before: +184 MB
    # The daemon and a well-behaved stream are unaffected.
    answers = list(stub.ModelStreamInfer(iter([request(k) for k in range(10)]), timeout=60))
    assert len(answers) == 10 and all(not a.error_message for a in answers)
    channel.close()


# ---- repository confinement ----

@pytest.fixture(scope="module")
def linked_repository(models):
    root = Path(tempfile.mkdtemp(prefix="kiln_links_"))
    repo, outside = root / "repo", root / "outside"
    repo.mkdir()
    outside.mkdir()
    shutil.copytree(models / "add_sub", repo / "add_sub")
    # A model folder that is a link to a folder outside the repository.
    shutil.copytree(models / "add_sub", outside / "linked_model")
    config = (outside / "linked_model" / "config.pbtxt").read_text()
    (outside / "linked_model" / "config.pbtxt").write_text(
        config.replace('name: "add_sub"', 'name: "linked_model"'))
    (repo / "linked_model").symlink_to(outside / "linked_model")
    # A config.pbtxt that is a link to a secret, and one that is a second name of a secret.
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "secret2.txt").write_text(SECRET + "\n")
    for name in ("secret_model", "hardlinked"):
        shutil.copytree(models / "add_sub" / "1", repo / name / "1")
    (repo / "secret_model" / "config.pbtxt").symlink_to(outside / "secret.txt")
    os.link(outside / "secret2.txt", repo / "hardlinked" / "config.pbtxt")
    # A model reached through links that stay inside the repository, as a Kubernetes ConfigMap
    # volume lays it out (entries link into ..data, which links to a timestamped folder).
    shutil.copytree(models / "add_sub", repo / "..2026_01_01" / "inside_model")
    cm_config = repo / "..2026_01_01" / "inside_model" / "config.pbtxt"
    cm_config.write_text(cm_config.read_text().replace('name: "add_sub"', 'name: "inside_model"'))
    (repo / "..data").symlink_to("..2026_01_01")
    (repo / "inside_model").symlink_to("..data/inside_model")
    # A config inside the repository with an unknown field: the error names the place, not the text.
    shutil.copytree(models / "add_sub" / "1", repo / "bad_field" / "1")
    (repo / "bad_field" / "config.pbtxt").write_text("name: \"bad_field\"\nbogus_field_xyz: 1\n")
    yield repo
    shutil.rmtree(root, ignore_errors=True)


def index_of(url):
    client = grpcclient.InferenceServerClient(url=url)
    index = client.get_model_repository_index(as_json=True)
    client.close()
    return {m["name"]: m for m in index.get("models", [])}


def test_links_below_the_root_are_not_followed(linked_repository):
    server = Kilnd(linked_repository, ["--metrics-port=-1"])
    try:
        rows = index_of(server.url)
        assert rows["add_sub"]["state"] == "READY"
        assert rows["inside_model"]["state"] == "READY"
        assert rows["linked_model"]["state"] == "UNAVAILABLE"
        assert "symbolic link" in rows["linked_model"]["reason"]
        assert rows["secret_model"]["state"] == "UNAVAILABLE"
        assert "config.pbtxt is, or is inside, a symbolic link that leads outside" in \
            rows["secret_model"]["reason"]
        assert "hard links" in rows["hardlinked"]["reason"]
        assert "config.pbtxt: line 2:" in rows["bad_field"]["reason"]
        assert "unknown field name" in rows["bad_field"]["reason"]
        assert "bogus_field_xyz" not in rows["bad_field"]["reason"]
        client = grpcclient.InferenceServerClient(url=server.url)
        for model in ("secret_model", "hardlinked", "linked_model"):
            with pytest.raises(InferenceServerException) as err:
                client.load_model(model)
            assert SECRET not in err.value.message()
        out = client.infer("add_sub", add_sub_inputs())
        np.testing.assert_array_equal(out.as_numpy("OUTPUT1"), np.zeros((1, 16), np.float32))
        client.close()
        text = json.dumps(index_of(server.url)) + server.logs()
        assert SECRET not in text
    finally:
        assert server.stop() == 0


def test_links_are_followed_when_the_operator_allows_it(linked_repository):
    server = Kilnd(linked_repository, ["--metrics-port=-1", "--repository-follow-links"])
    try:
        rows = index_of(server.url)
        assert rows["linked_model"]["state"] == "READY"
        client = grpcclient.InferenceServerClient(url=server.url)
        out = client.infer("linked_model", add_sub_inputs(value=3.0))
        np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), np.full((1, 16), 6.0, np.float32))
        client.close()
        # The secret is read now (the operator allowed it) but its text never reaches a message.
        assert rows["secret_model"]["state"] == "UNAVAILABLE"
        assert SECRET not in json.dumps(rows)
    finally:
        assert server.stop() == 0
