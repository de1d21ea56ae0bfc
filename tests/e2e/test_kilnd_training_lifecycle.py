"""Training jobs that never touch another model, and the job lifecycle the README describes
(issue #25): a real kilnd with --data-dir, kiln.v1.Training over gRPC (stubs generated from
proto/ by protoc), the REST routes with http.client, and inference with the stock tritonclient.

The publish-overwrite reproduction: on the issue's kilnd, `--output-model add_sub` wrote
add_sub/2/model.safetensors into the kiln_graph model add_sub; its reload failed and add_sub did
not come back after a restart. Here the same request is refused at submit (gRPC ALREADY_EXISTS,
REST 409), add_sub's files are byte-identical afterwards, and add_sub serves (checked against
numpy) after kilnd restarts. References: numpy for add_sub's outputs, hashlib for file contents
and the downloaded checkpoint, an uninterrupted run for the cancel-and-resume loss curve."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from test_kilnd_rest import call as http_call
from test_kilnd_training import (Daemon, losses_of, mlp_spec, pb, wait_state,  # noqa: F401
                                 _types)

REPO = Path(__file__).resolve().parents[2]


def tree_digest(folder: Path) -> dict[str, str]:
    """{relative path: SHA-256} of every file under `folder` (what "untouched" means)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def add_sub_serves(url: str) -> None:
    a = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    b = np.random.default_rng(4).standard_normal((2, 16)).astype(np.float32)
    client = grpcclient.InferenceServerClient(url=url)
    try:
        assert client.is_model_ready("add_sub")
        inputs = [grpcclient.InferInput("INPUT0", [2, 16], "FP32"),
                  grpcclient.InferInput("INPUT1", [2, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    finally:
        client.close()


def job_spec(t, model: str, **kw):
    """A small deterministic MLP job publishing as `model`, checkpointing only at the end."""
    return mlp_spec(t, output_model=model, checkpoint_interval=0, **kw)


def rest(daemon: Daemon, method: str, path: str, body=None):
    status, headers, data = http_call(daemon.server.http_port, method, path, body, timeout=180)
    return status, headers, data


def test_publish_into_another_model_is_refused_and_it_survives_a_restart(pb, tmp_path):
    t = pb
    d = Daemon(tmp_path)
    shutil.copytree(REPO / "models", d.repo, dirs_exist_ok=True)
    before = tree_digest(d.repo / "add_sub")
    stub = d.start(t)
    try:
        add_sub_serves(d.server.url)
        # The request: train an MLP and publish it as add_sub (a kiln_graph model).
        spec = mlp_spec(t, output_model="add_sub", steps=5)
        with pytest.raises(grpc.RpcError) as err:
            stub.StartJob(t.StartJobRequest(spec=spec))
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS, err.value.details()
        assert "output_model" in err.value.details() and "'add_sub'" in err.value.details()
        assert "no training job published" in err.value.details()
        status, _, data = rest(d, "POST", "/v1/training/jobs",
                               {"architecture": "mlp", "dataset": {"idxDir": "fashion-mnist"},
                                "batchSize": 8, "steps": 5, "outputModel": "add_sub"})
        assert status == 409, data
        assert "'add_sub'" in json.loads(data)["error"]
        # So is a bundled kiln_builtin model (fine-tuning it publishes to a new name instead).
        with pytest.raises(grpc.RpcError) as err:
            stub.StartJob(t.StartJobRequest(spec=mlp_spec(t, output_model="fashion_mnist")))
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert list(stub.ListJobs(t.ListJobsRequest()).jobs) == []
        add_sub_serves(d.server.url)
    finally:
        assert d.stop() == 0
    assert tree_digest(d.repo / "add_sub") == before
    stub = d.start(t)
    try:
        add_sub_serves(d.server.url)
    finally:
        assert d.stop() == 0


def test_a_job_publishes_new_versions_of_its_own_lineage(pb, tmp_path):
    t = pb
    d = Daemon(tmp_path)
    stub = d.start(t)
    try:
        first = stub.StartJob(t.StartJobRequest(spec=job_spec(t, "lineage", steps=4)))
        assert wait_state(stub, first.id, {t.SUCCEEDED, t.FAILED}).published_version == 1
        second = stub.StartJob(t.StartJobRequest(spec=job_spec(t, "lineage", steps=4, seed=8)))
        assert wait_state(stub, second.id, {t.SUCCEEDED, t.FAILED}).published_version == 2
        # Another architecture cannot publish into that MLP model.
        cnn = job_spec(t, "lineage", steps=2)
        cnn.architecture = "mnist_cnn"
        del cnn.mlp_sizes[:]
        with pytest.raises(grpc.RpcError) as err:
            stub.StartJob(t.StartJobRequest(spec=cnn))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "'lineage' is a mlp model" in err.value.details()
    finally:
        assert d.stop() == 0
    # The lineage is in the job store: it outlives a restart.
    stub = d.start(t)
    try:
        third = stub.StartJob(t.StartJobRequest(spec=job_spec(t, "lineage", steps=4, seed=9)))
        assert wait_state(stub, third.id, {t.SUCCEEDED, t.FAILED}).published_version == 3
        assert sorted(p.name for p in (d.repo / "lineage").iterdir()) == \
            ["1", "2", "3", "config.pbtxt"]
    finally:
        assert d.stop() == 0


def test_a_model_that_appears_after_submit_is_not_touched(pb, tmp_path):
    t = pb
    d = Daemon(tmp_path)
    stub = d.start(t)
    try:
        # A long job keeps the worker busy while the second one waits in the queue.
        busy = stub.StartJob(t.StartJobRequest(spec=job_spec(t, "busy", steps=100000)))
        late = stub.StartJob(t.StartJobRequest(spec=job_spec(t, "late", steps=3)))
        shutil.copytree(REPO / "models" / "add_sub", d.repo / "late")
        (d.repo / "late" / "config.pbtxt").write_text(
            (d.repo / "late" / "config.pbtxt").read_text().replace('"add_sub"', '"late"'))
        before = tree_digest(d.repo / "late")
        assert stub.CancelJob(t.CancelJobRequest(id=busy.id)).state == t.CANCELLED
        job = wait_state(stub, late.id, {t.SUCCEEDED, t.FAILED})
        assert job.state == t.FAILED, job
        assert "output_model 'late' appeared in the model repository" in job.message, job.message
        assert job.published_version == 0
        assert tree_digest(d.repo / "late") == before
    finally:
        assert d.stop() == 0


def safetensors_metadata(raw: bytes) -> dict:
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]).get("__metadata__", {})


def test_cancel_checkpoints_resume_continues_and_the_checkpoint_downloads(pb, tmp_path):
    t = pb
    d = Daemon(tmp_path)
    stub = d.start(t)
    try:
        spec = job_spec(t, "resumed", steps=120)
        reference = stub.StartJob(t.StartJobRequest(spec=job_spec(t, "uninterrupted", steps=120)))
        assert wait_state(stub, reference.id, {t.SUCCEEDED, t.FAILED}).state == t.SUCCEEDED
        job = stub.StartJob(t.StartJobRequest(spec=spec))
        # No checkpoint yet: NOT_FOUND (404), not an empty file.
        with pytest.raises(grpc.RpcError) as err:
            list(stub.GetCheckpoint(t.GetCheckpointRequest(id=job.id)))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert rest(d, "GET", f"/v1/training/jobs/{job.id}/checkpoint")[0] == 404
        deadline = time.monotonic() + 120
        while stub.GetJob(t.GetJobRequest(id=job.id)).step < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        # CancelJob returns once the job stopped, with its progress checkpointed.
        stopped = stub.CancelJob(t.CancelJobRequest(id=job.id))
        assert stopped.state == t.CANCELLED, stopped
        assert stopped.checkpoint_step == stopped.step >= 5, stopped
        assert stopped.step < spec.steps

        chunks = list(stub.GetCheckpoint(t.GetCheckpointRequest(id=job.id)))
        raw = b"".join(c.data for c in chunks)
        assert chunks[0].step == stopped.step and chunks[0].bytes == len(raw)
        assert chunks[0].sha256 == hashlib.sha256(raw).hexdigest()
        meta = safetensors_metadata(raw)
        assert meta["job"] == job.id and int(meta["step"]) == stopped.step, meta
        on_disk = (d.data / "jobs" / job.id / f"ckpt-{stopped.step:010d}.safetensors").read_bytes()
        assert raw == on_disk
        status, headers, body = rest(d, "GET", f"/v1/training/jobs/{job.id}/checkpoint")
        assert status == 200 and body == raw
        assert headers["Content-Type"] == "application/octet-stream"
        assert headers["X-Kiln-Checkpoint-Step"] == str(stopped.step)
        assert headers["X-Kiln-Checkpoint-Sha256"] == chunks[0].sha256

        # ResumeJob continues from that checkpoint; the loss curve is the uninterrupted run's.
        resumed = stub.ResumeJob(t.ResumeJobRequest(id=job.id))
        assert resumed.state == t.QUEUED
        assert f"checkpoint at step {stopped.step}" in resumed.message
        done = wait_state(stub, job.id, {t.SUCCEEDED, t.FAILED})
        assert done.state == t.SUCCEEDED and done.published_version == 1, done
        assert losses_of(stub, t, job.id).tobytes() == losses_of(stub, t, reference.id).tobytes()
        # A finished job neither cancels nor resumes.
        for rpc, request in ((stub.CancelJob, t.CancelJobRequest(id=job.id)),
                             (stub.ResumeJob, t.ResumeJobRequest(id=job.id))):
            with pytest.raises(grpc.RpcError) as err:
                rpc(request)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        last = b"".join(c.data for c in stub.GetCheckpoint(t.GetCheckpointRequest(id=job.id)))
        assert int(safetensors_metadata(last)["step"]) == spec.steps
    finally:
        assert d.stop() == 0


def test_checkpoint_route_errors(pb, tmp_path):
    t = pb
    d = Daemon(tmp_path)
    stub = d.start(t)
    try:
        for bad, code, http in (("0123456789abcdef", grpc.StatusCode.NOT_FOUND, 404),
                                ("not-an-id", grpc.StatusCode.INVALID_ARGUMENT, 400)):
            with pytest.raises(grpc.RpcError) as err:
                list(stub.GetCheckpoint(t.GetCheckpointRequest(id=bad)))
            assert err.value.code() == code
            status, _, data = rest(d, "GET", f"/v1/training/jobs/{bad}/checkpoint")
            assert status == http and "id" in json.loads(data)["error"], data
        status, headers, _ = rest(d, "POST", "/v1/training/jobs/0123456789abcdef/checkpoint", {})
        assert status == 405 and headers.get("Allow") == "GET"
        # The daemon keeps answering.
        assert list(stub.ListJobs(t.ListJobsRequest()).jobs) == []
    finally:
        assert d.stop() == 0
