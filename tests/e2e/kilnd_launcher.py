"""Kilnd: starts a real kilnd on free loopback ports (gRPC, HTTP) and stops it with SIGTERM.
Shared by tests/e2e and tests/clients; imports no client library, so either suite picks its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path


class Kilnd:
    def __init__(self, repository: Path, extra: list[str] | None = None,
                 wrapper: list[str] | None = None, env: dict[str, str] | None = None,
                 start_timeout: float = 30):
        """`wrapper`: a command prefix kilnd runs under (e.g. `unshare -rm sh -c ...`); it must
        exec kilnd so that proc.pid is kilnd's pid. `env`: variables added to kilnd's environment
        (knobs such as VIZ=1). `start_timeout`: seconds until the port files (models load first)."""
        self.scratch = Path(tempfile.mkdtemp(prefix="kiln_e2e_"))
        port_file = self.scratch / "port"
        http_port_file = self.scratch / "http_port"
        binary = os.environ.get("KILND")
        if not binary or not Path(binary).is_file():
            raise RuntimeError("KILND must name the kilnd binary (run through ctest)")
        self.log = open(self.scratch / "kilnd.log", "w+")
        self.proc = subprocess.Popen(
            [*(wrapper or []), binary, f"--model-repository={repository}", "--grpc-address=127.0.0.1",
             "--grpc-port=0", f"--port-file={port_file}", "--http-port=-1",
             f"--http-port-file={http_port_file}", *(extra or [])],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + start_timeout
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
