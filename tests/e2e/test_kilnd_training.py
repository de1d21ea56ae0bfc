"""kiln.v1.Training end to end (issue #8): a real kilnd with --data-dir, the stock grpc client
for kiln.v1.Training and tritonclient for inference on the published version.

Reference values are independent of kiln: labels come from the Fashion-MNIST IDX files read by
numpy, published weights are read with a safetensors reader written here and run through a numpy
forward pass, checkpoint manifests are checked with hashlib. Short MLP jobs keep the normal suite
fast; the >= 80% CNN job (the example's 70 steps of batch 512) is marked slow."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from builtin_models import read_idx, read_safetensors
from conftest import Kilnd

PROTO_ROOT = Path(__file__).resolve().parents[2] / "proto"
FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="module")
def pb():
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.fail("protoc is required to generate the kiln.v1 messages")
    out = Path(tempfile.mkdtemp(prefix="kiln_pb_"))
    subprocess.run([protoc, f"--proto_path={PROTO_ROOT}", f"--python_out={out}",
                    "kiln/v1/training.proto"], check=True)
    # Loaded by file under a private name: other modules cache their own "kiln.v1" package.
    spec = importlib.util.spec_from_file_location("kiln_training_pb2",
                                                  out / "kiln" / "v1" / "training_pb2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    shutil.rmtree(out, ignore_errors=True)


class TrainingStub:
    def __init__(self, channel, t):
        def unary(name, req, resp):
            return channel.unary_unary(f"/kiln.v1.Training/{name}",
                                       request_serializer=req.SerializeToString,
                                       response_deserializer=resp.FromString)
        self.StartJob = unary("StartJob", t.StartJobRequest, t.Job)
        self.GetJob = unary("GetJob", t.GetJobRequest, t.Job)
        self.ListJobs = unary("ListJobs", t.ListJobsRequest, t.ListJobsResponse)
        self.CancelJob = unary("CancelJob", t.CancelJobRequest, t.Job)
        self.ResumeJob = unary("ResumeJob", t.ResumeJobRequest, t.Job)
        self.WatchJob = channel.unary_stream("/kiln.v1.Training/WatchJob",
                                             request_serializer=t.WatchJobRequest.SerializeToString,
                                             response_deserializer=t.JobEvent.FromString)
        self.GetCheckpoint = channel.unary_stream(
            "/kiln.v1.Training/GetCheckpoint",
            request_serializer=t.GetCheckpointRequest.SerializeToString,
            response_deserializer=t.CheckpointChunk.FromString)
        self.UploadDataset = channel.stream_unary(
            "/kiln.v1.Training/UploadDataset",
            request_serializer=t.DatasetChunk.SerializeToString,
            response_deserializer=t.UploadDatasetResponse.FromString)


def mlp_forward(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    layers = sorted({int(k.split(".")[1]) for k in w})
    for i, li in enumerate(layers):
        x = x @ w[f"layers.{li}.weight"].T + w[f"layers.{li}.bias"]
        if i + 1 < len(layers):
            x = np.maximum(x, 0)
    return x


class Daemon:
    """kilnd with a data dir and a repository that outlive restarts."""

    def __init__(self, root: Path, extra: list[str] | None = None):
        self.root = root
        self.repo = root / "repo"
        self.data = root / "data"
        self.repo.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)
        self.extra = extra or []
        self.server: Kilnd | None = None

    def start(self, t) -> TrainingStub:
        self.server = Kilnd(self.repo, [f"--data-dir={self.data}", "--metrics-port=-1", *self.extra])
        self.channel = grpc.insecure_channel(self.server.url)
        return TrainingStub(self.channel, t)

    def kill9(self):
        self.channel.close()
        self.server.proc.kill()
        self.server.proc.wait()
        self.server.log.close()
        shutil.rmtree(self.server.scratch, ignore_errors=True)

    def stop(self) -> int:
        self.channel.close()
        return self.server.stop()


def mlp_spec(t, **kw):
    spec = t.JobSpec(architecture="mlp", mlp_sizes=[784, 32, 10], batch_size=32, steps=24,
                     checkpoint_interval=4, eval_images=1000, seed=7, output_model="fmnist_mlp",
                     deterministic=True)
    spec.dataset.idx_dir = "fashion-mnist"
    spec.optimizer.name = "adam"
    spec.optimizer.lr = 3e-3
    for k, v in kw.items():
        setattr(spec, k, v)
    return spec


def wait_state(stub, job_id, states, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = stub.GetJob(t_get(stub, job_id))
        if job.state in states:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach {states}")


_T = {}


def t_get(stub, job_id, losses=False):
    return _T["t"].GetJobRequest(id=job_id, include_losses=losses)


@pytest.fixture(autouse=True)
def _types(pb):
    _T["t"] = pb


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


def test_job_watch_publish_and_infer(pb, tmp):
    t = pb
    d = Daemon(tmp)
    stub = d.start(t)
    try:
        job = stub.StartJob(t.StartJobRequest(spec=mlp_spec(t, steps=30, eval_interval=10)))
        assert job.state == t.QUEUED and len(job.id) == 16
        events = list(stub.WatchJob(t.WatchJobRequest(id=job.id), timeout=600))
        steps = [e.job.step for e in events if e.kind == t.JobEvent.STEP]
        assert steps == sorted(steps) and steps[-1] == 30
        assert any(e.kind == t.JobEvent.EVAL for e in events)
        assert any(e.kind == t.JobEvent.CHECKPOINT for e in events)
        last = events[-1]
        assert last.kind == t.JobEvent.STATE and last.job.state == t.SUCCEEDED, last.job.message
        step_events = [e for e in events if e.kind == t.JobEvent.STEP]
        assert all(e.job.examples_per_second > 0 for e in step_events)
        assert step_events[-1].job.eta_seconds == pytest.approx(0, abs=1e-9)
        done = stub.GetJob(t.GetJobRequest(id=job.id, include_losses=True))
        assert len(done.losses) == 30 and done.published_version == 1
        assert np.mean(done.losses[-5:]) < np.mean(done.losses[:5])
        assert 0.55 < done.eval_accuracy <= 1.0

        # The published version: weights read independently, numpy forward as the reference.
        weights = read_safetensors(d.repo / "fmnist_mlp" / "1" / "model.safetensors")
        images = read_idx(FASHION / "t10k-images-idx3-ubyte.gz")[:64].reshape(64, 784) / 255.0
        labels = read_idx(FASHION / "t10k-labels-idx1-ubyte.gz")[:64]
        x = images.astype(np.float32)
        client = grpcclient.InferenceServerClient(url=d.server.url)
        assert client.is_model_ready("fmnist_mlp", "1")
        inp = grpcclient.InferInput("INPUT", [64, 784], "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer("fmnist_mlp", [inp]).as_numpy("OUTPUT")
        np.testing.assert_allclose(out, mlp_forward(weights, x), rtol=1e-4, atol=1e-4)
        assert (out.argmax(1) == labels).mean() > 0.5
        client.close()
    finally:
        assert d.stop() == 0


def test_validation_and_path_traversal(pb, tmp):
    t = pb
    root = tmp / "roots"
    (root / "ok").mkdir(parents=True)
    outside = tmp / "outside"
    outside.mkdir()
    for f in FASHION.iterdir():
        os.symlink(f, outside / f.name)
    os.symlink(outside, root / "escape")           # a folder symlink out of the root
    (root / "fileescape").mkdir()
    for f in FASHION.iterdir():                     # file symlinks out of the root
        os.symlink(f, root / "fileescape" / f.name)
    d = Daemon(tmp, [f"--dataset-roots=/usr/share/datasets,{root}"])
    stub = d.start(t)
    try:
        def bad(field, fragment, **kw):
            spec = mlp_spec(t)
            for k, v in kw.items():
                if k == "idx_dir":
                    spec.dataset.idx_dir = v
                elif k == "dataset_id":
                    spec.dataset.dataset_id = v
                elif k == "lr":
                    spec.optimizer.lr = v
                elif k == "opt":
                    spec.optimizer.name = v
                elif k == "mlp_sizes":
                    del spec.mlp_sizes[:]
                    spec.mlp_sizes.extend(v)
                else:
                    setattr(spec, k, v)
            with pytest.raises(grpc.RpcError) as e:
                stub.StartJob(t.StartJobRequest(spec=spec))
            assert e.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), e
            assert field in e.value.details() and fragment in e.value.details(), e.value.details()
            return e.value.code()

        # ** path traversal: dataset paths, model names, job names (>= 10 cases) **
        assert bad("dataset.idx_dir", "'..'", idx_dir="../etc") == grpc.StatusCode.INVALID_ARGUMENT
        assert bad("dataset.idx_dir", "'..'", idx_dir="ok/../../etc") == grpc.StatusCode.INVALID_ARGUMENT
        assert bad("dataset.idx_dir", "absolute", idx_dir="/etc") == grpc.StatusCode.INVALID_ARGUMENT
        assert bad("dataset.idx_dir", "absolute",
                   idx_dir=str(FASHION)) == grpc.StatusCode.INVALID_ARGUMENT
        assert bad("dataset.idx_dir", "symlink", idx_dir="escape") == grpc.StatusCode.INVALID_ARGUMENT
        assert bad("dataset.idx_dir", "symlink",
                   idx_dir="fileescape") == grpc.StatusCode.INVALID_ARGUMENT
        bad("dataset.idx_dir", "NUL", idx_dir="ok\0/x")
        bad("dataset.dataset_id", "hex", dataset_id="../../etc/passwd0")
        bad("dataset.dataset_id", "hex", dataset_id="/etc")
        for name in ["../evil", "/abs", "a/b", ".hidden", "..", "x" * 300, ""]:
            bad("output_model", "[A-Za-z0-9_.-]", output_model=name)
        for name in ["../evil", "/abs", "a/b", ".."]:
            bad("name", "[A-Za-z0-9_.-]", name=name)
        bad("architecture", "model:<name>", architecture="model:../x")
        # ** limits **
        bad("batch_size", "[1, 4096]", batch_size=0)
        bad("batch_size", "[1, 4096]", batch_size=5000)
        bad("steps", "[1, 1000000]", steps=0)
        bad("checkpoint_interval", "[0, 24]", checkpoint_interval=25)
        bad("eval_images", "[0, 100000]", eval_images=-1)
        bad("architecture", "unknown", architecture="resnet")
        bad("optimizer.name", "unknown", opt="lbfgs")
        bad("optimizer.lr", "(0, 10]", lr=11.0)
        bad("mlp_sizes[1]", "[1, 65536]", mlp_sizes=[784, 0, 10])
        bad("device", "not available", device="CUDA")
        bad("dataset.idx_dir", "no folder", idx_dir="missing")
        # ids
        with pytest.raises(grpc.RpcError) as e:
            stub.GetJob(t.GetJobRequest(id="../x"))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "id" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            stub.GetJob(t.GetJobRequest(id="0123456789abcdef"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert len(stub.ListJobs(t.ListJobsRequest()).jobs) == 0
    finally:
        assert d.stop() == 0


def losses_of(stub, t, job_id):
    return np.array(stub.GetJob(t.GetJobRequest(id=job_id, include_losses=True)).losses, np.float32)


def check_checkpoints(folder: Path):
    """Every manifest names complete data with the right SHA-256; at most 2; no temp files."""
    manifests = sorted(folder.glob("*.manifest"))
    assert 1 <= len(manifests) <= 2, manifests
    assert not list(folder.glob("*.tmp"))
    for m in manifests:
        kv = dict(line.split(" ", 1) for line in m.read_text().splitlines()[1:])
        data = folder / kv["file"]
        assert data.stat().st_size == int(kv["bytes"])
        assert hashlib.sha256(data.read_bytes()).hexdigest() == kv["sha256"]


def test_kill9_resume_is_bitwise_equal(pb, tmp):
    t = pb
    # 10 kills (issue #8): a checkpoint every 2 steps, so many of them land inside a checkpoint write.
    spec = mlp_spec(t, steps=100, checkpoint_interval=2, eval_images=200)
    # The uninterrupted run.
    ref = Daemon(tmp / "ref")

    stub = ref.start(t)
    try:
        job = stub.StartJob(t.StartJobRequest(spec=spec))
        wait_state(stub, job.id, {t.SUCCEEDED, t.FAILED})
        reference = losses_of(stub, t, job.id)
    finally:
        assert ref.stop() == 0
    assert len(reference) == 100

    # The same job, killed with SIGKILL at random moments (steps and checkpoint writes alike).

    d = Daemon(tmp / "run")
    stub = d.start(t)
    job = stub.StartJob(t.StartJobRequest(spec=spec))
    rng = random.Random(1234)
    kills = 0
    for target in sorted(rng.sample(range(2, 95), 10)):
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            j = stub.GetJob(t.GetJobRequest(id=job.id))
            if j.step >= target or j.state == t.SUCCEEDED:
                break
            time.sleep(0.005)
        if j.state == t.SUCCEEDED:
            break
        time.sleep(rng.random() * 0.02)  # short: the MLP steps are fast and 10 kills must land before the end
        d.kill9()
        kills += 1
        ckdir = d.data / "jobs" / job.id
        # After the crash: only manifests over complete data count; partials are ignored.
        stub = d.start(t)
        j = stub.GetJob(t.GetJobRequest(id=job.id))
        assert j.state in (t.QUEUED, t.RUNNING, t.SUCCEEDED), j
        if ckdir.exists() and list(ckdir.glob("*.manifest")):
            time.sleep(0.2)
    try:
        final = wait_state(stub, job.id, {t.SUCCEEDED, t.FAILED})
        assert final.state == t.SUCCEEDED, final.message
        assert kills == 10
        resumed = losses_of(stub, t, job.id)
        assert resumed.tobytes() == reference.tobytes(), (resumed, reference)
        check_checkpoints(d.data / "jobs" / job.id)
    finally:
        assert d.stop() == 0


def test_sigterm_checkpoints_at_step_boundary_and_resume_job(pb, tmp):
    t = pb
    d = Daemon(tmp, ["--resume-jobs=false"])
    stub = d.start(t)
    spec = mlp_spec(t, steps=400, checkpoint_interval=0, eval_images=100)
    job = stub.StartJob(t.StartJobRequest(spec=spec))
    deadline = time.monotonic() + 120
    while stub.GetJob(t.GetJobRequest(id=job.id)).step < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert d.stop() == 0
    d.extra = ["--resume-jobs=false"]
    stub = d.start(t)
    try:
        j = stub.GetJob(t.GetJobRequest(id=job.id))
        assert j.state == t.INTERRUPTED, j
        assert j.checkpoint_step == j.step and j.step >= 3  # no step lost
        check_checkpoints(d.data / "jobs" / job.id)
        # ResumeJob continues it; CancelJob then stops it.
        r = stub.ResumeJob(t.ResumeJobRequest(id=job.id))
        assert r.state == t.QUEUED
        wait_state(stub, job.id, {t.RUNNING})
        time.sleep(0.3)
        stub.CancelJob(t.CancelJobRequest(id=job.id))
        j = wait_state(stub, job.id, {t.CANCELLED})
        assert j.step >= r.step
        with pytest.raises(grpc.RpcError) as e:
            stub.CancelJob(t.CancelJobRequest(id=job.id))
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        assert d.stop() == 0


def test_upload_dataset_then_train(pb, tmp):
    t = pb
    d = Daemon(tmp)
    stub = d.start(t)
    try:
        def chunks():
            yield t.DatasetChunk(name="fm_small")
            for kind, fname in [(t.DatasetChunk.TRAIN_IMAGES, "train-images-idx3-ubyte.gz"),
                                (t.DatasetChunk.TRAIN_LABELS, "train-labels-idx1-ubyte.gz")]:
                raw = (FASHION / fname).read_bytes()
                for i in range(0, len(raw), 1 << 20):
                    yield t.DatasetChunk(file=kind, data=raw[i:i + (1 << 20)])
        resp = stub.UploadDataset(chunks())
        assert resp.train_items == 60000 and len(resp.dataset_id) == 16
        spec = mlp_spec(t, steps=3, checkpoint_interval=0)
        spec.dataset.dataset_id = resp.dataset_id
        job = stub.StartJob(t.StartJobRequest(spec=spec))
        j = wait_state(stub, job.id, {t.SUCCEEDED, t.FAILED})
        assert j.state == t.SUCCEEDED, j.message
        # A malformed upload is refused with the file named.
        with pytest.raises(grpc.RpcError) as e:
            stub.UploadDataset(iter([t.DatasetChunk(file=t.DatasetChunk.TRAIN_IMAGES,
                                                    data=b"not idx")]))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "images" in e.value.details()
    finally:
        assert d.stop() == 0


def test_hot_swap_under_load_fails_no_request(pb, tmp):
    """Client threads infer on fmnist_mlp without a version while a second job publishes version 2
    of it: no request fails, every response names version 1 or 2, a thread never goes back from 2
    to 1, and every request sent after the job SUCCEEDED is answered by version 2 with version 2's
    weights."""
    t = pb
    d = Daemon(tmp)
    stub = d.start(t)
    try:
        first = stub.StartJob(t.StartJobRequest(spec=mlp_spec(t, steps=5, checkpoint_interval=0)))
        j = wait_state(stub, first.id, {t.SUCCEEDED, t.FAILED})
        assert j.state == t.SUCCEEDED and j.published_version == 1, j.message

        x = (read_idx(FASHION / "t10k-images-idx3-ubyte.gz")[:8].reshape(8, 784) / 255.0
             ).astype(np.float32)
        stop = threading.Event()
        published = threading.Event()
        lock = threading.Lock()
        failures: list[str] = []
        # Per thread: (sent after the publish was observed, model_version, OUTPUT).
        results: list[list[tuple[bool, str, np.ndarray]]] = [[] for _ in range(4)]

        def worker(k):
            client = grpcclient.InferenceServerClient(url=d.server.url)
            inp = grpcclient.InferInput("INPUT", [8, 784], "FP32")
            inp.set_data_from_numpy(x)
            after = 0
            try:
                while not stop.is_set() or (published.is_set() and after < 5):
                    sent_after = published.is_set()
                    try:
                        r = client.infer("fmnist_mlp", [inp])
                    except Exception as e:  # noqa: BLE001 - every failure is the finding
                        with lock:
                            failures.append(f"thread {k}: {e}")
                        if len(failures) > 20:
                            return
                        continue
                    results[k].append((sent_after, r.get_response().model_version,
                                       r.as_numpy("OUTPUT")))
                    after += sent_after
            finally:
                client.close()

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        try:
            # Load is running before the swap starts.
            while (min(len(r) for r in results) < 3 and not failures
                   and all(th.is_alive() for th in threads)):
                time.sleep(0.01)
            second = stub.StartJob(t.StartJobRequest(
                spec=mlp_spec(t, steps=40, checkpoint_interval=0, seed=11)))
            j = wait_state(stub, second.id, {t.SUCCEEDED, t.FAILED})
            published.set()
        finally:
            stop.set()
            for th in threads:
                th.join(timeout=120)
        assert j.state == t.SUCCEEDED and j.published_version == 2, j.message
        assert failures == [], failures[:5]

        w1 = read_safetensors(d.repo / "fmnist_mlp" / "1" / "model.safetensors")
        w2 = read_safetensors(d.repo / "fmnist_mlp" / "2" / "model.safetensors")
        want = {"1": mlp_forward(w1, x), "2": mlp_forward(w2, x)}
        assert not np.allclose(want["1"], want["2"], rtol=1e-3, atol=1e-3)
        for k, rs in enumerate(results):
            versions = [v for _, v, _ in rs]
            assert set(versions) <= {"1", "2"}, (k, set(versions))
            assert versions == sorted(versions), f"thread {k} went back to version 1"
            assert [v for after, v, _ in rs if after] == ["2"] * sum(a for a, _, _ in rs)
            assert sum(a for a, _, _ in rs) >= 5
            for _, v, out in rs:  # each answer comes from the weights of the version it names
                np.testing.assert_allclose(out, want[v], rtol=1e-4, atol=1e-4)
        assert sum(v == "1" for rs in results for _, v, _ in rs) >= 12  # load ran before the swap
    finally:
        assert d.stop() == 0


@pytest.mark.skipif(os.environ.get("KILN_SLOW") != "1", reason="slow: CTest e2e_training_slow")
def test_fashion_mnist_cnn_reaches_80_percent(pb, tmp):
    """The example's model and steps (mnist_cnn, Adam 1e-3, 70 steps of 512) through kilnd with seeds 42, 1 and 2
    (one run moves by about +-1 point with the seed; tests/examples/train_check.py): the median job's eval accuracy
    on the 10k test images is >= 80% (tests/examples/train_check.py says why not 83%: one seed's step-70 accuracy
    moves by up to 2 points with ulp-level kernel changes), then tritonclient on that job's published version
    against the IDX labels."""
    t = pb
    d = Daemon(tmp)
    stub = d.start(t)
    try:
        done = []
        # Jobs run one at a time, each publishing version 1 of a model of its own: one model taking three
        # versions would keep only the latest loaded (Triton's default version policy), and the median job's
        # version must stay servable.
        for seed in (42, 1, 2):
            spec = t.JobSpec(architecture="mnist_cnn", batch_size=512, steps=70, checkpoint_interval=10,
                             seed=seed, output_model=f"fmnist_cnn_s{seed}")
            spec.dataset.idx_dir = "fashion-mnist"
            spec.optimizer.lr = 1e-3
            job = stub.StartJob(t.StartJobRequest(spec=spec))
            events = list(stub.WatchJob(t.WatchJobRequest(id=job.id), timeout=7200))
            assert events[-1].job.state == t.SUCCEEDED, events[-1].job.message
            done.append((events[-1].job, f"fmnist_cnn_s{seed}"))
        median, median_model = sorted(done, key=lambda jm: jm[0].eval_accuracy)[1]
        done = [j for j, _ in done]
        print("eval accuracy per seed (42, 1, 2):", [round(j.eval_accuracy, 4) for j in done])
        assert median.eval_accuracy >= 0.80
        # the CNN job trains on raw 0-255 pixels (tinygrad's beautiful_mnist convention)
        images = read_idx(FASHION / "t10k-images-idx3-ubyte.gz")[:1000].astype(np.float32)
        labels = read_idx(FASHION / "t10k-labels-idx1-ubyte.gz")[:1000]
        client = grpcclient.InferenceServerClient(url=d.server.url)
        correct = 0
        for s in range(0, 1000, 50):
            inp = grpcclient.InferInput("INPUT", [50, 1, 28, 28], "FP32")
            inp.set_data_from_numpy(images[s:s + 50].reshape(50, 1, 28, 28))
            out = client.infer(median_model, [inp], model_version=str(median.published_version)).as_numpy("OUTPUT")
            correct += int((out.argmax(1) == labels[s:s + 50]).sum())
        assert correct / 1000 >= 0.80
        client.close()
    finally:
        assert d.stop() == 0
