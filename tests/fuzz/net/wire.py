"""One network-fuzz case on the wire: what it sends, how it is run against a port, and the oracle.

A `Case` is a script of steps per connection: ("send", bytes), ("sleep", seconds), ("shut_wr",)
(half-close). `conns` copies of the script run at once (slowloris holds several connections). A case
is judged by what came back:

- HTTP/1.1 (`transport == "http"`): the server must close every connection within the case's
  deadline (it answers and closes, or a keep-alive / header / body / progress timeout closes it);
  a connection still open at the deadline is a hang. Every response must be 1xx-4xx or a 503
  (the connection caps); any other 5xx is a finding, and so is an error response (>= 400) whose
  body is not JSON `{"error": "<non-empty message>"}`. Cases marked `expect == "error"` are
  certainly invalid: their first response must not be 2xx.
- HTTP/2 to gRPC (`transport == "h2"`): each script ends with a PING whose payload names the case;
  the connection is alive if the server answers it (PING ACK) and dead-but-handled if it sends
  GOAWAY or closes. Neither within the deadline is a hang. Every stream the case ended
  (END_STREAM, no RST_STREAM) must be answered (trailers with grpc-status, or RST_STREAM) unless
  the connection went away; a grpc-status of INTERNAL or UNKNOWN whose message carries kilnd's
  "request id" (an exception escaped a handler) is a finding.

Cases serialize to JSON (bytes base64) so a finding can be replayed exactly (`netfuzz.py --replay`).
"""

from __future__ import annotations

import base64
import json
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import hpack


@dataclass
class Case:
    seed: int
    index: int
    transport: str  # "http" (REST port) or "h2" (gRPC port)
    kind: str       # generator name, e.g. "http.chunked" or "h2.rapid_reset"
    steps: list     # [("send", bytes) | ("sleep", float) | ("shut_wr",)]
    conns: int = 1
    # "any"; "error" (http: the first response is not 2xx); "close" (slowloris: the server closes
    # every connection before the script's dribble ends, by its own deadline)
    expect: str = "any"
    note: str = ""       # what the generator did, for the report

    def to_json(self) -> dict:
        steps = [[s[0], base64.b64encode(s[1]).decode()] if s[0] == "send" else list(s) for s in self.steps]
        return {"seed": self.seed, "index": self.index, "transport": self.transport, "kind": self.kind,
                "conns": self.conns, "expect": self.expect, "note": self.note, "steps": steps}

    @staticmethod
    def from_json(d: dict) -> "Case":
        steps = [("send", base64.b64decode(s[1])) if s[0] == "send" else tuple(s) for s in d["steps"]]
        return Case(d["seed"], d["index"], d["transport"], d["kind"], steps, d.get("conns", 1),
                    d.get("expect", "any"), d.get("note", ""))

    def sent_bytes(self) -> int:
        return sum(len(s[1]) for s in self.steps if s[0] == "send") * self.conns

    def script_seconds(self) -> float:
        return sum(s[1] for s in self.steps if s[0] == "sleep")


def write_case(case: Case, path: Path, problem: str) -> None:
    d = case.to_json()
    d["problem"] = problem
    path.write_text(json.dumps(d, indent=1) + "\n")


@dataclass
class Outcome:
    problems: list = field(default_factory=list)  # findings (empty: the case passed)
    statuses: list = field(default_factory=list)  # HTTP statuses, or "grpc-status N" / "GOAWAY" / "PING"
    seconds: float = 0.0


# ** HTTP/1.1 responses **

def http_responses(data: bytes) -> list:
    """[(status, head, body)] of the responses in `data`, loosely: a response to HEAD has a
    Content-Length but no body, so when the bytes after a head start another response (or end),
    the body is taken as empty and `body` is None. Stops at bytes that do not start a response."""
    out = []
    while data.startswith(b"HTTP/"):
        head, sep, rest = data.partition(b"\r\n\r\n")
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            break
        length = None
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                try:
                    length = int(v)
                except ValueError:
                    length = None
        if not sep:
            out.append((status, head, b""))
            break
        if length and (not rest or (rest.startswith(b"HTTP/") and not rest[length:].startswith(b"HTTP/"))):
            out.append((status, head, None))  # HEAD's answer: the length of the GET's body, none sent
            data = rest
            continue
        if 100 <= status < 200 or status in (204, 304):
            length = 0
        elif length is None:
            length = len(rest)
        out.append((status, head, rest[:length]))
        data = rest[length:]
    return out


