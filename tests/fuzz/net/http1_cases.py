"""HTTP/1.1 case generators for the REST port. Each takes a random.Random and returns
(kind, steps, conns, expect, note); netfuzz.py wraps them in a wire.Case. Every generator is
deterministic in its Random, so a (seed, index) pair names one case.

Families: byte mutations of valid requests (infer JSON / binary / chunked, metadata, repository,
shared memory, health), chunked framing, Content-Length lies, huge heads, invalid UTF-8, JSON
bombs, the binary-data extension's length lies, slowloris, pipelined garbage, bad methods and
versions, random bytes."""

from __future__ import annotations

import json
import random
import struct

MODEL = "add_sub"  # the bundled model the valid requests name (netfuzz.py checks it after each batch)

INPUTS = [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [float(i) for i in range(16)]},
          {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [2.0] * 16}]
INFER_JSON = json.dumps({"inputs": INPUTS}).encode()


def binary_infer_body(size0: int = 64, size1: int = 64, raw0: bytes | None = None) -> tuple[bytes, int]:
    """(body, header length) of an add_sub infer with both inputs in the binary-data extension."""
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": size0}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": size1}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
    data = raw0 if raw0 is not None else struct.pack("<16f", *range(16)) + struct.pack("<16f", *[2.0] * 16)
    return header + data, len(header)


def request(method: str, target: str, body: bytes = b"", headers: list[tuple[str, str]] | None = None,
            length: bool = True) -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: kiln\r\n"
    for k, v in headers or []:
        head += f"{k}: {v}\r\n"
    if length and (body or method == "POST"):
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def chunked(body: bytes, sizes: list[int] | None = None) -> bytes:
    out, i = b"", 0
    for n in sizes or [len(body)]:
        piece = body[i:i + n]
        i += n
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    if i < len(body):
        out += b"%x\r\n" % (len(body) - i) + body[i:] + b"\r\n"
    return out + b"0\r\n\r\n"


def infer_chunked_head() -> bytes:
    return (f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: kiln\r\nTransfer-Encoding: chunked\r\n"
            f"Content-Type: application/json\r\n\r\n").encode()


def valid_requests() -> list[bytes]:
    """The valid requests mutations start from: every route family, keep-alive."""
    bin_body, bin_len = binary_infer_body()
    return [
        request("POST", f"/v2/models/{MODEL}/infer", INFER_JSON, [("Content-Type", "application/json")]),
        request("POST", f"/v2/models/{MODEL}/infer", bin_body,
                [("Inference-Header-Content-Length", str(bin_len)), ("Content-Type", "application/octet-stream")]),
        infer_chunked_head() + chunked(INFER_JSON, [7, 100, 3]),
        request("POST", f"/v2/models/{MODEL}/versions/1/infer", INFER_JSON),
        request("GET", "/v2"),
        request("GET", "/v2/health/live"),
        request("GET", "/v2/health/ready"),
        request("GET", f"/v2/models/{MODEL}"),
        request("GET", f"/v2/models/{MODEL}/ready"),
        request("GET", f"/v2/models/{MODEL}/config"),
        request("GET", f"/v2/models/{MODEL}/stats"),
        request("GET", "/v2/models/stats"),
        request("POST", "/v2/repository/index", b"{}"),
        request("POST", "/v2/repository/index", b'{"ready": true}'),
        request("POST", "/v2/repository/models/no_such_model/load", b"{}"),
        request("POST", "/v2/repository/models/no_such_model/unload", b"{}"),
        request("GET", "/v2/systemsharedmemory/status"),
        request("GET", "/v2/systemsharedmemory/region/r0/status"),
        request("POST", "/v2/systemsharedmemory/region/r0/register",
                b'{"key": "/kiln_netfuzz_none", "offset": 0, "byte_size": 64}'),
        request("POST", "/v2/systemsharedmemory/region/r0/unregister", b""),
        request("POST", "/v2/systemsharedmemory/unregister", b""),
        request("GET", "/v2/logging"),
        request("GET", "/v2/trace/setting"),
        request("HEAD", "/v2/health/ready"),
    ]


