"""kilnd's REST gateway against hostile clients (issue #26), over raw sockets: request-smuggling
material refused with 400 and the connection closed (the smuggled request never answered), a
response to every request followed at once by the client's half-close, the connection caps and
deadlines, and healthy REST calls that all succeed while 200 slow clients drip bytes and 70
training event streams stay open. Latencies are printed, never asserted (tests/bench/
rest_slow_clients.py is the benchmark)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from kilnd_launcher import Kilnd
from slow_clients import HealthyClient, SlowClients, add_sub_request, open_event_streams

SMUGGLED = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"  # must never be answered


def exchange(port, payload: bytes, half_close=False, host="127.0.0.1", timeout=10.0) -> bytes:
    """Sends `payload` (then shuts the sending side down if asked) and reads until the server
    closes; the raw bytes received."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.sendall(payload)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        return data
    finally:
        s.close()


def responses(data: bytes):
    """[(status, body)] of the HTTP/1.1 responses (with Content-Length) in `data`."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep and head.startswith(b"HTTP/1.1 "), data[:300]
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        out.append((int(head.split(b" ")[1]), rest[:length]))
        data = rest[length:]
    return out


def healthy(port):
    body, want0, _ = add_sub_request()
    (status, data), = responses(exchange(port, b"POST /v2/models/add_sub/infer HTTP/1.1\r\n"
                                         b"Host: x\r\nConnection: close\r\nContent-Length: " +
                                         str(len(body)).encode() + b"\r\n\r\n" + body))
    assert status == 200, data
    out = {o["name"]: o["data"] for o in json.loads(data)["outputs"]}
    np.testing.assert_array_equal(np.array(out["OUTPUT0"], np.float32).reshape(1, 16), want0)


POST_INDEX = b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
CHUNKED = POST_INDEX + b"Transfer-Encoding: chunked\r\n\r\n"

SMUGGLING_CASES = [
    # (name, request bytes, words of the 400's error)
    ("two conflicting Content-Length", POST_INDEX + b"Content-Length: 2\r\nContent-Length: 40\r\n"
     b"\r\n{}", ["Content-Length: sent 2 times"]),
    ("two equal Content-Length", POST_INDEX + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
     ["Content-Length: sent 2 times"]),
    ("Content-Length list", POST_INDEX + b"Content-Length: 2, 2\r\n\r\n{}",
     ["Content-Length", "non-negative integer"]),
    ("Content-Length with Transfer-Encoding", POST_INDEX + b"Content-Length: 7\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", ["Content-Length and Transfer-Encoding"]),
    ("Transfer-Encoding with Content-Length", POST_INDEX + b"Transfer-Encoding: chunked\r\n"
     b"Content-Length: 7\r\n\r\n2\r\n{}\r\n0\r\n\r\n", ["Content-Length and Transfer-Encoding"]),
    ("Transfer-Encoding gzip", POST_INDEX + b"Transfer-Encoding: gzip\r\n\r\n{}", ["only chunked"]),
    ("Transfer-Encoding chunked, identity", POST_INDEX + b"Transfer-Encoding: chunked, identity"
     b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n", ["only chunked"]),
    ("Transfer-Encoding twice", POST_INDEX + b"Transfer-Encoding: chunked\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", ["Transfer-Encoding: sent 2 times"]),
    ("HTTP/1.1 without Host", b"GET /v2/health/ready HTTP/1.1\r\n\r\n", ["Host: missing"]),
    ("Host twice", b"GET /v2/health/ready HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
     ["Host: sent 2 times"]),
    ("bare LF line endings", b"GET /v2/health/ready HTTP/1.1\nHost: x\n\n", ["bare LF"]),
    ("bare CR in a header", b"GET /v2/health/ready HTTP/1.1\r\nHost: x\rX: y\r\n\r\n",
     ["CR not followed by LF"]),
    ("obs-fold", b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", ["obs-fold"]),
    ("LF-only chunk framing", CHUNKED + b"2\n{}\n0\n\n", ["chunked framing", "bare LF"]),
    ("LF after chunk data", CHUNKED + b"2\r\n{}\n0\r\n\r\n", ["not followed by CRLF"]),
    ("LF-only last chunk", CHUNKED + b"2\r\n{}\r\n0\n\n", ["bare LF"]),
    ("LF-only end of body", CHUNKED + b"2\r\n{}\r\n0\r\n\n", ["bare LF ending the body"]),
    ("chunk size not hex", CHUNKED + b"zz\r\n{}\r\n0\r\n\r\n", ["not hexadecimal"]),
    ("negative chunk size", CHUNKED + b"-2\r\n{}\r\n0\r\n\r\n", ["not hexadecimal"]),
    ("chunk size overflow", CHUNKED + b"1" * 17 + b"\r\n{}\r\n0\r\n\r\n", ["16 hex digits"]),
    ("whitespace after chunk size", CHUNKED + b"2 \r\n{}\r\n0\r\n\r\n", ["whitespace"]),
]


@pytest.fixture(scope="module")
def server(models):
    s = Kilnd(models, ["--metrics-port=-1"])
    yield s
    assert s.stop() == 0


@pytest.mark.parametrize("name,payload,words", SMUGGLING_CASES, ids=[c[0] for c in SMUGGLING_CASES])
def test_smuggling_material_is_400_and_closes(server, name, payload, words):
    got = responses(exchange(server.http_port, payload + SMUGGLED))
    assert len(got) == 1, (name, got)  # the smuggled request after it is never answered
    status, body = got[0]
    assert status == 400, (name, status, body)
    message = json.loads(body)["error"]
    for w in words:
        assert w in message, (name, message)
    healthy(server.http_port)


def test_every_request_answered_after_half_close(server):
    """Each request is sent and the client's sending side shut at once (FIN right behind the
    request): all 200 get their response (cpp-httplib dropped 60 of 200)."""
    body, want0, _ = add_sub_request()
    infer = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " +
             str(len(body)).encode() + b"\r\n\r\n" + body)
    ready = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    answered = 0
    for i in range(200):
        got = responses(exchange(server.http_port, infer if i % 2 else ready, half_close=True))
        assert len(got) == 1 and got[0][0] == 200, (i, got)
        if i % 2:
            out = {o["name"]: o["data"] for o in json.loads(got[0][1])["outputs"]}
            np.testing.assert_array_equal(np.array(out["OUTPUT0"], np.float32).reshape(1, 16),
                                          want0)
        answered += 1
    print(f"\nhalf-close: {answered}/200 answered")
    # Pipelined, then half-closed: both answered, in order.
    got = responses(exchange(server.http_port, ready + infer, half_close=True))
    assert [s for s, _ in got] == [200, 200]


def test_expect_continue_and_head(server):
    body, _, _ = add_sub_request()
    s = socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
    s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    assert s.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(body + b"HEAD /v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200")
    n = int([l for l in first.split(b"\r\n") if l.lower().startswith(b"content-length")][0]
            .split(b":")[1])
    head = rest[n:]
    # HEAD: GET's headers (its Content-Length) without the body.
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n"), head
    assert b"Content-Length: " in head and not head.endswith(b"Content-Length: 0\r\n\r\n")


def test_error_after_head_carries_its_body(server):
    """A request whose head does not parse, right after a HEAD: its 400 has its JSON body (the
    connection kept HEAD's no-body flag and sent the 400 without one; found by tests/fuzz/net)."""
    got = responses(exchange(server.http_port, b"HEAD /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"GET /v2 HTTP/1.1\r\nno colon\r\n\r\n", half_close=True))
    assert [status for status, _ in got] == [200, 400], got
    assert "without ':'" in json.loads(got[1][1])["error"]


def connected(port, host="127.0.0.1", source="127.0.0.1"):
    """A keep-alive connection from `source` that has been served once (so the server counts it)."""
    s = socket.create_connection((host, port), timeout=10, source_address=(source, 0))
    s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    assert data.startswith(b"HTTP/1.1 200"), data
    return s


def _exchange_from(port, source):
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return data


def test_connection_caps(models):
    s = Kilnd(models, ["--metrics-port=-1", "--http-max-connections=12",
                       "--http-max-connections-per-client=8", "--http-keep-alive-timeout-s=60"])
    held = []
    try:
        port = s.http_port
        held += [connected(port) for _ in range(8)]
        ((status, body),) = responses(_exchange_from(port, "127.0.0.1"))
        assert status == 503, body
        assert "too many connections from 127.0.0.1 (the limit is 8" in json.loads(body)["error"]
        # Another client address still gets in, up to the global cap.
        held += [connected(port, source="127.0.0.2") for _ in range(4)]
        ((status, body),) = responses(_exchange_from(port, "127.0.0.3"))
        assert status == 503 and "too many connections (the limit is 12" in body.decode(), body
        # A closed connection frees its place (the server notices the close asynchronously).
        held.pop(0).close()
        deadline = time.monotonic() + 10
        while True:
            got = responses(_exchange_from(port, "127.0.0.1"))
            if got[0][0] == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert got[0][0] == 200, got
    finally:
        for c in held:
            c.close()
        assert s.stop() == 0


def drip(port, data: bytes, every: float, prefix: bytes = b"", limit: float = 15.0):
    """Sends `prefix` at once, then `data` one byte every `every` seconds until the server
    closes; (bytes of `data` sent, bytes received, seconds until closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=limit)
    s.sendall(prefix)
    s.setblocking(False)
    start = time.monotonic()
    sent, received = 0, b""
    try:
        while time.monotonic() - start < limit:
            try:
                chunk = s.recv(65536)
                if not chunk:
                    return sent, received, time.monotonic() - start
                received += chunk
            except BlockingIOError:
                pass
            except ConnectionResetError:
                return sent, received, time.monotonic() - start
            if sent < len(data):
                try:
                    s.send(data[sent:sent + 1])
                    sent += 1
                except OSError:
                    return sent, received, time.monotonic() - start
            time.sleep(every)
        raise AssertionError(f"not closed within {limit} s (sent {sent} bytes)")
    finally:
        s.close()


def test_deadlines(models):
    s = Kilnd(models, ["--metrics-port=-1", "--http-header-timeout-ms=1000",
                       "--http-body-timeout-ms=1500", "--http-timeout-ms=800",
                       "--http-keep-alive-timeout-s=1", "--grpc-handshake-timeout-ms=1000"])
    try:
        # gRPC: connections that stop inside the HTTP/2 preface, or send it without the SETTINGS
        # frame that must follow, are closed at the handshake deadline (gRPC's default held them
        # 120 s; found by tests/fuzz/net).
        for partial in (b"", b"PRI * HTTP/2.0\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"):
            g = socket.create_connection(("127.0.0.1", s.port), timeout=15)
            start = time.monotonic()
            g.sendall(partial)
            while g.recv(4096):  # the server's SETTINGS and GOAWAY, then the close
                pass
            print(f"\ngRPC handshake deadline 1 s, {len(partial)} bytes of preface: closed after "
                  f"{time.monotonic() - start:.2f} s")
            g.close()
        port = s.http_port
        # A head dripped one byte every 0.2 s (each byte within the 800 ms read timeout) is cut at
        # the 1 s header deadline, without a response, long before it could complete.
        head = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 200 + b"\r\n\r\n"
        sent, received, took = drip(port, head, 0.2)
        assert received == b"" and sent < len(head), (sent, received)
        print(f"\nheader deadline 1 s: closed after {took:.2f} s, {sent} bytes")
        # A body dripped the same way is cut at the body deadline.
        sent, received, took = drip(port, b" " * 300, 0.2,
                                    prefix=POST_INDEX + b"Content-Length: 300\r\n\r\n")
        assert received == b"" and sent < 300, (sent, received)
        print(f"body deadline 1.5 s: closed after {took:.2f} s, {sent} bytes")
        # An idle keep-alive connection is closed after --http-keep-alive-timeout-s.
        c = connected(port)
        start = time.monotonic()
        c.settimeout(15)
        assert c.recv(4096) == b""
        print(f"keep-alive idle 1 s: closed after {time.monotonic() - start:.2f} s")
        c.close()
        # A slow but complete request inside the deadlines is served.
        sent, received, _ = drip(port, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n"
                                 b"Connection: close\r\n\r\n", 0.005)
        assert received.startswith(b"HTTP/1.1 200"), received
        healthy(port)
    finally:
        assert s.stop() == 0


FASHION_SPEC = {"architecture": "mlp", "mlpSizes": [784, 16, 10], "batchSize": 8,
                "steps": 1000000, "checkpointInterval": 0, "outputModel": "robust_mlp", "evalImages": 100, "seed": 3,
                "dataset": {"idxDir": "fashion-mnist"}}


def post_json(port, path, obj):
    body = json.dumps(obj).encode()
    ((status, data),) = responses(exchange(port, b"POST " + path.encode() + b" HTTP/1.1\r\n"
                                           b"Host: x\r\nConnection: close\r\nContent-Length: " +
                                           str(len(body)).encode() + b"\r\n\r\n" + body))
    return status, json.loads(data)


def test_slow_clients_and_open_streams_do_not_starve_rest(models, tmp_path):
    """200 connections dripping a byte every 2 s (half a head, half a body) and 70 open event
    streams nobody reads, while a healthy client calls REST back to back for 12 s: every call
    succeeds with the right answer (cpp-httplib: every call timed out)."""
    data = tmp_path / "data"
    data.mkdir()
    s = Kilnd(models, ["--metrics-port=-1", f"--data-dir={data}", "--resume-jobs=false"])
    slow, streams = None, []
    try:
        port = s.http_port
        baseline = HealthyClient(port).run(3)
        assert baseline.failures == [], baseline.failures[:5]
        # A running job and a queued one behind it: the queued job's streams stay open and idle.
        status, running = post_json(port, "/v1/training/jobs", FASHION_SPEC)
        assert status == 200, running
        status, queued = post_json(port, "/v1/training/jobs", {**FASHION_SPEC, "seed": 4})
        assert status == 200 and queued["state"] == "QUEUED", queued
        streams = open_event_streams(port, queued["id"], 70)
        slow = SlowClients(port, 200, interval=2.0).start()
        client = HealthyClient(port).run(12)
        assert client.failures == [], client.failures[:5]
        assert len(client.latencies) >= 10, len(client.latencies)
        # The attackers were still there at the end: streams open, slow clients connected.
        for sock in streams:
            sock.setblocking(False)
            try:
                assert sock.recv(65536) != b"", "an event stream was closed"
            except BlockingIOError:
                pass
        b50, b99 = baseline.percentiles()
        p50, p99 = client.percentiles()
        print(f"\nhealthy REST (infer + ready): alone p50 {b50:.1f} ms p99 {b99:.1f} ms "
              f"({len(baseline.latencies)} calls); with 200 slow clients + 70 streams p50 "
              f"{p50:.1f} ms p99 {p99:.1f} ms ({len(client.latencies)} calls); slow clients "
              f"reopened {slow.reopened}, refused {slow.refused}, bytes dripped {slow.sent}")
    finally:
        if slow is not None:
            slow.stop()
        for sock in streams:
            sock.close()
        for job in ("queued", "running"):
            j = locals().get(job)
            if isinstance(j, dict) and "id" in j:
                try:
                    post_json(s.http_port, f"/v1/training/jobs/{j['id']}:cancel", {})
                except OSError:
                    pass  # a starved server (the test failing) must still be stopped below
        assert s.stop() == 0
