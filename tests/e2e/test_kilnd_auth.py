"""API keys and roles (issue #23): a real kilnd with --api-keys-file, walked endpoint by endpoint.

The endpoint table comes from `kilnd --list-endpoints`; the test checks it against every rpc of
every service in proto/ (an independent list) and then calls each gRPC method (raw grpc, empty
request) and each REST route (HTTP) with no key, an unknown key, a key without the role and a key
with it. Also: /metrics behind basic auth, SIGHUP reloading the key file, Triton's
--grpc-restricted-protocol / --http-restricted-api, and loopback-only binding without keys."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import signal
import urllib.request
import socket
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from conftest import Kilnd

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"infer": "k-infer-0123", "admin": "k-admin-4567", "metrics": "k-metrics-89ab",
        "infer,admin": "k-both-cdef0"}
REFUSED_GRPC = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}
# Declared by the KServe proto but not served by kilnd: no handler runs, so every caller gets
# UNIMPLEMENTED and nothing else.
UNSERVED = re.compile(r"/inference\.GRPCInferenceService/CudaSharedMemory")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_keys(path: Path, keys: dict[str, str]) -> None:
    lines = ["# roles sha256 label"]
    for role, key in keys.items():
        lines.append(f"{role} {hashlib.sha256(key.encode()).hexdigest()} {role}-key")
    path.write_text("\n".join(lines) + "\n")


def endpoint_table(parameters: bool = False) -> list[tuple[str, str, str, str]]:
    """The calls' rows; with `parameters`, the rows of request parameters ("<call> parameters.<name>")."""
    import os
    out = subprocess.run([os.environ["KILND"], "--list-endpoints"], check=True, capture_output=True,
                         text=True).stdout
    rows = [tuple(line.split("\t")) for line in out.splitlines() if line]
    return [r for r in rows if (" parameters." in r[1]) == parameters]


def proto_methods() -> set[str]:
    """/package.Service/Method for every rpc in proto/ (read from the .proto text)."""
    methods = set()
    for f in (ROOT / "proto").rglob("*.proto"):
        text = f.read_text()
        pkg = re.search(r"^package\s+([\w.]+);", text, re.M).group(1)
        for svc, body in re.findall(r"service\s+(\w+)\s*\{(.*?)\n\}", text, re.S):
            for m in re.findall(r"rpc\s+(\w+)\s*\(", body):
                methods.add(f"/{pkg}.{svc}/{m}")
    return methods


@pytest.fixture(scope="module")
def secured(models, tmp_path_factory):
    keyfile = tmp_path_factory.mktemp("keys") / "keys.txt"
    write_keys(keyfile, KEYS)
    metrics_port = _free_port()
    # --debug: every refused call is logged, so the log test below sees the most text.
    server = Kilnd(models, [f"--api-keys-file={keyfile}", f"--metrics-port={metrics_port}", "--debug"])
    server.keyfile = keyfile
    server.metrics_port = metrics_port
    yield server
    assert server.stop() == 0


def grpc_call(server, method: str, key: str | None):
    md = [("authorization", f"Bearer {key}")] if key else []
    with grpc.insecure_channel(server.url) as ch:
        call = ch.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        try:
            call(b"", metadata=md, timeout=20)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()