TOKENS = [b"\r\n", b"\r", b"\n", b"\r\n\r\n", b":", b" ", b"\t", b"\x00", b"\xff", b"\xc0\xaf", b"-1", b"0",
          b"99999999999999999999", b"18446744073709551616", b"%00", b"%2e%2e%2f", b"../", b"{", b"}", b"[", b"]",
          b'"', b"\\", b",", b"Transfer-Encoding: chunked\r\n", b"Content-Length: 0\r\n",
          b"Content-Length: 99999\r\n", b"Connection: close\r\n", b"Expect: 100-continue\r\n", b"1e999",
          b"NaN", b"null", b"true", b"\"binary_data_size\": 1000000", b"\"shape\": [-1]", b"\xed\xa0\x80"]


def mutate(rng: random.Random, data: bytes, n: int) -> bytes:
    b = bytearray(data)
    for _ in range(n):
        op = rng.randrange(7)
        pos = rng.randrange(len(b) + 1)
        if op == 0 and b:  # flip a bit
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # a random byte
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 2:  # insert random bytes
            b[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and b:  # delete a range
            b[pos:pos + rng.randint(1, 16)] = b""
        elif op == 4 and b:  # duplicate a range
            i = rng.randrange(len(b))
            b[pos:pos] = b[i:i + rng.randint(1, 64)]
        else:  # an interesting token
            b[pos:pos] = rng.choice(TOKENS)
    return bytes(b)


def ending(rng: random.Random, steps: list) -> list:
    """Most cases half-close after their bytes (the server answers what is complete, then sees
    EOF); the rest leave the connection open so that the server's own deadlines must close it."""
    if rng.random() < 0.6:
        steps.append(("shut_wr",))
    return steps


# ** generators: each returns (kind, steps, conns, expect, note) **

def gen_mutation(rng):
    reqs = valid_requests()
    base = b"".join(rng.choice(reqs) for _ in range(rng.choice([1, 1, 1, 2, 3])))
    n = rng.choice([1, 1, 2, 3, 5, 8, 16])
    return "http.mutation", ending(rng, [("send", mutate(rng, base, n))]), 1, "any", f"{n} mutations"


def gen_chunked(rng):
    head = infer_chunked_head()
    body = INFER_JSON
    variants = {
        "17 hex digits": (b"1" * 17 + b"\r\n" + body + b"\r\n0\r\n\r\n", "error"),
        "ffffffffffffffff": (b"ffffffffffffffff\r\n" + body + b"\r\n0\r\n\r\n", "error"),
        "7fffffffffffffff": (b"7fffffffffffffff\r\n" + body[:100], "error"),
        "negative": (b"-%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n", "error"),
        "0x prefix": (b"0x%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n", "error"),
        "plus sign": (b"+%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n", "error"),
        "empty size": (b"\r\n" + body + b"\r\n0\r\n\r\n", "error"),
        "extension": (b"%x;name=value\r\n" % len(body) + body + b"\r\n0\r\n\r\n", "any"),
        "long extension": (b"%x;" % len(body) + b"e" * rng.choice([1000, 70000]) + b"\r\n" + body
                           + b"\r\n0\r\n\r\n", "any"),
        "size over data": (b"%x\r\n" % (len(body) + rng.randint(1, 5000)) + body + b"\r\n0\r\n\r\n", "error"),
        "size under data": (b"%x\r\n" % max(1, len(body) - rng.randint(1, 50)) + body + b"\r\n0\r\n\r\n", "error"),
        "no last chunk": (b"%x\r\n" % len(body) + body + b"\r\n", "any"),
        "truncated data": (b"%x\r\n" % len(body) + body[:rng.randrange(len(body))], "any"),
        "no CRLF after data": (b"%x\r\n" % len(body) + body + b"0\r\n\r\n", "error"),
        "trailer fields": (chunked(body)[:-2] + b"X-Trailer: 1\r\nContent-Length: 5\r\n\r\n", "any"),
        "huge trailer": (chunked(body)[:-2] + b"X-T: " + b"t" * 100000 + b"\r\n\r\n", "any"),
        "many tiny chunks": (chunked(body, [1] * len(body)), "any"),
        "zero-size chunks": (b"0\r\n\r\n" * 2 + chunked(body), "any"),
        "garbage after body": (chunked(body) + rng.randbytes(rng.randint(1, 200)), "any"),
        "chunk size NUL": (b"1\x00\r\n" + body, "error"),
    }
    name = rng.choice(sorted(variants))
    data, expect = variants[name]
    return "http.chunked", ending(rng, [("send", head + data)]), 1, expect, name


def gen_content_length(rng):
    body = INFER_JSON
    target = f"/v2/models/{MODEL}/infer"
    base = f"POST {target} HTTP/1.1\r\nHost: kiln\r\n"
    n = len(body)
    variants = {
        "larger than body": (f"Content-Length: {n + rng.randint(1, 100000)}\r\n", body, "any"),
        "smaller than body": (f"Content-Length: {max(0, n - rng.randint(1, n))}\r\n", body, "any"),
        "twice, equal": (f"Content-Length: {n}\r\nContent-Length: {n}\r\n", body, "error"),
        "twice, different": (f"Content-Length: {n}\r\nContent-Length: {n + 1}\r\n", body, "error"),
        "list": (f"Content-Length: {n}, {n}\r\n", body, "error"),
        "with Transfer-Encoding": (f"Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n", chunked(body), "error"),
        "after Transfer-Encoding": (f"Transfer-Encoding: chunked\r\nContent-Length: {n}\r\n", chunked(body), "error"),
        "negative": (f"Content-Length: -{n}\r\n", body, "error"),
        "plus sign": (f"Content-Length: +{n}\r\n", body, "error"),
        "hex": (f"Content-Length: 0x{n:x}\r\n", body, "error"),
        "overflow": (f"Content-Length: {rng.choice(['18446744073709551616', '9223372036854775808', '9' * 40])}\r\n",
                     body, "error"),
        "over the body limit": ("Content-Length: 67108865\r\n", body, "error"),
        "space in the value": (f"Content-Length: {n // 2} {n - n // 2}\r\n", body, "error"),
        "empty value": ("Content-Length: \r\n", body, "error"),
        "GET with a body": (f"Content-Length: {n}\r\n", body, "any"),
    }
    name = rng.choice(sorted(variants))
    line, data, expect = variants[name]
    start = base if name != "GET with a body" else "GET /v2/health/ready HTTP/1.1\r\nHost: kiln\r\n"
    return "http.content_length", ending(rng, [("send", (start + line + "\r\n").encode() + data)]), 1, expect, name


def gen_huge_head(rng):
    name = rng.choice(["one long header", "many headers", "long target", "long method", "long version",
                       "long header name", "many Host", "long query"])
    size = rng.choice([9000, 17000, 65536, 300000, 1 << 20])
    if name == "one long header":
        data = b"GET /v2/health/ready HTTP/1.1\r\nHost: kiln\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
    elif name == "many headers":
        count = rng.choice([101, 1000, 10000, 50000])
        data = b"GET /v2/health/ready HTTP/1.1\r\nHost: kiln\r\n" + b"".join(
            b"X-%d: v\r\n" % i for i in range(count)) + b"\r\n"
    elif name == "long target":
        data = b"GET /v2/models/" + b"m" * size + b" HTTP/1.1\r\nHost: kiln\r\n\r\n"
    elif name == "long method":
        data = b"G" * size + b" /v2/health/ready HTTP/1.1\r\nHost: kiln\r\n\r\n"
    elif name == "long version":
        data = b"GET /v2/health/ready HTTP/1." + b"1" * size + b"\r\nHost: kiln\r\n\r\n"
    elif name == "long header name":
        data = b"GET /v2/health/ready HTTP/1.1\r\nHost: kiln\r\n" + b"X" * size + b": v\r\n\r\n"
    elif name == "many Host":
        data = b"GET /v2/health/ready HTTP/1.1\r\n" + b"Host: kiln\r\n" * rng.choice([2, 1000]) + b"\r\n"
    else:
        data = b"GET /v2/health/ready?" + b"q=1&" * (size // 4) + b" HTTP/1.1\r\nHost: kiln\r\n\r\n"
    # Past the 16 KiB head limit every variant is refused; below it a long query may be served.
    expect = "error" if len(data) > 17000 or name in ("long method", "long version", "many Host") else "any"
    return "http.huge_head", ending(rng, [("send", data)]), 1, expect, f"{name} ({len(data)} bytes)"


BAD_UTF8 = [b"\xff", b"\xfe\xfe", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80",
            b"\xc3", b"\xf8\x88\x80\x80\x80", b"\x00"]


def gen_invalid_utf8(rng):
    bad = rng.choice(BAD_UTF8)
    where = rng.choice(["path", "model name", "header value", "header name", "input name", "datatype",
                        "json key", "bytes data", "repository body", "shm key"])
    if where == "path":
        data = request("GET", "/v2/" + "x", b"").replace(b"/v2/x", b"/v2/" + bad + b"/health")
    elif where == "model name":
        data = request("POST", "/v2/models/M/infer", INFER_JSON).replace(b"/M/", b"/add" + bad + b"sub/")
    elif where == "header value":
        data = request("POST", f"/v2/models/{MODEL}/infer", INFER_JSON, [("X-Bad", "B")]).replace(
            b"X-Bad: B", b"X-Bad: " + bad)
    elif where == "header name":
        data = request("GET", "/v2/health/ready", b"", [("X-B", "v")]).replace(b"X-B:", b"X-" + bad + b":")
    elif where in ("input name", "datatype", "json key"):
        target = {"input name": b'"INPUT0"', "datatype": b'"FP32"', "json key": b'"shape"'}[where]
        body = INFER_JSON.replace(target, target[:-1] + bad + b'"', 1)
        data = request("POST", f"/v2/models/{MODEL}/infer", body)
    elif where == "bytes data":
        body = b'{"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": ["' + bad + b'"]}]}'
        data = request("POST", f"/v2/models/{MODEL}/infer", body)
    elif where == "repository body":
        data = request("POST", "/v2/repository/index", b'{"ready": "' + bad + b'"}')
    else:
        data = request("POST", "/v2/systemsharedmemory/region/r/register",
                       b'{"key": "/k' + bad + b'", "offset": 0, "byte_size": 4}')
    # An unknown model, input name or datatype is refused whatever its bytes; the others may be
    # answered (a header value is opaque), so only those three expect an error.
    expect = "error" if where in ("model name", "input name", "datatype", "path") else "any"
    return "http.invalid_utf8", ending(rng, [("send", data)]), 1, expect, f"{where}: {bad!r}"


def gen_json_bomb(rng):
    name = rng.choice(["array depth", "object depth", "mixed depth", "huge array", "huge string",
                       "many keys", "duplicate keys", "big numbers", "deep in data", "unclosed"])
    depth = rng.choice([100, 1000, 10000, 100000, 1000000])
    if name == "array depth":
        body = b"[" * depth + b"]" * depth
    elif name == "object depth":
        body = b'{"a":' * depth + b"1" + b"}" * depth
    elif name == "mixed depth":
        body = b'{"inputs":' + b'[{"x":' * (depth // 2) + b"0" + b"}]" * (depth // 2) + b"}"
    elif name == "huge array":
        n = rng.choice([100000, 1048577, 2000000])
        body = (b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": ['
                + b"1," * (n - 1) + b"1]}]}")
    elif name == "huge string":
        body = b'{"inputs": [{"name": "' + b"s" * rng.choice([100000, 4 << 20]) + b'"}]}'
    elif name == "many keys":
        body = b"{" + b",".join(b'"k%d": %d' % (i, i) for i in range(rng.choice([1000, 100000]))) + b"}"
    elif name == "duplicate keys":
        body = b'{"inputs": [], ' + b'"inputs": [],' * rng.choice([100, 10000]) + b'"x": 1}'
    elif name == "big numbers":
        body = INFER_JSON.replace(b"1.0", rng.choice([b"1e999999", b"-1e400", b"1" * 5000, b"0." + b"1" * 5000]))
    elif name == "deep in data":
        body = (b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": '
                + b"[" * depth + b"1" + b"]" * depth + b"}]}")
    else:
        body = b'{"inputs": [' * (depth // 10 + 1)
    expect = "any" if name == "big numbers" else "error"  # 0.111... is a valid number
    return "http.json_bomb", ending(rng, [("send", request("POST", f"/v2/models/{MODEL}/infer", body))]), \
        1, expect, f"{name} ({len(body)} bytes)"


def gen_binary_lies(rng):
    body, hlen = binary_infer_body()
    name = rng.choice(["header length over body", "header length negative", "header length not a number",
                       "header length zero with JSON", "header length cuts the JSON", "binary_data_size over rest",
                       "binary_data_size negative", "binary_data_size huge", "binary_data_size short",
                       "trailing bytes", "header length twice", "binary_data_size string",
                       "header length inside data", "header length overflow"])
    h = str(hlen)
    if name == "header length over body":
        h = str(len(body) + rng.randint(1, 1 << 20))
    elif name == "header length negative":
        h = "-" + str(rng.randint(1, 100))
    elif name == "header length not a number":
        h = rng.choice(["abc", "12a", "", "0x10", " ", "1e3"])
    elif name == "header length zero with JSON":
        h = "0"
    elif name == "header length cuts the JSON":
        h = str(rng.randint(1, hlen - 1))
    elif name == "binary_data_size over rest":
        body, hlen = binary_infer_body(64, 64 + rng.randint(1, 10000))
        h = str(hlen)
    elif name == "binary_data_size negative":
        body, hlen = binary_infer_body(-64, 64)
        h = str(hlen)
    elif name == "binary_data_size huge":
        body, hlen = binary_infer_body(rng.choice([1 << 62, (1 << 63) - 1, 1 << 40]), 64)
        h = str(hlen)
    elif name == "binary_data_size short":
        body, hlen = binary_infer_body(60, 68)
        h = str(hlen)
    elif name == "trailing bytes":
        body = body + rng.randbytes(rng.randint(1, 100))
    elif name == "binary_data_size string":
        body = body.replace(b'"binary_data_size": 64', b'"binary_data_size": "64"', 1)
        h = str(hlen + 2)
    elif name == "header length inside data":
        h = str(hlen + rng.randint(1, 100))
    elif name == "header length overflow":
        h = rng.choice(["18446744073709551616", "9223372036854775807", "99999999999999999999999"])
    headers = [("Inference-Header-Content-Length", h), ("Content-Type", "application/octet-stream")]
    if name == "header length twice":
        headers.append(("Inference-Header-Content-Length", str(hlen + 1)))
    data = request("POST", f"/v2/models/{MODEL}/infer", body, headers)
    return "http.binary_lies", ending(rng, [("send", data)]), 1, "error", name


def gen_slowloris(rng):
    """Bytes dribbled slowly, one or several connections at once: the server's header, body or
    progress deadline must close each one (netfuzz.py starts kilnd with short deadlines)."""
    name = rng.choice(["drip head", "drip body", "head then idle", "partial line then idle", "drip chunks",
                       "idle after connect", "drip after 100-continue"])
    interval = rng.choice([0.2, 0.4, 0.7])
    drips = int(8 / interval) + 1  # 8 s of dribble: past the header (2 s) and body (4 s) deadlines
    conns = rng.choice([1, 1, 2, 4, 8])
    full = request("POST", f"/v2/models/{MODEL}/infer", INFER_JSON)
    head, _, body = full.partition(b"\r\n\r\n")
    steps: list = []
    if name == "drip head":
        for i in range(drips):
            steps += [("send", head[i:i + 1]), ("sleep", interval)]
    elif name == "drip body":
        steps.append(("send", head + b"\r\n\r\n"))
        for i in range(drips):
            steps += [("sleep", interval), ("send", body[i:i + 1])]
    elif name == "head then idle":
        steps += [("send", head + b"\r\n\r\n" + body[:10]), ("sleep", 0.1)]
    elif name == "partial line then idle":
        steps += [("send", head[:rng.randint(1, 30)]), ("sleep", 0.1)]
    elif name == "drip chunks":
        steps.append(("send", infer_chunked_head()))
        for i in range(drips):
            steps += [("sleep", interval), ("send", b"1\r\n" + body[i:i + 1] + b"\r\n")]
    elif name == "idle after connect":
        steps.append(("sleep", 0.1))
    else:
        steps.append(("send", head + b"\r\nExpect: 100-continue\r\n\r\n"))
        for i in range(drips):
            steps += [("sleep", interval), ("send", body[i:i + 1])]
    expect = "close" if "idle" not in name else "any"  # idle ones: closed within the case timeout
    return "http.slowloris", steps, conns, expect, f"{name}, every {interval:g} s, {conns} connections"


def gen_pipelined(rng):
    name = rng.choice(["valid then garbage", "many valid", "garbage then valid", "valid unread flood",
                       "h2 preface", "tls hello"])
    valid = valid_requests()
    if name == "valid then garbage":
        data = rng.choice(valid) + rng.randbytes(rng.randint(1, 500))
    elif name == "many valid":
        data = b"".join(rng.choice(valid[4:12]) for _ in range(rng.choice([10, 100, 500])))
    elif name == "garbage then valid":
        data = rng.randbytes(rng.randint(1, 100)) + b"\r\n" + valid[5]
    elif name == "valid unread flood":  # more responses than the client reads: backpressure
        data = valid[0] * rng.choice([200, 1000])
    elif name == "h2 preface":
        data = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    else:
        data = bytes.fromhex("16030100a5010000a10303") + rng.randbytes(160)
    return "http.pipelined", ending(rng, [("send", data)]), 1, "any", name


def gen_method_version(rng):
    method = rng.choice(["GETT", "get", "", "CONNECT", "TRACE", "OPTIONS", "DELETE", "PUT", "PATCH", "M" * 20,
                         "G\x00T", "POST", "GET", "HEAD", "PRI"])
    version = rng.choice(["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/1.2", "HTTP/2.0", "HTTP/9.9", "HTTP/1.1 x",
                          "http/1.1", "HTTP/1", "HTTP/1.10", "", "HTTP/11"])
    target = rng.choice(["/v2/health/ready", "*", "kiln:8000", "http://kiln/v2/health/ready", "v2/health/ready",
                         "/v2/models/add_sub/infer", "//", "/v2/models/../models/add_sub", "/%zz", "/v2#frag",
                         "/v2/models/add_sub?x=%00"])
    body = INFER_JSON if rng.random() < 0.3 else b""
    line = f"{method} {target} {version}".rstrip() if version else f"{method} {target}"
    data = line.encode("latin-1") + b"\r\nHost: kiln\r\n"
    if body:
        data += b"Content-Length: %d\r\n" % len(body)
    data += b"\r\n" + body
    return "http.method_version", ending(rng, [("send", data)]), 1, "any", line[:60]


def gen_random_bytes(rng):
    data = rng.randbytes(rng.choice([1, 16, 256, 4096]))
    return "http.random_bytes", ending(rng, [("send", data)]), 1, "any", f"{len(data)} bytes"


GENERATORS = [  # (generator, weight)
    (gen_mutation, 30), (gen_chunked, 10), (gen_content_length, 10), (gen_huge_head, 5),
    (gen_invalid_utf8, 7), (gen_json_bomb, 6), (gen_binary_lies, 10), (gen_slowloris, 4),
    (gen_pipelined, 5), (gen_method_version, 8), (gen_random_bytes, 5),
]
