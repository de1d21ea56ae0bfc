"""Training jobs at the worst moments (issue #8): kilnd killed at an exact stage of a checkpoint
write or of the publish step (KILN_FAILPOINTS, server/core/failpoint.h), and a checkpoint write
that runs out of disk (a small tmpfs as --data-dir).

Reference values are independent of the code under test: the loss curve and the published
weights of an uninterrupted run of the same deterministic job, manifests checked with hashlib,
published weights read by a safetensors reader written here and run through numpy.

The disk-full test mounts a tmpfs: as root with mount(8), else in a user+mount namespace
(`unshare -rm`); KILN_TEST_TMPFS=unshare forces the second way (to test it as root). It fails,
never skips, when neither works."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from builtin_models import read_idx, read_safetensors
# pb is a fixture (the generated kiln.v1 messages).
from test_kilnd_training import (FASHION, TrainingStub, check_checkpoints, losses_of,  # noqa: F401
                                 mlp_forward, mlp_spec, pb)
from kilnd_launcher import Kilnd
from test_kilnd_training_rest import upload_early_answer

MODELS = Path(__file__).resolve().parents[2] / "models"


class Daemon:
    """kilnd on a repository and data dir that outlive restarts; KILN_FAILPOINTS per start."""

    def __init__(self, root: Path, data: Path | None = None, wrapper: list[str] | None = None):
        self.repo = root / "repo"
        self.data = data or root / "data"
        self.repo.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)
        self.wrapper = wrapper
        self.server: Kilnd | None = None

    def start(self, t, failpoints: str | None = None) -> TrainingStub:
        saved = os.environ.pop("KILN_FAILPOINTS", None)
        if failpoints:
            os.environ["KILN_FAILPOINTS"] = failpoints
        try:
            self.server = Kilnd(self.repo, [f"--data-dir={self.data}", "--metrics-port=-1"],
                                wrapper=self.wrapper)
        finally:
            os.environ.pop("KILN_FAILPOINTS", None)
            if saved is not None:
                os.environ["KILN_FAILPOINTS"] = saved
        self.channel = grpc.insecure_channel(self.server.url)
        return TrainingStub(self.channel, t)

    def wait_killed(self, point: str, hit: int, timeout=300) -> str:
        """Waits for kilnd to die of SIGKILL at the `hit`-th pass of failpoint `point`; its log."""
        rc = self.server.proc.wait(timeout)
        log = self.server.logs()
        self.channel.close()
        self.server.log.close()
        shutil.rmtree(self.server.scratch, ignore_errors=True)
        assert rc == -9, f"kilnd exited with {rc}, not SIGKILL:\n{log[-3000:]}"
        assert f"failpoint {point}: kill (hit {hit})" in log
        return log

    def stop(self) -> tuple[int, str]:
        self.channel.close()
        log = self.server.logs()
        return self.server.stop(), log


def wait_state(stub, t, job_id, states, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = stub.GetJob(t.GetJobRequest(id=job_id))
        if job.state in states:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach {states}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


CKPT_SPEC = dict(steps=16, checkpoint_interval=4, eval_images=200)  # checkpoints 4, 8, 12, 16
PUB_SPEC = dict(steps=6, checkpoint_interval=0, eval_images=200, output_model="fm_pub")


@pytest.fixture(scope="module")
def reference(pb, tmp_path_factory):
    """The uninterrupted runs: loss curves and the published weights' SHA-256."""
    t = pb
    d = Daemon(tmp_path_factory.mktemp("reference"))
    stub = d.start(t)
    out = {}
    try:
        for key, kw in (("ckpt", CKPT_SPEC), ("pub", PUB_SPEC)):
            job = stub.StartJob(t.StartJobRequest(spec=mlp_spec(t, **kw)))
            j = wait_state(stub, t, job.id, {t.SUCCEEDED, t.FAILED})
            assert j.state == t.SUCCEEDED, j.message
            out[key] = losses_of(stub, t, job.id)
        out["pub_sha"] = sha256(d.repo / "fm_pub" / "1" / "model.safetensors")
    finally:
        assert d.stop()[0] == 0
    assert len(out["ckpt"]) == 16 and len(out["pub"]) == 6
    return out


