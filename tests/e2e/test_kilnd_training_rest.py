"""kiln.v1.Training over kilnd's REST gateway (server/rest/training_routes.h), with stdlib
http.client and raw sockets: start, list, get, cancel, resume, the events stream as NDJSON and as
Server-Sent Events, a chunked multipart dataset upload that a job then trains on, and a
bad-input table after which the daemon keeps answering.

Reference values are independent of kilnd: the job's reported eval accuracy is recomputed with
numpy from the published weights and the IDX files; uploaded files are compared byte for byte
with the source files."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from builtin_models import read_idx, read_safetensors
from kilnd_launcher import Kilnd
from test_kilnd_rest import call as http_call, raw_exchange
from test_kilnd_training import FASHION, mlp_forward

MAX_DATASET = 40_000_000  # --max-dataset-bytes: Fashion-MNIST (30.9 MB, gzip) fits
TRAIN_FILES = {"train_images": "train-images-idx3-ubyte.gz",
               "train_labels": "train-labels-idx1-ubyte.gz"}
TEST_FILES = {"test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"}


class Server:
    def __init__(self, root: Path, extra: list[str] | None = None):
        self.repo = root / "repo"
        self.data = root / "data"
        self.repo.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)
        self.extra = extra or []
        self.start()

    def start(self):
        self.kilnd = Kilnd(self.repo, [f"--data-dir={self.data}", "--metrics-port=-1",
                                       f"--max-dataset-bytes={MAX_DATASET}", *self.extra])
        self.port = self.kilnd.http_port

    def stop(self) -> int:
        return self.kilnd.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("rest_training"))
    yield s
    assert s.stop() == 0


def call(port, method, path, body=None, headers=None):
    """One request on a new connection: (status, headers, parsed JSON or raw bytes)."""
    status, hdrs, data = http_call(port, method, path, body, headers, timeout=60)
    try:
        data = json.loads(data)
    except ValueError:
        pass
    return status, hdrs, data


def spec_json(**kw):
    """A small MLP job as proto3 JSON; lowerCamel and original field names mixed on purpose."""
    spec = {"architecture": "mlp", "mlpSizes": [784, 32, 10], "batch_size": 32, "steps": 12,
            "checkpointInterval": 4, "eval_images": 200, "seed": 7, "outputModel": "rest_mlp",
            "deterministic": True, "dataset": {"idxDir": "fashion-mnist"},
            "optimizer": {"name": "adam", "lr": 3e-3}}
    spec.update(kw)
    return spec


def start(port, **kw):
    status, _, job = call(port, "POST", "/v1/training/jobs", spec_json(**kw))
    assert status == 200, job
    assert job["state"] == "QUEUED" and len(job["id"]) == 16, job
    return job


def get(port, job_id, losses=False):
    status, _, job = call(port, "GET", f"/v1/training/jobs/{job_id}"
                          + ("?include_losses=true" if losses else ""))
    assert status == 200, job
    return job


def wait_for(port, job_id, states, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = get(port, job_id)
        if job["state"] in states:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach {states}")


def open_events(port, job_id, sse=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", f"/v1/training/jobs/{job_id}/events",
                 headers={"Accept": "text/event-stream"} if sse else {})
    return conn, conn.getresponse()


def read_ndjson(r, on_event=None):
    events = []
    while True:
        line = r.readline()
        if not line:
            return events
        if line == b"\n":
            continue  # keep-alive
        events.append(json.loads(line))
        if on_event:
            on_event(events[-1])


def read_sse(r):
    """[(event name, data as JSON)] until the stream ends."""
    out, name, data = [], None, []
    while True:
        line = r.readline()
        if not line:
            return out
        line = line.rstrip(b"\n").decode()
        if line.startswith(":"):
            continue
        if line == "":
            if name is not None:
                out.append((name, json.loads("\n".join(data))))
            name, data = None, []
        elif line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data.append(line[len("data: "):])


def check_stream(events, steps):
    """A whole watch: the job now first, steps in order to the end, the last event SUCCEEDED."""
    assert events[0]["kind"] == "STATE"
    step_events = [e for e in events if e["kind"] == "STEP"]
    nums = [int(e["job"]["step"]) for e in step_events]
    assert nums == sorted(nums) and len(set(nums)) == len(nums) and nums[-1] == steps, nums
    assert any(e["kind"] == "CHECKPOINT" for e in events)
    last = events[-1]
    assert last["kind"] == "STATE" and last["job"]["state"] == "SUCCEEDED", last["job"]["message"]
    return last["job"]


def numpy_accuracy(weights_file: Path, n: int) -> float:
    w = read_safetensors(weights_file)
    x = (read_idx(FASHION / "t10k-images-idx3-ubyte.gz")[:n].reshape(n, 784) / 255.0
         ).astype(np.float32)
    labels = read_idx(FASHION / "t10k-labels-idx1-ubyte.gz")[:n]
    return float((mlp_forward(w, x).argmax(1) == labels).mean())


def test_start_watch_ndjson_and_sse_get_list(server):
    port = server.port
    job = start(port)
    conn, r = open_events(port, job["id"])
    assert r.status == 200
    assert r.getheader("Content-Type") == "application/x-ndjson"
    assert r.getheader("Transfer-Encoding") == "chunked"
    done = check_stream(read_ndjson(r), 12)
    conn.close()
    assert done["publishedVersion"] == "1"

    full = get(port, job["id"], losses=True)
    assert full["state"] == "SUCCEEDED" and len(full["losses"]) == 12
    assert np.float32(full["loss"]) == np.float32(full["losses"][-1])
    assert np.mean(full["losses"][-4:]) < np.mean(full["losses"][:4])
    assert "losses" not in get(port, job["id"]) or get(port, job["id"])["losses"] == []
    # The accuracy kilnd reports is the accuracy of the weights it published (numpy, IDX labels);
    # at most 2 of 200 near-ties may flip between float32 and numpy's float64.
    acc = numpy_accuracy(server.repo / "rest_mlp" / "1" / "model.safetensors", 200)
    assert abs(acc - full["evalAccuracy"]) <= 2 / 200, (acc, full["evalAccuracy"])

    # Server-Sent Events for a second job.
    job2 = start(port, seed=8)
    conn, r = open_events(port, job2["id"], sse=True)
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    sse = read_sse(r)
    conn.close()
    assert all(name == e["kind"].lower() for name, e in sse), [n for n, _ in sse]
    assert check_stream([e for _, e in sse], 12)["publishedVersion"] == "2"

    # Watching a finished job: its state, then the end of the stream.
    conn, r = open_events(port, job["id"])
    events = read_ndjson(r)
    conn.close()
    assert [e["kind"] for e in events] == ["STATE"] and events[0]["job"]["state"] == "SUCCEEDED"

    status, _, listed = call(port, "GET", "/v1/training/jobs")
    assert status == 200
    ids = [j["id"] for j in listed["jobs"]]
    assert ids.index(job["id"]) < ids.index(job2["id"])


def multipart(parts, piece=64 << 10, boundary="kiln-test-boundary-7f3a"):
    """(content type, a generator of body pieces): each (field, filename, bytes) part streamed."""
    def gen():
        for field, filename, data in parts:
            disp = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename else "")
            yield (f"--{boundary}\r\nContent-Disposition: {disp}\r\n"
                   "Content-Type: application/octet-stream\r\n\r\n").encode()
            for i in range(0, len(data), piece):
                yield data[i:i + piece]
            yield b"\r\n"
        yield f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", gen


def upload(port, parts, query="", chunked=True):
    ctype, gen = multipart(parts)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    path = "/v1/training/datasets" + query
    if chunked:
        conn.request("POST", path, body=gen(), headers={"Content-Type": ctype},
                     encode_chunked=True)
    else:
        conn.request("POST", path, body=b"".join(gen()), headers={"Content-Type": ctype})
    r = conn.getresponse()
    body = json.loads(r.read())
    conn.close()
    return r.status, body


def test_upload_chunked_then_train_on_it(server):
    port = server.port
    files = {k: (FASHION / v).read_bytes() for k, v in {**TRAIN_FILES, **TEST_FILES}.items()}
    parts = [("name", None, b"fm_rest")] + [(k, f"{k}.gz", files[k]) for k in files]
    status, resp = upload(port, parts)
    assert status == 200, resp
    assert resp["trainItems"] == "60000" and resp["testItems"] == "10000", resp
    assert int(resp["bytes"]) == sum(len(b) for b in files.values())
    folder = server.data / "datasets" / resp["datasetId"]
    for k, stem in (("train_images", "train-images-idx3-ubyte"),
                    ("train_labels", "train-labels-idx1-ubyte"),
                    ("test_images", "t10k-images-idx3-ubyte"),
                    ("test_labels", "t10k-labels-idx1-ubyte")):
        assert (folder / stem).read_bytes() == files[k], k
    assert not [p for p in (server.data / "datasets").iterdir() if p.name.startswith(".upload-")]

    job = start(port, dataset={"datasetId": resp["datasetId"]}, steps=4, checkpointInterval=0,
                outputModel="rest_uploaded")
    done = wait_for(port, job["id"], {"SUCCEEDED", "FAILED"})
    assert done["state"] == "SUCCEEDED", done["message"]
    assert 0 <= done["evalAccuracy"] <= 1

    # The same with Content-Length instead of chunked, the name as a query parameter, train only.
    status, resp2 = upload(port, [(k, None, files[k]) for k in TRAIN_FILES], query="?name=fm2",
                           chunked=False)
    assert status == 200 and resp2["trainItems"] == "60000" and resp2["testItems"] == "0", resp2
    assert resp2["datasetId"] != resp["datasetId"]


def test_cancel_resume_and_shutdown_ends_the_stream(tmp_path):
    s = Server(tmp_path, ["--resume-jobs=false"])
    try:
        port = s.port
        job = start(port, steps=5000, checkpointInterval=0, outputModel="long")
        deadline = time.monotonic() + 120
        while int(get(port, job["id"])["step"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.stop() == 0  # SIGTERM: checkpoint at the step boundary, INTERRUPTED
        s.start()
        port = s.port
        j = get(port, job["id"])
        assert j["state"] == "INTERRUPTED" and int(j["checkpointStep"]) == int(j["step"]) >= 3, j
        status, _, bad = call(port, "POST", f"/v1/training/jobs/{job['id']}:cancel", b"[1]")
        assert status == 400 and "JSON object" in bad["error"]

        status, _, r = call(port, "POST", f"/v1/training/jobs/{job['id']}:resume")
        assert status == 200 and r["state"] == "QUEUED", r
        # Watch while it runs; cancel once it has made progress after the resume.
        conn, resp = open_events(port, job["id"])
        seen = []
        cancelled = threading.Event()

        def on_event(e):
            seen.append(e)
            if (e["kind"] == "STEP" and int(e["job"]["step"]) >= int(j["step"]) + 2
                    and not cancelled.is_set()):
                cancelled.set()
                # The call returns once the job has stopped, its progress checkpointed.
                st, _, c = call(port, "POST", f"/v1/training/jobs/{job['id']}:cancel", {})
                assert st == 200 and c["state"] == "CANCELLED", c
                assert int(c["checkpointStep"]) == int(c["step"]) >= int(j["step"]) + 2, c

        events = read_ndjson(resp, on_event)
        conn.close()
        assert cancelled.is_set()
        assert events[-1]["kind"] == "STATE" and events[-1]["job"]["state"] == "CANCELLED"
        status, _, again = call(port, "POST", f"/v1/training/jobs/{job['id']}:cancel")
        assert status == 400 and "already ended" in again["error"]
        # A cancelled job resumes from the checkpoint its cancel wrote.
        stopped = get(port, job["id"])
        status, _, again = call(port, "POST", f"/v1/training/jobs/{job['id']}:resume")
        assert status == 200 and again["state"] == "QUEUED", again
        assert f"checkpoint at step {stopped['checkpointStep']}" in again["message"], again
        status, _, again = call(port, "POST", f"/v1/training/jobs/{job['id']}:resume")
        assert status == 400 and "only INTERRUPTED, FAILED or CANCELLED" in again["error"], again
        status, _, c = call(port, "POST", f"/v1/training/jobs/{job['id']}:cancel", {})
        assert status == 200 and c["state"] == "CANCELLED", c
        assert int(c["step"]) >= int(stopped["step"]), (c, stopped)

        # A watcher does not hold kilnd up: SIGTERM ends the stream with an error line.
        job2 = start(port, steps=5000, checkpointInterval=0, outputModel="long2")
        conn, resp = open_events(port, job2["id"])
        first = json.loads(resp.readline())
        assert first["kind"] == "STATE"
        t0 = time.monotonic()
        s.kilnd.proc.send_signal(signal.SIGTERM)
        rest = [line for line in iter(resp.readline, b"") if line != b"\n"]
        conn.close()
        assert json.loads(rest[-1]) == {"error": "kilnd is shutting down"}, rest[-1:]
        assert s.kilnd.proc.wait(30) == 0
        assert time.monotonic() - t0 < 15
    finally:
        s.stop()


LONG_NAME = "x" * 300


def bad_cases(job_id):
    spec = spec_json()
    return [
        # (what, method, path, body, headers, status, fragments)
        ("not JSON", "POST", "/v1/training/jobs", b"{not json", {}, 400, ["request body"]),
        ("JSON array", "POST", "/v1/training/jobs", b"[1, 2]", {}, 400, ["kiln.v1.JobSpec"]),
        ("empty body", "POST", "/v1/training/jobs", b"", {}, 400, ["request body"]),
        ("unknown field", "POST", "/v1/training/jobs", {**spec, "noSuchField": 1}, {}, 400,
         ["noSuchField"]),
        ("string for int", "POST", "/v1/training/jobs", {**spec, "batchSize": "abc"}, {}, 400,
         ["batch_size"]),
        ("object for int64", "POST", "/v1/training/jobs", {**spec, "steps": {"a": 1}}, {}, 400,
         ["steps"]),
        ("bool for repeated", "POST", "/v1/training/jobs", {**spec, "mlpSizes": True}, {}, 400,
         ["mlp_sizes"]),
        ("deep JSON", "POST", "/v1/training/jobs", b"[" * 5000 + b"]" * 5000, {}, 400, ["deeper than 64"]),
        ("batch over the limit", "POST", "/v1/training/jobs", {**spec, "batchSize": 5000}, {}, 400,
         ["batch_size", "[1, 4096]"]),
        ("output model ../", "POST", "/v1/training/jobs", {**spec, "outputModel": "../evil"}, {},
         400, ["output_model", "[A-Za-z0-9_.-]"]),
        ("output model absolute", "POST", "/v1/training/jobs", {**spec, "outputModel": "/tmp/x"},
         {}, 400, ["output_model"]),
        ("output model too long", "POST", "/v1/training/jobs", {**spec, "outputModel": LONG_NAME},
         {}, 400, ["output_model", "1..256"]),
        ("job name a/b", "POST", "/v1/training/jobs", {**spec, "name": "a/b"}, {}, 400, ["name"]),
        ("idx_dir ../", "POST", "/v1/training/jobs", {**spec, "dataset": {"idxDir": "../etc"}}, {},
         400, ["dataset.idx_dir", "'..'"]),
        ("idx_dir absolute", "POST", "/v1/training/jobs",
         {**spec, "dataset": {"idxDir": str(FASHION)}}, {}, 400, ["dataset.idx_dir", "absolute"]),
        ("dataset id traversal", "POST", "/v1/training/jobs",
         {**spec, "dataset": {"datasetId": "../../etc/passwd"}}, {}, 400, ["dataset.dataset_id"]),
        ("architecture model:../", "POST", "/v1/training/jobs",
         {**spec, "architecture": "model:../x"}, {}, 400, ["architecture"]),
        ("job id not hex", "GET", "/v1/training/jobs/..x", None, {}, 400, ["id", "16 lowercase"]),
        ("job id traversal", "GET", "/v1/training/jobs/..%2F..%2Fetc", None, {}, 404,
         ["no route"]),
        ("unknown job", "GET", "/v1/training/jobs/0123456789abcdef", None, {}, 404, ["no job"]),
        ("events of unknown job", "GET", "/v1/training/jobs/0123456789abcdef/events", None, {},
         404, ["no job"]),
        ("cancel unknown job", "POST", "/v1/training/jobs/0123456789abcdef:cancel", None, {}, 404,
         ["no job"]),
        ("include_losses bogus", "GET", f"/v1/training/jobs/{job_id}?include_losses=maybe", None,
         {}, 400, ["include_losses"]),
        ("DELETE jobs", "DELETE", "/v1/training/jobs", None, {}, 405, ["GET, POST"]),
        ("GET cancel", "GET", f"/v1/training/jobs/{job_id}:cancel", None, {}, 405, ["use POST"]),
        ("unknown training route", "GET", "/v1/training/bogus", None, {}, 404, ["no route"]),
        ("upload not multipart", "POST", "/v1/training/datasets", b"{}", {}, 415,
         ["multipart/form-data"]),
        ("multipart to jobs", "POST", "/v1/training/jobs", b"--b--\r\n",
         {"Content-Type": "multipart/form-data; boundary=b"}, 415, ["multipart/form-data"]),
        ("multipart to a KServe route", "POST", "/v2/repository/index", b"--b--\r\n",
         {"Content-Type": "multipart/form-data; boundary=b"}, 415, ["multipart/form-data"]),
    ]


def upload_cases():
    labels = (FASHION / TRAIN_FILES["train_labels"]).read_bytes()
    return [
        ("dataset name ../", [("name", None, b"../x"), ("train_labels", None, labels)], "", 400,
         ["name", "[A-Za-z0-9_.-]"]),
        ("dataset name query ../", [("train_labels", None, labels)], "?name=..%2Fx", 400,
         ["name"]),
        ("unknown part", [("../../etc/passwd", None, b"x")], "", 400, ["part '../../etc/passwd'"]),
        ("filename traversal is not a path", [("train_images", "../../etc/passwd", b"not idx"),
                                              ("train_labels", "/etc/shadow", labels)], "", 400,
         ["images"]),
        ("part twice", [("train_labels", None, labels), ("train_labels", None, labels)], "", 400,
         ["sent twice"]),
        ("name after files", [("train_labels", None, labels), ("name", None, b"late")], "", 400,
         ["name", "first part"]),
        ("no files", [("name", None, b"empty")], "", 400, ["no file parts"]),
        ("labels only", [("train_labels", None, labels)], "", 400, ["images", "missing"]),
    ]


def upload_early_answer(port, parts, piece=1 << 20, query="") -> bytes:
    """A chunked multipart upload over a raw socket, for uploads the server refuses (and closes)
    while the client is still sending: the raw response bytes."""
    ctype, gen = multipart(parts, piece=piece)
    head = (f"POST /v1/training/datasets{query} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()

    def sender(sock):
        sock.sendall(head)
        for p in gen():
            sock.sendall(b"%x\r\n%s\r\n" % (len(p), p))
        sock.sendall(b"0\r\n\r\n")
    return raw_exchange(port, b"", sender)


def raw_stream_upload(port, prefix: bytes, mib: int) -> bytes:
    """`prefix` then `mib` MiB of 'a' as a chunked multipart body; the raw response."""
    head = (b"POST /v1/training/datasets HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data;"
            b" boundary=kiln-test-boundary-7f3a\r\nTransfer-Encoding: chunked\r\n\r\n")

    def sender(sock):
        sock.sendall(head)
        if prefix:
            sock.sendall(b"%x\r\n%s\r\n" % (len(prefix), prefix))
        block = b"a" * (1 << 20)
        for _ in range(mib):
            sock.sendall(b"%x\r\n%s\r\n" % (len(block), block))
        sock.sendall(b"0\r\n\r\n")
    return raw_exchange(port, b"", sender)


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def oversized_chunked_upload(port):
    """A chunked multipart upload 1 MB over --max-dataset-bytes, sent as fast as the server reads."""
    return upload_early_answer(port, [("train_images", "big.gz", os.urandom(1 << 20) * 41)])


def test_bad_input_table_then_the_daemon_still_serves(server):
    port = server.port
    job = start(port, steps=2, checkpointInterval=0, outputModel="table_ok")
    wait_for(port, job["id"], {"SUCCEEDED", "FAILED"})
    before = len(call(port, "GET", "/v1/training/jobs")[2]["jobs"])
    checked = 0

    def still_serves():
        status, _, body = call(port, "GET", "/v1/training/jobs")
        assert status == 200 and len(body["jobs"]) == before, body
        assert server.kilnd.proc.poll() is None

    for what, method, path, body, headers, want, fragments in bad_cases(job["id"]):
        status, _, got = call(port, method, path, body, headers)
        assert status == want, (what, status, got)
        assert isinstance(got, dict) and all(f in got["error"] for f in fragments), (what, got)
        still_serves()
        checked += 1
    for what, parts, query, want, fragments in upload_cases():
        # The server may answer and close as soon as it sees the bad part, while the client still
        # sends: read the answer concurrently (http.client would hit a broken pipe instead).
        head, _, raw = upload_early_answer(port, parts, query=query).partition(b"\r\n\r\n")
        status, got = int(head.split(b" ")[1]), json.loads(raw)
        assert status == want, (what, status, got)
        assert all(f in got["error"] for f in fragments), (what, got)
        assert str(server.data) not in got["error"] and ".upload-" not in got["error"], got
        still_serves()
        checked += 1
    # Oversized uploads: refused before reading by Content-Length, or while reading a chunked
    # body, with 413 naming the limit.
    declared = MAX_DATASET + (2 << 20)
    data = raw_exchange(port, (f"POST /v1/training/datasets HTTP/1.1\r\nHost: x\r\nContent-Type: "
                               f"multipart/form-data; boundary=b\r\nContent-Length: {declared}"
                               "\r\n\r\n").encode())
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert "exceeds the limit of" in json.loads(body)["error"]
    assert str(MAX_DATASET + (1 << 20)) in json.loads(body)["error"]
    still_serves()
    data = oversized_chunked_upload(port)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), data[:400]
    assert json.loads(body)["error"] == f"data: the dataset exceeds the limit of {MAX_DATASET} bytes"
    still_serves()
    checked += 2
    # Multipart framing the client never completes is refused without buffering it: 64 MiB of
    # part header, then 64 MiB with no boundary at all; kilnd's peak RSS grows < 32 MiB.
    hwm = peak_rss_kib(server.kilnd.proc.pid)
    for prefix in (b'--kiln-test-boundary-7f3a\r\nContent-Disposition: form-data; name="x"; X: ',
                   b""):
        data = raw_stream_upload(port, prefix, 64)
        assert data.startswith(b"HTTP/1.1 400"), data[:200]
        assert b"malformed multipart/form-data" in data
        still_serves()
        checked += 1
    assert peak_rss_kib(server.kilnd.proc.pid) - hwm < 32 << 10
    assert checked >= 30
    # No upload left a staging folder or a dataset behind; no job was created by a bad request.
    leftovers = [p.name for p in (server.data / "datasets").iterdir() if p.name.startswith(".upload-")]
    assert leftovers == []
