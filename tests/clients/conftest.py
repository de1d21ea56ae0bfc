"""Fixtures for the client tests: a real kilnd (the e2e suite's Kilnd launcher, free loopback
ports) and the paths of the client binaries. KILND, KILN_CLI and KILN_MODELS come from CTest
(tests/clients/CMakeLists.txt)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
# The package of this checkout, whatever `pip install -e` put on the venv's path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))
from kilnd_launcher import Kilnd  # noqa: E402


@pytest.fixture(scope="module")
def models() -> Path:
    path = os.environ.get("KILN_MODELS")
    if not path:
        raise RuntimeError("KILN_MODELS must name the bundled model repository")
    return Path(path)


@pytest.fixture(scope="module")
def kilnd(models):
    server = Kilnd(models, ["--metrics-port=-1"])
    yield server
    assert server.stop() == 0