def judge_http(case: Case, data: bytes, problems: list, statuses: list) -> None:
    got = http_responses(data)
    if data and not got:
        problems.append(f"answer that is not HTTP: {data[:80]!r}")
    sent = b"".join(s[1] for s in case.steps if s[0] == "send")
    for i, (status, head, body) in enumerate(got):
        statuses.append(status)
        if body is None:
            # A framing error (400, 414, 431 and close) comes before the method is known: it
            # always has its body, also right after a HEAD (the bug of regressions/head-then-*).
            framing = status in (400, 414, 431) and b"connection: close" in head.lower()
            if b"HEAD " not in sent or framing:
                problems.append(f"HTTP {status} without the body its Content-Length announces: {head[:120]!r}")
            continue
        if status >= 500 and status != 503:
            problems.append(f"HTTP {status}: {body[:200]!r}")
        # Readiness probes answer "not ready" with an empty 400, as Triton's do.
        probe = status == 400 and not body and (b"/ready " in sent or b"/live " in sent)
        if status >= 400 and b"text/event-stream" not in head and not probe:
            try:
                message = json.loads(body).get("error")
            except (ValueError, AttributeError):
                message = None
            if not isinstance(message, str) or not message:
                problems.append(f"HTTP {status} without a JSON error message: {body[:120]!r}")
        if i == 0 and case.expect == "error" and 200 <= status < 300:
            problems.append(f"invalid request answered {status}")


# ** HTTP/2 frames **

H2_DATA, H2_HEADERS, H2_RST, H2_SETTINGS, H2_PING, H2_GOAWAY, H2_CONTINUATION = 0, 1, 3, 4, 6, 7, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20


def ping_payload(case: Case) -> bytes:
    return b"nf" + struct.pack(">I", case.index & 0xFFFFFFFF) + b"!!"