def files_of(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


# failpoint -> (files of the step-12 generation on disk when kilnd dies, step the job resumes from)
CHECKPOINT_POINTS = {
    "checkpoint.after_temp_write": ({"ckpt-0000000012.safetensors.tmp"}, 8),
    "checkpoint.after_temp_fsync": ({"ckpt-0000000012.safetensors.tmp"}, 8),
    "checkpoint.after_rename": ({"ckpt-0000000012.safetensors"}, 8),
    "checkpoint.after_manifest": ({"ckpt-0000000012.safetensors", "ckpt-0000000012.manifest"}, 12),
}


@pytest.mark.parametrize("point", sorted(CHECKPOINT_POINTS))
def test_kill_inside_the_third_checkpoint_write(pb, tmp_path, reference, point):
    """kilnd dies at `point` of the 3rd checkpoint write (step 12); restarted without the
    failpoint, the job resumes from the last complete checkpoint, the partial files are removed
    and never loaded, and the loss curve is bitwise the uninterrupted run's."""
    t = pb
    partial, resume_step = CHECKPOINT_POINTS[point]
    d = Daemon(tmp_path)
    stub = d.start(t, failpoints=f"{point}=kill@3")
    job = stub.StartJob(t.StartJobRequest(spec=mlp_spec(t, **CKPT_SPEC)))
    d.wait_killed(point, 3)
    folder = d.data / "jobs" / job.id
    names = files_of(folder)
    # Exactly the two complete generations (4, 8) plus what this stage leaves of the third.
    complete = {f"ckpt-{s:010d}.{ext}" for s in (4, 8) for ext in ("safetensors", "manifest")}
    assert names == complete | partial, names

    stub = d.start(t)
    try:
        final = wait_state(stub, t, job.id, {t.SUCCEEDED, t.FAILED})
        assert final.state == t.SUCCEEDED, final.message
        resumed = losses_of(stub, t, job.id)
    finally:
        rc, log = d.stop()
    assert rc == 0
    assert f"job {job.id} resumes from the checkpoint at step {resume_step}" in log, log[-3000:]
    for name in partial - complete:
        if not name.endswith(".manifest") and resume_step == 8:
            assert f"removing partial file {name}" in log, log[-3000:]
    assert "skipping step" not in log  # no partial generation was even tried
    # Steps resume_step+1..16 ran again after the restart; the curve is the uninterrupted one.
    assert resumed.tobytes() == reference["ckpt"].tobytes(), (resumed, reference["ckpt"])
    check_checkpoints(folder)
    assert not [n for n in files_of(folder) if ".tmp" in n]


PUBLISH_POINTS = ["publish.after_intent", "publish.after_version_write", "publish.after_mark"]


@pytest.mark.parametrize("point", PUBLISH_POINTS)
def test_kill_mid_publish_publishes_exactly_once(pb, tmp_path, reference, point):
    """kilnd dies at `point` of the publish step; after a restart the job ends SUCCEEDED with
    exactly one version of fm_pub, holding the uninterrupted run's weights, served whole."""
    t = pb
    d = Daemon(tmp_path)
    stub = d.start(t, failpoints=f"{point}=kill")
    job = stub.StartJob(t.StartJobRequest(spec=mlp_spec(t, **PUB_SPEC)))
    d.wait_killed(point, 1)
    mdir = d.repo / "fm_pub"
    versions_at_kill = {p.name for p in mdir.iterdir() if p.name.isdigit()} if mdir.exists() else set()
    assert versions_at_kill == (set() if point == "publish.after_intent" else {"1"})

    stub = d.start(t)
    try:
        final = wait_state(stub, t, job.id, {t.SUCCEEDED, t.FAILED})
        assert final.state == t.SUCCEEDED, final.message
        assert final.published_version == 1 and final.publishing_version == 0, final
        assert sorted(p.name for p in mdir.iterdir()) == ["1", "config.pbtxt"]  # no 2, no staging
        weights_file = mdir / "1" / "model.safetensors"
        assert sha256(weights_file) == reference["pub_sha"]
        # The served version is the complete one: tritonclient against numpy on its weights.
        x = (read_idx(FASHION / "t10k-images-idx3-ubyte.gz")[:16].reshape(16, 784) / 255.0
             ).astype(np.float32)
        client = grpcclient.InferenceServerClient(url=d.server.url)
        try:
            inp = grpcclient.InferInput("INPUT", [16, 784], "FP32")
            inp.set_data_from_numpy(x)
            r = client.infer("fm_pub", [inp])
            assert r.get_response().model_version == "1"
            np.testing.assert_allclose(r.as_numpy("OUTPUT"),
                                       mlp_forward(read_safetensors(weights_file), x),
                                       rtol=1e-4, atol=1e-4)
        finally:
            client.close()
        # A second job to the same model gets version 2: the intent left nothing reserved.
        job2 = stub.StartJob(t.StartJobRequest(spec=mlp_spec(t, **{**PUB_SPEC, "steps": 2})))
        j2 = wait_state(stub, t, job2.id, {t.SUCCEEDED, t.FAILED})
        assert j2.state == t.SUCCEEDED and j2.published_version == 2, j2
        assert losses_of(stub, t, job.id).tobytes() == reference["pub"].tobytes()
    finally:
        assert d.stop()[0] == 0


# ---- disk full ----

TMPFS_BYTES = 12 << 20  # two MLP-784-512-10 Adam checkpoints (~4.9 MB each) fit, a third does not


def mount_tmpfs(target: Path) -> tuple[Path, list[str] | None, callable]:
    """A TMPFS_BYTES tmpfs for --data-dir. Returns (the folder kilnd uses, a command prefix that
    kilnd must run under or None, cleanup). As root: a plain mount. Otherwise: a user+mount
    namespace (`unshare -rm`) that kilnd runs inside; the test reads the files through
    /proc/<pid>/root. Fails the test (never skips) when neither works."""
    size = f"size={TMPFS_BYTES // 1024}k"
    errors = []
    if os.geteuid() == 0 and os.environ.get("KILN_TEST_TMPFS") != "unshare":
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(target)],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return target, None, lambda: subprocess.run(["umount", "-l", str(target)])
        errors.append(f"mount: {r.stderr.strip()}")
    unshare = shutil.which("unshare")
    if unshare:
        probe = subprocess.run([unshare, "-rm", "sh", "-c",
                                f"mount -t tmpfs -o {size} tmpfs '{target}'"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            wrapper = [unshare, "-rm", "sh", "-c",
                       f"mount -t tmpfs -o {size} tmpfs '{target}' && exec \"$@\"", "sh"]
            return target, wrapper, lambda: None
        errors.append(f"unshare -rm: {probe.stderr.strip()}")
    else:
        errors.append("unshare: not installed")
    pytest.fail("the disk-full test needs a small tmpfs: run as root (CAP_SYS_ADMIN) or allow "
                "unprivileged user namespaces (unshare -rm); " + "; ".join(errors))


def test_disk_full_fails_the_job_keeps_the_checkpoint_and_serving(pb, tmp_path):
    """A 784-512-10 MLP job on a 12 MiB tmpfs: the third checkpoint hits ENOSPC. The job FAILS
    naming ENOSPC, the file and the intact checkpoint; both earlier generations verify; no temp
    is left; tritonclient inference still works; an upload onto the full disk is 507. Then the
    tmpfs grows, ResumeJob finishes the job, and its loss curve equals an uninterrupted run's."""
    t = pb
    data = tmp_path / "data"
    data.mkdir()
    target, wrapper, cleanup = mount_tmpfs(data)
    repo_root = tmp_path / "root"
    (repo_root / "repo").mkdir(parents=True)
    shutil.copytree(MODELS / "add_sub", repo_root / "repo" / "add_sub")
    d = Daemon(repo_root, data=target, wrapper=wrapper)
    try:
        stub = d.start(t)
        # What the test sees of kilnd's data dir (through kilnd's mount namespace if it has one).
        view = Path(f"/proc/{d.server.proc.pid}/root") / str(target).lstrip("/") if wrapper else target
        free = shutil.disk_usage(view)
        assert free.total <= TMPFS_BYTES + (1 << 20), f"data dir is not the small tmpfs: {free}"
        spec = mlp_spec(t, steps=40, checkpoint_interval=2, eval_images=100,
                        output_model="never_published")
        del spec.mlp_sizes[:]
        spec.mlp_sizes.extend([784, 512, 10])
        job = stub.StartJob(t.StartJobRequest(spec=spec))
        j = wait_state(stub, t, job.id, {t.SUCCEEDED, t.FAILED, t.CANCELLED})
        assert j.state == t.FAILED, j
        msg = j.message
        assert "no space left on device" in msg and "ENOSPC" in msg, msg
        m = re.search(r"writing (\S+); ", msg)
        assert m and m.group(1).startswith(f"<data-dir>/jobs/{job.id}/ckpt-"), msg
        folder = view / "jobs" / job.id
        manifests = sorted(folder.glob("*.manifest"))
        assert len(manifests) == 2, files_of(folder)
        last_ok = int(manifests[-1].name[5:15])
        assert f"the checkpoint at step {last_ok} is intact" in msg, msg
        assert j.checkpoint_step == last_ok and j.step >= last_ok
        # The failed write was the next checkpoint after the last complete one.
        assert m.group(1).endswith(f"ckpt-{last_ok + 2:010d}.safetensors.tmp"), msg
        check_checkpoints(folder)  # both generations verify; no *.tmp
        assert not [n for n in files_of(folder) if ".tmp" in n], files_of(folder)
        assert not (d.repo / "never_published").exists()
        # Serving is unaffected: tritonclient inference against numpy.
        client = grpcclient.InferenceServerClient(url=d.server.url)
        try:
            a = np.arange(16, dtype=np.float32).reshape(1, 16)
            b = np.full((1, 16), 2.5, dtype=np.float32)
            inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
                      grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            r = client.infer("add_sub", inputs)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
        finally:
            client.close()
        # A dataset upload that cannot fit: 507 naming ENOSPC, no staging folder left behind.
        images = (FASHION / "train-images-idx3-ubyte.gz").read_bytes()
        head, _, body = upload_early_answer(d.server.http_port,
                                            [("train_images", None, images)]).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 507"), head
        error = json.loads(body)["error"]
        assert "no space left on device (ENOSPC)" in error and "train-images" in error, error
        assert not [p.name for p in (view / "datasets").iterdir()], "upload left files behind"
        # The daemon is still healthy for training calls, and the failure is durable.
        assert stub.GetJob(t.GetJobRequest(id=job.id)).state == t.FAILED
        # With room again, ResumeJob continues from the intact checkpoint and the job's loss curve
        # is bitwise the uninterrupted run's: nothing of the failed write leaked into it.
        grow = ["mount", "-o", "remount,size=64m", str(target)]
        if wrapper:
            grow = ["nsenter", "-t", str(d.server.proc.pid), "-U", "-m", "--preserve-credentials",
                    *grow]
        r = subprocess.run(grow, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert stub.ResumeJob(t.ResumeJobRequest(id=job.id)).state == t.QUEUED
        j = wait_state(stub, t, job.id, {t.SUCCEEDED, t.FAILED})
        assert j.state == t.SUCCEEDED and j.published_version == 1, j.message
        resumed = losses_of(stub, t, job.id)
        rc, log = d.stop()
        assert rc == 0
        assert "disk full writing" in log
        assert f"job {job.id} resumes from the checkpoint at step {last_ok}" in log
    finally:
        if d.server is not None and d.server.proc.poll() is None:
            d.server.proc.kill()
        cleanup()
    # The uninterrupted run of the same job, on an ordinary disk.
    ref = Daemon(tmp_path / "reference")
    stub = ref.start(t)
    try:
        rj = stub.StartJob(t.StartJobRequest(spec=spec))
        assert wait_state(stub, t, rj.id, {t.SUCCEEDED, t.FAILED}).state == t.SUCCEEDED
        reference = losses_of(stub, t, rj.id)
    finally:
        assert ref.stop()[0] == 0
    assert len(reference) == 40 and resumed.tobytes() == reference.tobytes()
