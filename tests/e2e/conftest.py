"""Fixtures: a real kilnd on a free loopback port, and a stock tritonclient.grpc client.

KILND (path to the kilnd binary) and KILN_MODELS (the bundled repository) come from CTest
(tests/e2e/CMakeLists.txt). Each test module gets its own daemon, stopped with SIGTERM.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from kilnd_launcher import Kilnd  # noqa: F401 (re-exported for the test modules)


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