class H2Reader:
    """Parses the frames a server sends on one connection and records what the oracle needs."""

    def __init__(self, ping: bytes):
        self.buf = b""
        self.ping = ping
        self.ping_acked = False
        self.goaway = None  # (error code, debug data)
        self.answered: set[int] = set()  # streams with trailers (END_STREAM) or RST_STREAM
        self.grpc: list[tuple[int, str, str]] = []  # (stream, grpc-status, grpc-message)
        self.decoder = hpack.Decoder()
        self.block = b""
        self.block_stream = 0
        self.block_end = False
        self.bad_hpack = False

    def feed(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                return
            ftype, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            self._frame(ftype, flags, stream, payload)

    def _frame(self, ftype, flags, stream, payload):
        if ftype == H2_PING and flags & ACK and payload == self.ping:
            self.ping_acked = True
        elif ftype == H2_GOAWAY:
            code = int.from_bytes(payload[4:8], "big") if len(payload) >= 8 else -1
            self.goaway = (code, payload[8:200])
        elif ftype == H2_RST:
            self.answered.add(stream)
        elif ftype == H2_DATA and flags & END_STREAM:
            self.answered.add(stream)
        elif ftype in (H2_HEADERS, H2_CONTINUATION):
            if ftype == H2_HEADERS:
                if flags & PADDED and payload:
                    pad = payload[0]
                    payload = payload[1:len(payload) - pad]
                if flags & PRIORITY:
                    payload = payload[5:]
                self.block, self.block_stream, self.block_end = b"", stream, bool(flags & END_STREAM)
            self.block += payload
            if flags & END_HEADERS:
                self._headers(self.block_stream, self.block, self.block_end)

    def _headers(self, stream, block, end):
        try:
            fields = dict(self.decoder.decode(block, raw=False))
        except Exception:  # noqa: BLE001 - an undecodable block is recorded, never fatal here
            self.bad_hpack = True
            return
        if "grpc-status" in fields:
            self.grpc.append((stream, fields["grpc-status"], fields.get("grpc-message", "")))
        if end:
            self.answered.add(stream)


def _h2_client_frames(case: Case) -> tuple[list, bool]:
    """The frames of the case's bytes after the 24-byte preface, as the server would cut them:
    ([(type, flags, stream)], whether the cut ends exactly at the end of the bytes). A length over
    16384 (the default SETTINGS_MAX_FRAME_SIZE) ends the walk: the server answers it with GOAWAY."""
    data = b"".join(s[1] for s in case.steps if s[0] == "send")
    if not data.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"):
        return [], False
    data = data[24:]
    frames = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        if length > 16384:
            return frames, True
        if len(data) < 9 + length:
            break
        frames.append((data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF))
        data = data[9 + length:]
    return frames, not data


def _h2_streams_ended(case: Case) -> set[int]:
    """Client streams the case opens and ends (END_STREAM on HEADERS or DATA) without resetting
    them: calls the server must answer. Only new streams count: an odd id above every id opened
    before (RFC 9113 §5.1.1; another id is a protocol error, not a call)."""
    frames, _ = _h2_client_frames(case)
    opened, ended, reset = set(), set(), set()
    top = 0
    for ftype, flags, stream in frames:
        if ftype == H2_HEADERS and stream % 2 == 1 and stream > top:
            opened.add(stream)
            top = stream
        if ftype in (H2_DATA, H2_HEADERS) and flags & END_STREAM and stream in opened:
            ended.add(stream)
        if ftype == H2_RST:
            reset.add(stream)
    return ended - reset


def h2_ping_reachable(case: Case) -> bool:
    """Whether the server reads the case's last frame (the PING) as a frame: false when an earlier
    length lies so that the PING's bytes are taken as part of a frame still incomplete. Then the
    server is right to wait for more bytes; the connection is an idle one, not a hang."""
    return _h2_client_frames(case)[1]


# ** running a case **

def _run_connection(case: Case, port: int, deadline: float, result: dict) -> None:
    """Runs the case's script on one connection; fills result with the bytes received, whether the
    server closed, and (h2) the parsed frames."""
    reader = H2Reader(ping_payload(case)) if case.transport == "h2" else None
    received = bytearray()
    closed = False
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError as e:
        result.update(error=f"connect: {e}", data=b"", closed=True, reader=reader)
        return
    t0 = time.monotonic()
    s.setblocking(False)
    steps = list(case.steps)
    out = b""
    wake = 0.0
    can_send = True
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            while not out and steps and now >= wake:
                op = steps.pop(0)
                if op[0] == "send":
                    out = op[1] if can_send else b""
                elif op[0] == "sleep":
                    wake = now + float(op[1])
                elif op[0] == "shut_wr" and can_send:
                    try:
                        s.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    can_send = False
            if reader is not None and not steps and not out and (
                    reader.ping_acked or reader.goaway is not None):
                break
            wait = max(0.0, min(deadline, wake if steps and not out else deadline) - now)
            r, w, _ = select.select([s], [s] if out else [], [], min(wait, 0.5))
            if r:
                try:
                    data = s.recv(1 << 16)
                except (ConnectionResetError, OSError):
                    data = b""
                if not data:
                    closed = True
                    break
                received += data
                if reader is not None:
                    reader.feed(data)
            if w and out:
                try:
                    n = s.send(out[:1 << 16])
                    out = out[n:]
                except (BrokenPipeError, ConnectionResetError, OSError):
                    out, can_send = b"", False
        if reader is not None and not closed and reader.goaway is None:
            # Complete calls are answered after the PING ACK too: wait for them until the deadline.
            pending = _h2_streams_ended(case) - reader.answered
            while pending and time.monotonic() < deadline:
                r, _, _ = select.select([s], [], [], min(0.5, max(0.0, deadline - time.monotonic())))
                if not r:
                    continue
                try:
                    data = s.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    closed = True
                    break
                reader.feed(data)
                if reader.goaway is not None:
                    break
                pending = _h2_streams_ended(case) - reader.answered
    finally:
        s.close()
    result.update(data=bytes(received), closed=closed, reader=reader, closed_after=time.monotonic() - t0)


def run_case(case: Case, port: int, timeout: float) -> Outcome:
    """Runs `case` against 127.0.0.1:`port` (each connection in its own thread) and judges it.
    `timeout`: seconds after the script's own sleeps that the server has to finish."""
    t0 = time.monotonic()
    deadline = t0 + case.script_seconds() + timeout
    results = [{} for _ in range(case.conns)]
    threads = [threading.Thread(target=_run_connection, args=(case, port, deadline, r), daemon=True)
               for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline - time.monotonic() + 10)
    outcome = Outcome()
    for i, r in enumerate(results):
        tag = f"conn {i}: " if case.conns > 1 else ""
        if "data" not in r:
            outcome.problems.append(f"{tag}hang: the client thread did not finish")
            continue
        if "error" in r:
            outcome.problems.append(tag + r["error"])
            continue
        if case.expect == "close" and r["closed"] and r["closed_after"] >= case.script_seconds():
            outcome.problems.append(f"{tag}slowloris: the connection stayed open for the whole "
                                    f"{case.script_seconds():g} s dribble")
        if case.transport == "http":
            if not r["closed"]:
                outcome.problems.append(f"{tag}hang: connection still open {timeout:g} s after the script "
                                        f"({len(r['data'])} bytes received)")
            judge_http(case, r["data"], outcome.problems, outcome.statuses)
        else:
            _judge_h2(case, r, tag, timeout, outcome)
    outcome.seconds = time.monotonic() - t0
    return outcome


def _judge_h2(case: Case, r: dict, tag: str, timeout: float, outcome: Outcome) -> None:
    reader: H2Reader = r["reader"]
    if reader.goaway is not None:
        outcome.statuses.append(f"GOAWAY {reader.goaway[0]}")
    elif reader.ping_acked:
        outcome.statuses.append("PING")
    elif r["closed"]:
        outcome.statuses.append("closed")
    elif case.kind != "h2.idle" and not h2_ping_reachable(case):
        outcome.statuses.append("waiting for the rest of a frame")
    else:
        outcome.problems.append(f"{tag}hang: no PING ACK, GOAWAY or close {timeout:g} s after the script")
    for stream, status, message in reader.grpc:
        # UNKNOWN and INTERNAL are listed with their message (kilnd answers neither for bad input).
        outcome.statuses.append(f"grpc-status {status}" + (f" ({message[:50]})" if status in ("2", "13") else ""))
        if status in ("2", "13") and "request id" in message:
            outcome.problems.append(f"{tag}stream {stream}: grpc-status {status} from an escaped exception: "
                                    f"{message[:200]}")
    if reader.goaway is None and not r["closed"]:
        unanswered = _h2_streams_ended(case) - reader.answered
        if unanswered:
            outcome.problems.append(f"{tag}hang: complete calls on streams {sorted(unanswered)[:5]} never answered")
