"""Fixtures: a real kilnd on a free loopback port, and a stock tritonclient.grpc client.

KILND (path to the kilnd binary) and KILN_MODELS (the bundled repository) come from CTest
(tests/e2e/CMakeLists.txt). Each test module gets its own daemon, stopped with SIGTERM.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient


class Kilnd:
    def __init__(self, repository: Path, extra: list[str] | None = None):
        self.scratch = Path(tempfile.mkdtemp(prefix="kiln_e2e_"))
        port_file = self.scratch / "port"
        http_port_file = self.scratch / "http_port"
        binary = os.environ.get("KILND")
        if not binary or not Path(binary).is_file():
            raise RuntimeError("KILND must name the kilnd binary (run through ctest)")
        self.log = open(self.scratch / "kilnd.log", "w+")
        self.proc = subprocess.Popen(
            [binary, f"--model-repository={repository}", "--grpc-address=127.0.0.1",
             "--grpc-port=0", f"--port-file={port_file}", "--http-port=-1",
             f"--http-port-file={http_port_file}", *(extra or [])],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        self.port = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kilnd exited early ({self.proc.returncode}): {self.logs()}")
            if port_file.exists():
                text = port_file.read_text().strip()
                if text:
                    self.port = int(text)
                    break
            time.sleep(0.02)
        if not self.port:
            self.stop()
            raise RuntimeError("kilnd did not write its port file")
        self.url = f"127.0.0.1:{self.port}"
        # kilnd writes the HTTP port file right after the gRPC one.
        self.http_port = 0
        while time.monotonic() < deadline and not self.http_port:
            if http_port_file.exists() and http_port_file.read_text().strip():
                self.http_port = int(http_port_file.read_text().strip())
            else:
                time.sleep(0.01)
        self.http_url = f"127.0.0.1:{self.http_port}"

    def logs(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return self.proc.returncode


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
