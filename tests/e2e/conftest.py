"""Fixtures: a real kilnd on a free loopback port, and a stock tritonclient.grpc client.

KILND (path to the kilnd binary) and KILN_MODELS (the bundled repository) come from CTest
(tests/e2e/CMakeLists.txt). Each test module gets its own daemon, stopped with SIGTERM.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from kilnd_launcher import Kilnd  # noqa: F401 (re-exported for the test modules)


def require_opencl() -> None:
    """Fails (never skips) when no OpenCL device is visible: deploy/install-deps.sh installs PoCL, so a
    missing device is a broken set-up, and the CL tests must not pass by not running."""
    clinfo = shutil.which("clinfo")
    out = subprocess.run([clinfo, "-l"], capture_output=True, text=True, check=False).stdout if clinfo else ""
    if "Device" not in out:
        pytest.fail("no OpenCL device: deploy/install-deps.sh installs pocl-opencl-icd and clinfo")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def models() -> Path:
    path = os.environ.get("KILN_MODELS")
    if not path:
        raise RuntimeError("KILN_MODELS must name the bundled model repository")
    return Path(path)


@pytest.fixture(scope="module")
def kilnd(models):
    server = Kilnd(models)
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def client(kilnd):
    c = grpcclient.InferenceServerClient(url=kilnd.url)
    yield c
    c.close()
