"""The flags each deploy file starts kilnd with, exercised: kilnd is started with exactly the
argument list of the image's CMD (both Dockerfiles), the Kubernetes Deployment and the KServe
ServingRuntime, with only the listening ports made free and the repository path made local (for
the Deployment, the ConfigMap mounted the way its volume items say). Each must come up ready
with the bundled models, answer an inference and count it in its metrics, pass the HEALTHCHECK
script once the REST gateway exists, and exit 0 on SIGTERM."""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
import time
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


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda"])
def test_image_cmd_is_the_documented_defaults(name, flag_defaults):
    """Every CMD flag is a kilnd flag with the value `kilnd --helpfull` documents as its default
    (the repository path aside: it is where the image puts models/)."""
    seen = set()
    for arg in dockerfile_cmd(name):
        flag, value = split_flag(arg)
        seen.add(flag)
        if flag == "model_repository":
            assert value == "/opt/kiln/models"
        elif flag in flag_defaults:
            assert value == flag_defaults[flag], f"{arg}: kilnd's default is {flag_defaults[flag]}"
        else:
            assert flag in PENDING_FLAGS, f"{arg}: kilnd has no such flag"
            assert value == PENDING_FLAGS[flag][1]
    assert {"model_repository", "grpc_port", "metrics_port", "http_port",
            "exit_timeout_secs"} <= seen


CASES = {
    "Dockerfile": (lambda: dockerfile_cmd("Dockerfile"), "/opt/kiln/models"),
    "Dockerfile.cuda": (lambda: dockerfile_cmd("Dockerfile.cuda"), "/opt/kiln/models"),
    "k8s-deployment": (deployment_args, "/models"),
    "kserve-servingruntime": (servingruntime_args, "/mnt/models"),
}


def local_argv(args: list[str], container_repo: str, local_repo: Path,
               flag_defaults: dict[str, str]) -> tuple[list[str], dict[str, int]]:
    """The same flags, in the same order and spelling; ports free, the repository local, and
    flags kilnd does not have yet (PENDING_FLAGS) left out."""
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
        elif flag == "model_repository":
            assert value == container_repo
            value = str(local_repo)
        argv.append(f"{spelled}={value}")
    return argv, ports


@pytest.mark.parametrize("case", list(CASES))
def test_kilnd_starts_with_the_deploy_flags(case, flag_defaults):
    args_of, container_repo = CASES[case]
    args = args_of()
    with tempfile.TemporaryDirectory(prefix="kiln_flags_") as scratch:
        scratch = Path(scratch)
        env = {}
        repo = REPO / "models"
        if case == "k8s-deployment":
            repo = configmap_repository(scratch / "models")
        if case == "Dockerfile.cuda":  # run on the library bundle that image carries
            out = run(["bash", str(DEPLOY / "bundle-libs.sh"), str(kilnd_binary()),
                       str(scratch / "lib")])
            assert out.returncode == 0, out.stderr
            env["LD_LIBRARY_PATH"] = str(scratch / "lib")
        argv, ports = local_argv(args, container_repo, repo, flag_defaults)
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
            if "http_port" in ports:  # the REST gateway has landed: the HEALTHCHECK passes
                hc_env = dict(os.environ, KILN_HTTP_PORT=str(ports["http_port"]))
                for path in ("/v2/health/ready", "/v2/health/live"):
                    rc = subprocess.run(["bash", str(DEPLOY / "healthcheck.sh"), path],
                                        env=hc_env, timeout=30).returncode
                    assert rc == 0, f"healthcheck {path} failed:\n{daemon.logs()}"
        finally:
            start = time.monotonic()
            rc = daemon.stop()
        exit_timeout = int(dict(split_flag(a) for a in args)["exit_timeout_secs"])
        assert rc == 0
        assert time.monotonic() - start < exit_timeout
