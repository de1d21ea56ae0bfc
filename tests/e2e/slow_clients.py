"""Hostile HTTP clients for kilnd's REST gateway, shared by tests/e2e/test_kilnd_http_robust.py and
tests/bench/rest_slow_clients.py: slowloris connections that drip a request one byte at a time,
open training event streams nobody reads, and a healthy client whose REST calls are timed."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import numpy as np


class SlowClients:
    """`n` connections that each send one byte every `interval` seconds, from one thread. Half
    drip a request head that never ends (slowloris), half send a head announcing a 1 MB body and
    drip the body. A connection the server closes (a deadline) is opened again, as an attacker
    would; `reopened` counts those, `refused` the 503 answers (a connection cap)."""

    HEAD = b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nX-Slow: "
    BODY_HEAD = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: 1000000\r\n\r\n{\"inputs\": [")

    def __init__(self, port: int, n: int, interval: float = 2.0, host: str = "127.0.0.1"):
        self.port, self.n, self.interval, self.host = port, n, interval, host
        self.reopened = 0
        self.refused = 0
        self.sent = 0
        self._stop = threading.Event()
        self._socks: list[tuple[socket.socket, bool, int]] = []  # (socket, body kind, position)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, body: bool):
        s = socket.create_connection((self.host, self.port), timeout=10)
        if body:
            s.sendall(self.BODY_HEAD)
        s.setblocking(False)
        return (s, body, 0)

    def start(self):
        for i in range(self.n):
            self._socks.append(self._open(body=i % 2 == 1))
        self._thread.start()
        return self

    def _gone(self, s: socket.socket) -> bool:
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if data.startswith(b"HTTP/1.1 503"):
            self.refused += 1
        return True  # EOF, or a response: the server is done with this connection

    def _run(self):
        while not self._stop.is_set():
            start = time.monotonic()
            for i, (s, body, pos) in enumerate(self._socks):
                if self._stop.is_set():
                    break
                if self._gone(s):
                    s.close()
                    try:
                        self._socks[i] = self._open(body)
                        self.reopened += 1
                    except OSError:
                        continue
                    s, body, pos = self._socks[i]
                if body:
                    byte = b"1"
                else:
                    byte = self.HEAD[pos:pos + 1] if pos < len(self.HEAD) else b"a"
                try:
                    s.send(byte)
                    self.sent += 1
                except OSError:
                    continue
                self._socks[i] = (s, body, pos + 1)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - start)))

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=30)
        for s, _, _ in self._socks:
            s.close()


def open_event_streams(port: int, job_id: str, n: int, host: str = "127.0.0.1"):
    """`n` Server-Sent Event streams of a job, each read up to its response head and then left
    unread (the client holds them open). Returns the sockets."""
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=30)
        s.sendall(f"GET /v1/training/jobs/{job_id}/events HTTP/1.1\r\nHost: x\r\n"
                  "Accept: text/event-stream\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                raise AssertionError(f"event stream closed before its head: {head!r}")
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        socks.append(s)
    return socks


def add_sub_request(batch: int = 1):
    a = np.arange(batch * 16, dtype=np.float32).reshape(batch, 16)
    b = np.full((batch, 16), 2.0, dtype=np.float32)
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [batch, 16], "datatype": "FP32", "data": a.flatten().tolist()},
        {"name": "INPUT1", "shape": [batch, 16], "datatype": "FP32", "data": b.flatten().tolist()},
    ]}).encode()
    return body, a + b, a - b


class HealthyClient:
    """REST calls back to back on one keep-alive connection for `seconds`: add_sub inference
    (checked against numpy) and the readiness probe. Records each call's latency and every
    failure (a status other than 200, a wrong answer, a timeout or a dropped connection)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0):
        self.port, self.host, self.timeout = port, host, timeout
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.failed_calls = 0
        self._conn = None

    def _call(self, method, path, body=None, headers=None):
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=body, headers=headers or {})
                r = self._conn.getresponse()
                return r.status, r.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                # A keep-alive connection the server closed while idle: reconnect once.
                self._conn.close()
                self._conn = None
                if attempt == 1:
                    raise e
        raise AssertionError("unreachable")

    def one(self):
        body, want0, want1 = add_sub_request()
        failures = len(self.failures)
        start = time.monotonic()
        try:
            status, data = self._call("POST", "/v2/models/add_sub/infer", body)
            if status != 200:
                self.failures.append(f"infer: {status} {data[:200]!r}")
            else:
                out = {o["name"]: np.array(o["data"], np.float32).reshape(1, 16)
                       for o in json.loads(data)["outputs"]}
                if not (np.array_equal(out["OUTPUT0"], want0)
                        and np.array_equal(out["OUTPUT1"], want1)):
                    self.failures.append("infer: wrong answer")
            status, data = self._call("GET", "/v2/health/ready")
            if status != 200:
                self.failures.append(f"ready: {status}")
        except (OSError, http.client.HTTPException) as e:
            self.failures.append(f"{type(e).__name__}: {e}")
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self.latencies.append(time.monotonic() - start)
        self.failed_calls += len(self.failures) > failures

    def run(self, seconds: float, pause: float = 0.0):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.one()
            if pause:
                time.sleep(pause)
        if self._conn is not None:
            self._conn.close()
        return self

    def percentiles(self):
        if not self.latencies:
            return float("nan"), float("nan")
        ms = np.array(self.latencies) * 1000
        return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))
