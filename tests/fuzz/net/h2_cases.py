"""HTTP/2 case generators for the gRPC port, frames encoded by hand (RFC 9113 §4.1: a 9-byte header
of length, type, flags and stream id) so that any field can lie. Header blocks are HPACK literals
without indexing (RFC 7541 §6.2.2), which needs no encoder state. Each generator takes a
random.Random and returns (kind, steps, conns, expect, note) like http1_cases; netfuzz.py appends
the PING the oracle waits for (wire.py).

Families: bad prefaces, frame length lies, unknown frame types, SETTINGS floods and bad values,
WINDOW_UPDATE overflow, HEADERS without END_HEADERS and bogus CONTINUATION, DATA on idle or closed
streams, RST_STREAM floods (rapid reset), PING / PRIORITY / PUSH_PROMISE abuse, HPACK garbage, gRPC
length-prefix lies, protobuf byte mutations of a valid ModelInfer, huge metadata."""

from __future__ import annotations

import random
import struct

from tritonclient.grpc import service_pb2

from http1_cases import mutate

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY_F, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20
SERVICE = "/inference.GRPCInferenceService/"


def frame(ftype: int, flags: int, stream: int, payload: bytes = b"", length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return struct.pack(">I", n & 0xFFFFFF)[1:] + bytes([ftype & 0xFF, flags & 0xFF]) + \
        struct.pack(">I", stream & 0xFFFFFFFF) + payload


def settings(pairs: list[tuple[int, int]], flags: int = 0) -> bytes:
    return frame(SETTINGS, flags, 0, b"".join(struct.pack(">HI", k & 0xFFFF, v & 0xFFFFFFFF) for k, v in pairs))


def hpack_int(value: int, prefix: int, first: int = 0) -> bytes:
    top = (1 << prefix) - 1
    if value < top:
        return bytes([first | value])
    out = [first | top]
    value -= top
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_str(s: bytes) -> bytes:
    return hpack_int(len(s), 7) + s


def block(fields: list[tuple[bytes, bytes]]) -> bytes:
    """A header block of literals without indexing, new names."""
    return b"".join(b"\x00" + hpack_str(k) + hpack_str(v) for k, v in fields)


def grpc_fields(method: str = "ModelInfer", extra: list | None = None) -> list[tuple[bytes, bytes]]:
    return [(b":method", b"POST"), (b":scheme", b"http"), (b":path", (SERVICE + method).encode()),
            (b":authority", b"kiln"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
            *(extra or [])]


def grpc_message(msg: bytes, compressed: int = 0, length: int | None = None) -> bytes:
    return bytes([compressed]) + struct.pack(">I", (len(msg) if length is None else length) & 0xFFFFFFFF) + msg


def infer_request() -> bytes:
    r = service_pb2.ModelInferRequest(model_name="add_sub", id="netfuzz")
    for name in ("INPUT0", "INPUT1"):
        t = r.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        del t  # the raw contents below carry the data
    r.outputs.add(name="OUTPUT0")
    r.raw_input_contents.append(struct.pack("<16f", *range(16)))
    r.raw_input_contents.append(struct.pack("<16f", *[2.0] * 16))
    return r.SerializeToString()


def other_requests() -> list[tuple[str, bytes]]:
    return [
        ("ServerLive", service_pb2.ServerLiveRequest().SerializeToString()),
        ("ServerMetadata", service_pb2.ServerMetadataRequest().SerializeToString()),
        ("ModelMetadata", service_pb2.ModelMetadataRequest(name="add_sub").SerializeToString()),
        ("ModelConfig", service_pb2.ModelConfigRequest(name="add_sub").SerializeToString()),
        ("ModelStatistics", service_pb2.ModelStatisticsRequest(name="add_sub").SerializeToString()),
        ("RepositoryIndex", service_pb2.RepositoryIndexRequest().SerializeToString()),
        ("RepositoryModelLoad", service_pb2.RepositoryModelLoadRequest(model_name="no_such_model")
         .SerializeToString()),
        ("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest().SerializeToString()),
        ("SystemSharedMemoryRegister", service_pb2.SystemSharedMemoryRegisterRequest(
            name="r0", key="/kiln_netfuzz_none", offset=0, byte_size=64).SerializeToString()),
        ("ModelInfer", infer_request()),
    ]


def call(stream: int, method: str, msg: bytes, extra: list | None = None) -> bytes:
    """One complete unary call: HEADERS + DATA with END_STREAM."""
    return frame(HEADERS, END_HEADERS, stream, block(grpc_fields(method, extra))) + \
        frame(DATA, END_STREAM, stream, grpc_message(msg))


def start(rng: random.Random) -> bytes:
    """The preface and the client's SETTINGS (empty or with ordinary values)."""
    if rng.random() < 0.5:
        return PREFACE + settings([])
    return PREFACE + settings([(2, 0), (3, 100), (4, 1 << 20)])


def out(kind, data, note, conns=1):
    return kind, [("send", data)], conns, "any", note


# ** generators **

def gen_preface(rng):
    name = rng.choice(["mutated", "http1 request", "preface twice", "settings before preface", "random"])
    if name == "mutated":
        data = mutate(rng, PREFACE + settings([]), rng.randint(1, 3))
    elif name == "http1 request":
        data = b"POST " + SERVICE.encode() + b"ModelInfer HTTP/1.1\r\nHost: x\r\n\r\n"
    elif name == "preface twice":
        data = PREFACE + settings([]) + PREFACE
    elif name == "settings before preface":
        data = settings([]) + PREFACE
    else:
        data = rng.randbytes(rng.choice([9, 24, 100, 4096]))
    return out("h2.preface", data, name)


def gen_idle(rng):
    """Slowloris on HTTP/2: a connection that stops inside the preface or before its SETTINGS, or
    dribbles the preface, several at once. No PING follows (kind h2.idle): the server must close
    each one by its handshake deadline."""
    name = rng.choice(["nothing", "part of the preface", "preface without settings", "dribbled preface"])
    conns = rng.choice([1, 2, 4])
    if name == "nothing":
        steps = [("sleep", 0.1)]
    elif name == "part of the preface":
        steps = [("send", PREFACE[:rng.randint(1, 23)])]
    elif name == "preface without settings":
        steps = [("send", PREFACE)]
    else:
        steps = []
        for i in range(len(PREFACE)):
            steps += [("send", PREFACE[i:i + 1]), ("sleep", 0.5)]
    expect = "close" if name == "dribbled preface" else "any"  # 12 s of dribble, a 2 s deadline
    return "h2.idle", steps, conns, expect, f"{name}, {conns} connections"


def gen_frame_length(rng):
    name = rng.choice(["length over payload", "settings not multiple of 6", "ping not 8", "window not 4",
                       "rst not 4", "priority not 5", "over max frame size", "max length 2^24-1",
                       "goaway short", "padding over length"])
    s = 1
    if name == "length over payload":
        f = frame(HEADERS, END_HEADERS, s, block(grpc_fields()), length=rng.randint(200, 16384))
    elif name == "settings not multiple of 6":
        f = frame(SETTINGS, 0, 0, rng.randbytes(rng.choice([1, 5, 7, 13])))
    elif name == "ping not 8":
        f = frame(PING, 0, 0, rng.randbytes(rng.choice([0, 7, 9, 64])))
    elif name == "window not 4":
        f = frame(WINDOW, 0, rng.choice([0, 1]), rng.randbytes(rng.choice([0, 3, 5])))
    elif name == "rst not 4":
        f = frame(HEADERS, END_HEADERS, s, block(grpc_fields())) + frame(RST, 0, s, b"\x00\x00\x08")
    elif name == "priority not 5":
        f = frame(PRIORITY_F, 0, s, rng.randbytes(rng.choice([0, 4, 6])))
    elif name == "over max frame size":
        f = frame(DATA, 0, s, b"x" * 16385)
    elif name == "max length 2^24-1":
        f = frame(DATA, 0, s, b"", length=(1 << 24) - 1) + b"x" * 1000
    elif name == "goaway short":
        f = frame(GOAWAY, 0, 0, b"\x00\x00")
    else:
        f = frame(HEADERS, END_HEADERS | PADDED, s, bytes([200]) + block(grpc_fields()))
    return out("h2.frame_length", start(rng) + f, name)


def gen_unknown_type(rng):
    frames = b"".join(frame(rng.randint(10, 255), rng.randrange(256), rng.choice([0, 1, 3, 2 ** 31 - 1]),
                            rng.randbytes(rng.choice([0, 8, 100, 16384])))
                      for _ in range(rng.choice([1, 5, 100])))
    return out("h2.unknown_type", start(rng) + frames + call(1, "ServerLive", b""), "unknown types, then a call")


def gen_settings(rng):
    name = rng.choice(["flood", "flood no ack wait", "enable_push 2", "window too big", "frame size small",
                       "frame size big", "unknown ids", "ack with payload", "header table huge",
                       "settings on a stream", "max concurrent 0", "header list size 0"])
    if name == "flood":
        data = settings([(1, 4096)]) * rng.choice([100, 1000, 10000])
    elif name == "flood no ack wait":
        data = b"".join(settings([(4, rng.randrange(1 << 31))]) for _ in range(1000))
    elif name == "enable_push 2":
        data = settings([(2, 2)])
    elif name == "window too big":
        data = settings([(4, rng.choice([1 << 31, 0xFFFFFFFF]))])
    elif name == "frame size small":
        data = settings([(5, rng.choice([0, 1, 16383]))])
    elif name == "frame size big":
        data = settings([(5, rng.choice([1 << 24, 0xFFFFFFFF]))])
    elif name == "unknown ids":
        data = settings([(rng.randrange(7, 65536), rng.randrange(1 << 32)) for _ in range(50)])
    elif name == "ack with payload":
        data = settings([(1, 1)], flags=ACK)
    elif name == "header table huge":
        data = settings([(1, 0xFFFFFFFF)]) + call(1, "ServerLive", b"")
    elif name == "settings on a stream":
        data = frame(SETTINGS, 0, 1, b"")
    elif name == "max concurrent 0":
        data = settings([(3, 0)]) + call(1, "ServerLive", b"")
    else:
        data = settings([(6, 0)]) + call(1, "ModelMetadata", other_requests()[2][1])
    return out("h2.settings", PREFACE + data, name)


def gen_window(rng):
    name = rng.choice(["connection overflow", "stream overflow", "zero increment connection",
                       "zero increment stream", "idle stream", "max increments", "reserved bit"])
    inc = lambda n, s=0: frame(WINDOW, 0, s, struct.pack(">I", n & 0xFFFFFFFF))  # noqa: E731
    head = frame(HEADERS, END_HEADERS, 1, block(grpc_fields("ServerLive")))
    if name == "connection overflow":
        data = inc(0x7FFFFFFF) + inc(0x7FFFFFFF)
    elif name == "stream overflow":
        data = head + inc(0x7FFFFFFF, 1) + inc(0x7FFFFFFF, 1) + frame(DATA, END_STREAM, 1, grpc_message(b""))
    elif name == "zero increment connection":
        data = inc(0)
    elif name == "zero increment stream":
        data = head + inc(0, 1)
    elif name == "idle stream":
        data = inc(1000, rng.choice([3, 5, 101]))
    elif name == "max increments":
        data = inc(1) * rng.choice([1000, 10000])
    else:
        data = inc(0x80000000 | 100)
    return out("h2.window_update", start(rng) + data, name)


def gen_continuation(rng):
    name = rng.choice(["no continuation", "continuation other stream", "frame between", "continuation flood",
                       "continuation without headers", "endless continuation", "continuation on stream 0"])
    fields = block(grpc_fields("ServerLive"))
    h = frame(HEADERS, 0, 1, fields[:10])
    if name == "no continuation":
        data = h + frame(DATA, END_STREAM, 1, grpc_message(b""))
    elif name == "continuation other stream":
        data = h + frame(CONT, END_HEADERS, 3, fields[10:])
    elif name == "frame between":
        data = h + frame(PING, 0, 0, b"12345678") + frame(CONT, END_HEADERS, 1, fields[10:])
    elif name == "continuation flood":  # CVE-2024-27316 shape: header bytes without end
        data = h + frame(CONT, 0, 1, fields[10:]) + b"".join(
            frame(CONT, 0, 1, b"\x00" + hpack_str(b"x-flood") + hpack_str(b"v" * 100))
            for _ in range(rng.choice([100, 5000])))
    elif name == "continuation without headers":
        data = frame(CONT, END_HEADERS, 1, fields)
    elif name == "endless continuation":
        data = h + b"".join(frame(CONT, 0, 1, b"") for _ in range(rng.choice([1000, 20000])))
    else:
        data = h + frame(CONT, END_HEADERS, 0, fields[10:])
    return out("h2.continuation", start(rng) + data, name)


def gen_stream_state(rng):
    name = rng.choice(["data on idle", "data on closed", "data on stream 0", "headers even stream",
                       "decreasing stream ids", "headers on closed", "rst idle", "trailers twice",
                       "stream id max", "push_promise from client", "priority self", "goaway from client"])
    live = call(1, "ServerLive", b"")
    if name == "data on idle":
        data = frame(DATA, 0, rng.choice([3, 99, 2 ** 31 - 1]), b"\x00\x00\x00\x00\x00")
    elif name == "data on closed":
        data = live + frame(DATA, END_STREAM, 1, grpc_message(b""))
    elif name == "data on stream 0":
        data = frame(DATA, 0, 0, b"x" * 10)
    elif name == "headers even stream":
        data = frame(HEADERS, END_HEADERS | END_STREAM, 2, block(grpc_fields("ServerLive")))
    elif name == "decreasing stream ids":
        data = call(5, "ServerLive", b"") + call(3, "ServerLive", b"")
    elif name == "headers on closed":
        data = live + frame(HEADERS, END_HEADERS | END_STREAM, 1, block(grpc_fields("ServerLive")))
    elif name == "rst idle":
        data = frame(RST, 0, rng.choice([1, 7, 0]), b"\x00\x00\x00\x08")
    elif name == "trailers twice":
        data = frame(HEADERS, END_HEADERS, 1, block(grpc_fields("ServerLive"))) + \
            frame(HEADERS, END_HEADERS, 1, block([(b"x-t", b"1")])) + \
            frame(HEADERS, END_HEADERS | END_STREAM, 1, block([(b"x-t", b"2")]))
    elif name == "stream id max":
        data = call(2 ** 31 - 1, "ServerLive", b"") + call(1, "ServerLive", b"")
    elif name == "push_promise from client":
        data = frame(PUSH, END_HEADERS, 1, struct.pack(">I", 2) + block(grpc_fields()))
    elif name == "priority self":
        data = frame(HEADERS, END_HEADERS | PRIO | END_STREAM, 1,
                     struct.pack(">IB", 1, 16) + block(grpc_fields("ServerLive")))
    else:
        data = frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0) + b"bye") + live
    return out("h2.stream_state", start(rng) + data, name)


def gen_rst_flood(rng):
    """Rapid reset (CVE-2023-44487): open a stream and reset it at once, many times."""
    n = rng.choice([100, 1000, 5000])
    method, msg = rng.choice(other_requests())
    data = b""
    for i in range(n):
        s = 2 * i + 1
        data += frame(HEADERS, END_HEADERS, s, block(grpc_fields(method))) + \
            frame(DATA, 0, s, grpc_message(msg)) + frame(RST, 0, s, b"\x00\x00\x00\x08")
    return out("h2.rst_flood", start(rng) + data, f"{n} streams opened and reset ({method})")


def gen_ping_flood(rng):
    n = rng.choice([100, 1000, 10000])
    return out("h2.ping_flood", start(rng) + frame(PING, 0, 0, b"flood!!!") * n, f"{n} PINGs")


def gen_hpack(rng):
    name = rng.choice(["bad index", "table size update huge", "int overflow", "string over block",
                       "bad huffman", "random block", "missing pseudo", "uppercase name", "bad content-type",
                       "duplicate path", "connection header"])
    if name == "bad index":
        b = hpack_int(rng.choice([62, 1000, 2 ** 20]), 7, 0x80)
    elif name == "table size update huge":
        b = hpack_int(rng.choice([1 << 20, 2 ** 31]), 5, 0x20) + block(grpc_fields("ServerLive"))
    elif name == "int overflow":
        b = b"\x80" + b"\xff" * 20 + b"\x01"
    elif name == "string over block":
        b = b"\x00" + hpack_int(1000, 7) + b"abc"
    elif name == "bad huffman":
        b = b"\x00" + hpack_int(4, 7, 0x80) + b"\xff\xff\xff\xff" + hpack_str(b"v")
    elif name == "random block":
        b = rng.randbytes(rng.choice([1, 20, 500]))
    elif name == "missing pseudo":
        b = block([f for f in grpc_fields("ServerLive") if f[0] != rng.choice([b":path", b":method", b":scheme"])])
    elif name == "uppercase name":
        b = block(grpc_fields("ServerLive", [(b"X-Upper", b"1")]))
    elif name == "bad content-type":
        b = block([f if f[0] != b"content-type" else (b"content-type", b"text/plain")
                   for f in grpc_fields("ServerLive")])
    elif name == "duplicate path":
        b = block(grpc_fields("ServerLive", [(b":path", b"/x")]))
    else:
        b = block(grpc_fields("ServerLive", [(b"connection", b"keep-alive")]))
    data = frame(HEADERS, END_HEADERS, 1, b) + frame(DATA, END_STREAM, 1, grpc_message(b""))
    return out("h2.hpack", start(rng) + data, name)


def gen_length_prefix(rng):
    msg = infer_request()
    name = rng.choice(["compressed flag", "compressed flag with encoding", "length over body",
                       "length under body", "length max", "flag 2", "prefix only", "two messages",
                       "split prefix", "empty data"])
    extra = None
    if name == "compressed flag":
        body = grpc_message(msg, compressed=1)
    elif name == "compressed flag with encoding":
        body, extra = grpc_message(msg, compressed=1), [(b"grpc-encoding", b"gzip")]
    elif name == "length over body":
        body = grpc_message(msg, length=len(msg) + rng.randint(1, 1 << 20))
    elif name == "length under body":
        body = grpc_message(msg, length=max(0, len(msg) - rng.randint(1, 50)))
    elif name == "length max":
        body = grpc_message(msg, length=0xFFFFFFFF)
    elif name == "flag 2":
        body = grpc_message(msg, compressed=rng.choice([2, 255]))
    elif name == "prefix only":
        body = grpc_message(b"", length=len(msg))
    elif name == "two messages":
        body = grpc_message(msg) + grpc_message(msg)
    elif name == "split prefix":
        body = grpc_message(msg)[:3]
    else:
        body = b""
    data = frame(HEADERS, END_HEADERS, 1, block(grpc_fields("ModelInfer", extra)))
    data += frame(DATA, END_STREAM, 1, body[:16384]) if len(body) <= 16384 else \
        frame(DATA, 0, 1, body[:16384]) + frame(DATA, END_STREAM, 1, body[16384:32768])
    return out("h2.length_prefix", start(rng) + data, name)


def gen_proto_mutation(rng):
    method, msg = rng.choice(other_requests() + [("ModelInfer", infer_request())] * 4)
    n = rng.choice([1, 1, 2, 4, 8, 32])
    m = mutate(rng, msg, n)
    streams = rng.choice([1, 1, 3])
    data = b"".join(call(2 * i + 1, method, m if i == 0 else mutate(rng, msg, n)) for i in range(streams))
    return out("h2.proto_mutation", start(rng) + data, f"{method}, {n} mutations, {streams} calls")


def gen_metadata(rng):
    name = rng.choice(["many entries", "one huge value", "huge value over continuations", "binary header bad base64",
                       "grpc-timeout bad", "huge name"])
    extra: list = []
    if name == "many entries":
        extra = [(b"x-m%d" % i, b"v") for i in range(rng.choice([100, 1000, 10000]))]
    elif name in ("one huge value", "huge value over continuations"):
        extra = [(b"x-big", b"v" * rng.choice([16 << 10, 1 << 20]))]
    elif name == "binary header bad base64":
        extra = [(b"x-data-bin", b"!!!not base64!!!")]
    elif name == "grpc-timeout bad":
        extra = [(b"grpc-timeout", rng.choice([b"-1S", b"99999999999H", b"1x", b""]))]
    else:
        extra = [(b"x" * rng.choice([1000, 100000]), b"v")]
    b = block(grpc_fields("ModelInfer", extra))
    if len(b) <= 16384 and name != "huge value over continuations":
        head = frame(HEADERS, END_HEADERS, 1, b)
    else:
        pieces = [b[i:i + 16384] for i in range(0, len(b), 16384)]
        head = frame(HEADERS, 0, 1, pieces[0]) + b"".join(
            frame(CONT, END_HEADERS if i == len(pieces) - 1 else 0, 1, p) for i, p in enumerate(pieces[1:], 1))
        if len(pieces) == 1:
            head = frame(HEADERS, END_HEADERS, 1, b)
    data = head + frame(DATA, END_STREAM, 1, grpc_message(infer_request()))
    return out("h2.metadata", start(rng) + data, f"{name} ({len(b)} header bytes)")


def gen_frame_mutation(rng):
    """A valid connection (preface, settings, a few calls), then random byte mutations after the preface."""
    calls = b"".join(call(2 * i + 1, *rng.choice(other_requests())) for i in range(rng.choice([1, 2, 4])))
    body = settings([]) + calls
    return out("h2.frame_mutation", PREFACE + mutate(rng, body, rng.choice([1, 2, 4, 8])), "mutated frames")


GENERATORS = [  # (generator, weight)
    (gen_preface, 4), (gen_idle, 2), (gen_frame_length, 8), (gen_unknown_type, 4), (gen_settings, 8), (gen_window, 6),
    (gen_continuation, 8), (gen_stream_state, 10), (gen_rst_flood, 4), (gen_ping_flood, 3), (gen_hpack, 8),
    (gen_length_prefix, 10), (gen_proto_mutation, 20), (gen_metadata, 6), (gen_frame_mutation, 12),
]