def http_call(port: int, method: str, path: str, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        body = b"{}" if method == "POST" else None
        conn.request(method, path, body=body, headers={**headers, "Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def rest_path(name: str) -> tuple[str, str]:
    method, path = name.split(" ", 1)
    if path == "/v1/training/...":
        return "GET", "/v1/training/jobs"
    if path == "/viz/api/{doc}":
        return "GET", "/viz/api/kernels"
    if method == "*":  # one row for every method of the path (GET and POST /v2/logging)
        method = "GET"
    return method, path.replace("{m}", "add_sub").replace("{r}", "no_region")


def other_role(role: str) -> str:
    return "admin" if role in ("infer", "metrics") else "infer"


def test_table_covers_every_rpc_once():
    table = endpoint_table()
    grpc_rows = [name for (t, name, _, _) in table if t == "grpc"]
    assert len(grpc_rows) == len(set(grpc_rows)), "a gRPC method has two rows"
    # proto/grpc/health declares only Check; gRPC's built-in health service also serves Watch.
    assert set(grpc_rows) == proto_methods() | {"/grpc.health.v1.Health/Watch"}
    http_rows = [name for (t, name, _, _) in table if t == "http"]
    assert len(http_rows) == len(set(http_rows))
    assert all(role in ("infer", "admin", "metrics", "public") for (_, _, role, _) in table)
    # Only gRPC's own health service is public; everything that runs work needs a role.
    assert {name for (_, name, role, _) in table if role == "public"} == \
        {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"}
    # Parameter rows belong to a call of the table; kiln_viz (recording for /viz) is admin on every infer call.
    params = endpoint_table(parameters=True)
    calls = {(t, name) for (t, name, _, _) in table}
    assert all((t, name.split(" parameters.")[0]) in calls for (t, name, _, _) in params), params
    assert {(t, name, role, group) for (t, name, role, group) in params if name.endswith("parameters.kiln_viz")} == {
        ("grpc", "/inference.GRPCInferenceService/ModelInfer parameters.kiln_viz", "admin", "kiln-viz"),
        ("grpc", "/inference.GRPCInferenceService/ModelStreamInfer parameters.kiln_viz", "admin", "kiln-viz"),
        ("http", "POST /v2/models/{m}/infer parameters.kiln_viz", "admin", "kiln-viz")}


def test_grpc_walk(secured):
    for (t, name, role, _) in endpoint_table():
        if t != "grpc":
            continue
        if UNSERVED.match(name):
            for key in (None, KEYS["infer"], KEYS["admin"]):
                assert grpc_call(secured, name, key) == grpc.StatusCode.UNIMPLEMENTED, name
            continue
        if role == "public":
            if name.endswith("/Check"):
                assert grpc_call(secured, name, None) == grpc.StatusCode.OK
            continue
        assert grpc_call(secured, name, None) == grpc.StatusCode.UNAUTHENTICATED, name
        assert grpc_call(secured, name, "not-a-key") == grpc.StatusCode.UNAUTHENTICATED, name
        assert grpc_call(secured, name, KEYS[other_role(role)]) == grpc.StatusCode.PERMISSION_DENIED, name
        assert grpc_call(secured, name, KEYS[role]) not in REFUSED_GRPC, name


def test_http_walk(secured):
    for (t, name, role, _) in endpoint_table():
        if t != "http":
            continue
        method, path = rest_path(name)
        port = secured.metrics_port if path == "/metrics" else secured.http_port
        if path == "/metrics":
            def auth(key):
                return {"Authorization": "Basic " + base64.b64encode(f"prometheus:{key}".encode()).decode()}
        else:
            def auth(key):
                return {"Authorization": f"Bearer {key}"}
        assert http_call(port, method, path, {}) == 401, name
        assert http_call(port, method, path, auth("not-a-key")) == 401, name
        wrong = http_call(port, method, path, auth(KEYS[other_role(role)]))
        assert wrong == (401 if path == "/metrics" else 403), name
        right = http_call(port, method, path, auth(KEYS[role]))
        # The status of a region that is not registered is NOT_FOUND (404), as Triton's.
        unknown_ok = {404} if name == "GET /v2/systemsharedmemory/region/{r}/status" else set()
        assert right not in {401, 403, 404} - unknown_ok, f"{name}: {right}"
    # The walk unloaded add_sub; load it back for the tests after this one.
    assert http_call(secured.http_port, "POST", "/v2/repository/models/add_sub/load",
                     {"Authorization": f"Bearer {KEYS['admin']}"}) == 200


def test_infer_key_serves_tritonclient(secured):
    import numpy as np
    import tritonclient.grpc as grpcclient
    c = grpcclient.InferenceServerClient(url=secured.url)
    a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
    b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    out = c.infer("add_sub", [a, b], headers={"authorization": f"Bearer {KEYS['infer']}"})
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), np.arange(16, dtype=np.float32).reshape(1, 16) + 1)
    with pytest.raises(Exception, match="UNAUTHENTICATED|needs an API key"):
        c.infer("add_sub", [a, b])
    c.close()


def test_kiln_viz_parameter_needs_admin(secured):
    """Recording a request for /viz (parameters.kiln_viz) needs the admin role besides infer's:
    PERMISSION_DENIED / 403 naming the parameter for an infer-only key, served for infer+admin."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    c = grpcclient.InferenceServerClient(url=secured.url)
    a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.zeros((1, 16), np.float32))
    b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    with pytest.raises(Exception) as refused:
        c.infer("add_sub", [a, b], parameters={"kiln_viz": True},
                headers={"authorization": f"Bearer {KEYS['infer']}"})
    assert "PERMISSION_DENIED" in str(refused.value) or "StatusCode.PERMISSION_DENIED" in repr(refused.value)
    assert "ModelInfer parameters.kiln_viz' needs role 'admin'" in str(refused.value), str(refused.value)
    c.infer("add_sub", [a, b], parameters={"kiln_viz": False}, headers={"authorization": f"Bearer {KEYS['infer']}"})
    # reduce_sum has not run in this kilnd yet: its compiles are recorded (add_sub's kernels exist already; the refused
    # request and the one with kiln_viz false record nothing).
    x = grpcclient.InferInput("X", [3, 8], "FP32")
    x.set_data_from_numpy(np.arange(24, dtype=np.float32).reshape(3, 8))
    out = c.infer("reduce_sum", [x], parameters={"kiln_viz": True},
                  headers={"authorization": f"Bearer {KEYS['infer,admin']}"})
    np.testing.assert_array_equal(out.as_numpy("SUM")[:, 0], np.arange(24, dtype=np.float32).reshape(3, 8).sum(1))
    c.close()
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16},
                                  {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}],
                       "parameters": {"kiln_viz": True}})
    for key, want in ((KEYS["infer"], 403), (KEYS["infer,admin"], 200)):
        conn = http.client.HTTPConnection("127.0.0.1", secured.http_port, timeout=20)
        conn.request("POST", "/v2/models/add_sub/infer", body=body,
                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        r = conn.getresponse()
        text = r.read()
        conn.close()
        assert r.status == want, text
        if want == 403:
            assert b"infer parameters.kiln_viz' needs role 'admin'" in text, text
    # What was recorded is on /viz for an admin.
    conn = http.client.HTTPConnection("127.0.0.1", secured.http_port, timeout=20)
    conn.request("GET", "/viz/api/kernels", headers={"Authorization": f"Bearer {KEYS['admin']}"})
    r = conn.getresponse()
    doc = json.loads(r.read())
    conn.close()
    assert r.status == 200 and {k["label"] for k in doc["kernels"]} == {"reduce_sum", "add_sub"}, doc
    # reduce_sum's were compiled by its recorded request; add_sub's were compiled unrecorded and reused by the admin's
    # recorded REST request: recorded then, marked reused.
    assert all(k["reused"] == (k["label"] == "add_sub") for k in doc["kernels"]), doc


def test_sighup_reloads_keys(secured):
    live = "/inference.GRPCInferenceService/ServerLive"
    write_keys(secured.keyfile, {**KEYS, "infer": "k-rotated-infer"})
    secured.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while grpc_call(secured, live, "k-rotated-infer") != grpc.StatusCode.OK and time.monotonic() < deadline:
        time.sleep(0.05)
    assert grpc_call(secured, live, "k-rotated-infer") == grpc.StatusCode.OK
    assert grpc_call(secured, live, KEYS["infer"]) == grpc.StatusCode.UNAUTHENTICATED
    # A broken file keeps the previous keys.
    secured.keyfile.write_text("infer not-a-hash\n")
    secured.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert grpc_call(secured, live, "k-rotated-infer") == grpc.StatusCode.OK
    assert "keeping the previous keys" in secured.logs()
    write_keys(secured.keyfile, KEYS)
    secured.proc.send_signal(signal.SIGHUP)


def test_keys_never_reach_the_log(secured):
    """After the walks above (every key sent to every endpoint, refused calls logged at --debug)."""
    for key in (*KEYS.values(), "not-a-key", "k-rotated-infer"):
        grpc_call(secured, "/inference.GRPCInferenceService/RepositoryIndex", key)
    log = secured.logs()
    assert "refused" in log  # the refusals were logged ...
    for key in (*KEYS.values(), "not-a-key", "k-rotated-infer"):
        assert key not in log  # ... without the keys


def test_restricted_protocols(models):
    server = Kilnd(models, ["--grpc-restricted-protocol=model-repository,kiln-graph:admin-key=s3cret",
                            "--http-restricted-api=model-repository:admin-key=s3cret"])
    try:
        index = "/inference.GRPCInferenceService/RepositoryIndex"
        with grpc.insecure_channel(server.url) as ch:
            call = ch.unary_unary(index, request_serializer=lambda b: b, response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as e:
                call(b"", timeout=20)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "admin-key" in e.value.details()
            with pytest.raises(grpc.RpcError) as e:
                call(b"", metadata=[("admin-key", "wrong")], timeout=20)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            call(b"", metadata=[("admin-key", "s3cret")], timeout=20)
        assert grpc_call(server, "/inference.GRPCInferenceService/ServerLive", None) == grpc.StatusCode.OK
        assert http_call(server.http_port, "POST", "/v2/repository/index", {}) == 403
        assert http_call(server.http_port, "POST", "/v2/repository/index", {"admin-key": "s3cret"}) == 200
        assert http_call(server.http_port, "GET", "/v2/health/ready", {}) == 200
    finally:
        assert server.stop() == 0


def test_no_keys_means_loopback_only(models):
    addresses = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    other = next((a for a in addresses if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", a) and not a.startswith("127.")), None)
    server = Kilnd(models, ["--grpc-address=0.0.0.0"])
    try:
        assert "loopback (127.0.0.1) only" in server.logs()
        assert grpc_call(server, "/inference.GRPCInferenceService/ServerLive", None) == grpc.StatusCode.OK
        if other is not None:
            with pytest.raises(OSError):
                socket.create_connection((other, server.port), timeout=5).close()
    finally:
        assert server.stop() == 0
    opened = Kilnd(models, ["--grpc-address=0.0.0.0", "--allow-unauthenticated"])
    try:
        assert "--allow-unauthenticated" in opened.logs()
        if other is not None:
            socket.create_connection((other, opened.port), timeout=5).close()
    finally:
        assert opened.stop() == 0


def test_per_key_rate_and_concurrency_limits(models, tmp_path):
    """--api-key-rate-limit and --api-key-max-concurrent: 429 with Retry-After over HTTP,
    RESOURCE_EXHAUSTED over gRPC, counted in kiln_auth_refusals_total; other keys unaffected."""
    keyfile = tmp_path / "keys.txt"
    write_keys(keyfile, {**KEYS, "infer,admin": "k-other-key"})
    metrics_port = _free_port()
    server = Kilnd(models, [f"--api-keys-file={keyfile}", "--api-key-rate-limit=2", "--api-key-max-concurrent=1",
                            f"--metrics-port={metrics_port}"])
    try:
        bearer = {"Authorization": f"Bearer {KEYS['infer']}"}
        ready = "/v2/health/ready"
        # A request whose body is still arriving holds the key's one concurrent slot.
        held = socket.create_connection(("127.0.0.1", server.http_port), timeout=20)
        held.sendall((f"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEYS['infer']}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{").encode())
        time.sleep(0.3)
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
        conn.request("GET", ready, headers=bearer)
        r = conn.getresponse()
        body = r.read().decode()
        assert r.status == 429 and r.getheader("Retry-After") == "1", body
        assert "--api-key-max-concurrent" in body and KEYS["infer"] not in body
        assert http_call(server.http_port, "GET", ready, {"Authorization": "Bearer k-other-key"}) == 200
        held.close()  # the slot comes back when the connection goes
        time.sleep(1.2)  # and the rate bucket refills
        codes = [http_call(server.http_port, "GET", ready, bearer) for _ in range(3)]
        assert codes[:2] == [200, 200] and codes[2] == 429, codes
        assert grpc_call(server, "/inference.GRPCInferenceService/ServerLive", KEYS["infer"]) == \
            grpc.StatusCode.RESOURCE_EXHAUSTED
        time.sleep(1.1)
        assert http_call(server.http_port, "GET", ready, bearer) == 200
        assert http_call(server.http_port, "GET", ready, {}) == 401
        with urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{metrics_port}/metrics",
                headers={"Authorization": "Basic " + base64.b64encode(f"p:{KEYS['metrics']}".encode()).decode()}),
                timeout=10) as m:
            text = m.read().decode()
        counts = {line.split('"')[1]: float(line.split()[-1]) for line in text.splitlines()
                  if line.startswith("kiln_auth_refusals_total{")}
        assert counts["concurrency"] >= 1 and counts["rate"] >= 2 and counts["unauthenticated"] >= 1, counts
    finally:
        assert server.stop() == 0
