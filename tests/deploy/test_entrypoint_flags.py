"""The flags each deploy file starts kilnd with, exercised: kilnd is started with exactly the
argument list of the image's CMD (both Dockerfiles), the Kubernetes Deployment and the KServe
ServingRuntime, with only the listening ports made free and the repository and data paths made
local (the repository a writable copy: for the Deployment, the ConfigMap written out the way its
volume items say, as its init container copies it). Each must come up ready with the bundled
models, answer an inference and count it in its metrics, pass the HEALTHCHECK script, and exit 0
on SIGTERM. The images and the Deployment train: a job on the dataset root they name succeeds
and its published model serves. KServe's runtime serves only (KServe owns its repository)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import (DEPLOY, PENDING_FLAGS, REPO, Daemon, exec_form, free_port, kilnd_binary,
                      read_dockerfile, run, split_flag)

PORT_FLAGS = ("grpc_port", "metrics_port", "http_port")
MODELS = ("add_sub", "reduce_sum")


def dockerfile_cmd(name: str) -> list[str]:
    return exec_form(read_dockerfile(DEPLOY / name)[-1].one("CMD"))


def deployment_args() -> list[str]:
    doc = yaml.safe_load((DEPLOY / "k8s" / "deployment.yaml").read_text())
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return container["args"]


def servingruntime_args() -> list[str]:
    doc = yaml.safe_load((DEPLOY / "kserve" / "servingruntime.yaml").read_text())
    return doc["spec"]["containers"][0]["args"]


def configmap_repository(dest: Path) -> Path:
    """The model repository a pod sees at /models: the ConfigMap's keys at the volume's paths."""
    cm = yaml.safe_load((DEPLOY / "k8s" / "configmap.yaml").read_text())
    doc = yaml.safe_load((DEPLOY / "k8s" / "deployment.yaml").read_text())
    (volume,) = [v for v in doc["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    for item in volume["configMap"]["items"]:
        path = dest / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        key = item["key"]
        if key in cm.get("data", {}):
            path.write_text(cm["data"][key])
        else:  # weights: base64 in binaryData
            path.write_bytes(base64.b64decode(cm["binaryData"][key], validate=True))
    return dest


def test_pending_flags_are_still_pending(flag_defaults):
    landed = sorted(f for f in PENDING_FLAGS if f in flag_defaults)
    assert not landed, \
        f"kilnd has {landed} now: remove them from PENDING_FLAGS (tests/deploy/conftest.py)"


# Where the images keep the model repository and kilnd's data directory (both volumes), and the
# one deliberate non-default: published ports without API keys (README "Securing kilnd").
IMAGE_PATHS = {"model_repository": "/var/lib/kiln/models", "data_dir": "/var/lib/kiln/data",
               "allow_unauthenticated": "true"}


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda"])
def test_image_cmd_is_the_documented_defaults(name, flag_defaults):
    """Every CMD flag is a kilnd flag with the value `kilnd --helpfull` documents as its default,
    the image's paths and --allow-unauthenticated aside (IMAGE_PATHS): training is on, on the default
    dataset root."""
    seen = set()
    for arg in dockerfile_cmd(name):
        flag, value = split_flag(arg)
        seen.add(flag)
        if flag in IMAGE_PATHS:
            assert value == IMAGE_PATHS[flag]
        elif flag in flag_defaults:
            assert value == flag_defaults[flag], f"{arg}: kilnd's default is {flag_defaults[flag]}"
        else:
            assert flag in PENDING_FLAGS, f"{arg}: kilnd has no such flag"
            assert value == PENDING_FLAGS[flag][1]
    assert {"model_repository", "data_dir", "dataset_roots", "grpc_port", "metrics_port",
            "http_port", "exit_timeout_secs"} <= seen


# case -> (its argument list, its repository path, its data directory or None: no training)
CASES = {
    "Dockerfile": (lambda: dockerfile_cmd("Dockerfile"), "/var/lib/kiln/models",
                   "/var/lib/kiln/data"),
    "Dockerfile.cuda": (lambda: dockerfile_cmd("Dockerfile.cuda"), "/var/lib/kiln/models",
                        "/var/lib/kiln/data"),
    "k8s-deployment": (deployment_args, "/models", "/var/lib/kiln/data"),
    "kserve-servingruntime": (servingruntime_args, "/mnt/models", None),
}


def local_argv(args: list[str], paths: dict[str, tuple[str, Path]],
               flag_defaults: dict[str, str]) -> tuple[list[str], dict[str, int]]:
    """The same flags, in the same order and spelling; ports free, the paths in `paths`
    ({flag: (container path, local path)}) local, and flags kilnd does not have yet
    (PENDING_FLAGS) left out."""
    argv, ports = [], {}
    for arg in args:
        flag, value = split_flag(arg)
        spelled = arg.split("=", 1)[0]
        if flag not in flag_defaults:
            assert flag in PENDING_FLAGS, f"{arg}: kilnd has no such flag"
            continue
        if flag in PORT_FLAGS:
            ports[flag] = free_port()
            value = str(ports[flag])
        elif flag in paths:
            assert value == paths[flag][0], arg
            value = str(paths[flag][1])
        argv.append(f"{spelled}={value}")
    return argv, ports


def http_json(port: int, method: str, path: str, body=None) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_training(http_port: int, grpc_port: int, daemon) -> None:
    """A short job on the Fashion-MNIST folder under the case's dataset root publishes a model
    that then serves."""
    status, job = http_json(http_port, "POST", "/v1/training/jobs", {
        "architecture": "mlp", "mlpSizes": [784, 16, 10], "dataset": {"idxDir": "fashion-mnist"},
        "batchSize": 16, "steps": 3, "evalImages": 100, "outputModel": "deploy_mlp"})
    assert status == 200, (job, daemon.logs())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status, job = http_json(http_port, "GET", f"/v1/training/jobs/{job['id']}")
        if job["state"] in ("SUCCEEDED", "FAILED"):
            break
        time.sleep(0.1)
    assert job["state"] == "SUCCEEDED" and job["publishedVersion"] == "1", (job, daemon.logs())
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_port}")
    try:
        assert client.is_model_ready("deploy_mlp")
        x = grpcclient.InferInput("INPUT", [2, 784], "FP32")
        x.set_data_from_numpy(np.random.default_rng(0).random((2, 784), dtype=np.float32))
        out = client.infer("deploy_mlp", [x]).as_numpy("OUTPUT")
        assert out.shape == (2, 10) and np.isfinite(out).all()
    finally:
        client.close()


@pytest.mark.parametrize("case", list(CASES))
def test_kilnd_starts_with_the_deploy_flags(case, flag_defaults):
    args_of, container_repo, container_data = CASES[case]
    args = args_of()
    with tempfile.TemporaryDirectory(prefix="kiln_flags_") as scratch:
        scratch = Path(scratch)
        env = {}
        repo = scratch / "models"  # writable, as the image's volume and the pod's emptyDir are
        if case == "k8s-deployment":
            configmap_repository(repo)
        else:
            shutil.copytree(REPO / "models", repo)
        paths = {"model_repository": (container_repo, repo)}
        if container_data is None:
            assert "data_dir" not in dict(split_flag(a) for a in args)
        else:
            paths["data_dir"] = (container_data, scratch / "data")
        if case == "Dockerfile.cuda":  # run on the library bundle that image carries
            out = run(["bash", str(DEPLOY / "bundle-libs.sh"), str(kilnd_binary()),
                       str(scratch / "lib")])
            assert out.returncode == 0, out.stderr
            env["LD_LIBRARY_PATH"] = str(scratch / "lib")
        argv, ports = local_argv(args, paths, flag_defaults)
        daemon = Daemon(argv, env)
        try:
            daemon.wait_ready(ports["grpc_port"])
            import tritonclient.grpc as grpcclient

            client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{ports['grpc_port']}")
            try:
                for model in MODELS:
                    assert client.is_model_ready(model), f"{model} not ready:\n{daemon.logs()}"
                inputs = []
                for name in ("INPUT0", "INPUT1"):
                    inputs.append(grpcclient.InferInput(name, [1, 16], "FP32"))
                    inputs[-1].set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
                result = client.infer("add_sub", inputs)
                assert (result.as_numpy("OUTPUT0") == 2).all()
            finally:
                client.close()
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{ports['metrics_port']}/metrics", timeout=10) as r:
                text = r.read().decode()
            assert 'nv_inference_request_success{model="add_sub",version="1"} 1' in text, text
            hc_env = dict(os.environ, KILN_HTTP_PORT=str(ports["http_port"]))
            for path in ("/v2/health/ready", "/v2/health/live"):
                rc = subprocess.run(["bash", str(DEPLOY / "healthcheck.sh"), path],
                                    env=hc_env, timeout=30).returncode
                assert rc == 0, f"healthcheck {path} failed:\n{daemon.logs()}"
            if container_data is not None:
                check_training(ports["http_port"], ports["grpc_port"], daemon)
            else:
                status, body = http_json(ports["http_port"], "GET", "/v1/training/jobs")
                assert status == 503 and "--data-dir" in body["error"], body
        finally:
            start = time.monotonic()
            rc = daemon.stop()
        exit_timeout = int(dict(split_flag(a) for a in args)["exit_timeout_secs"])
        assert rc == 0
        assert time.monotonic() - start < exit_timeout
