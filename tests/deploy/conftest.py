"""Shared helpers for tests/deploy: the repository paths, kilnd's flags as it documents them
(`kilnd --helpfull`), a Dockerfile reader, and a kilnd started with exactly a given argument
list (the flags of an image's CMD or a manifest's args, ports made free, paths made local).

KILND (the built kilnd) and KILN_CLI (the `kiln` command line) come from CTest
(tests/deploy/CMakeLists.txt).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
VENV_BIN = REPO / ".venv" / "bin"

# Flags the deploy files pass that kilnd does not have yet, each with the issue that adds it and
# the default that issue documents. kilnd is started without them until they land; once kilnd
# knows one, the tests fail until it is removed from here.
PENDING_FLAGS: dict[str, tuple[str, str]] = {}  # flag -> (issue, documented default); none pending now


def kilnd_binary() -> Path:
    path = os.environ.get("KILND")
    if not path or not Path(path).is_file():
        raise RuntimeError("KILND must name the kilnd binary (run through ctest -L deploy)")
    return Path(path)


def kiln_cli() -> Path:
    path = os.environ.get("KILN_CLI")
    if not path or not Path(path).is_file():
        raise RuntimeError("KILN_CLI must name the kiln binary (run through ctest -L deploy)")
    return Path(path)


def tool(name: str) -> str:
    """A tool from the venv (hadolint, yamllint, kubernetes-validate) or else from PATH."""
    venv = VENV_BIN / name
    if venv.is_file():
        return str(venv)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found: run deploy/install-deps.sh")
    return found


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)


_HELP_FLAG = re.compile(r"--(\w+) \((.*?)\);\s+default: (.*?);", re.S)


def kilnd_flag_defaults() -> dict[str, str]:
    """{flag name with underscores: default as kilnd --helpfull prints it, quotes removed}."""
    out = run([str(kilnd_binary()), "--helpfull"])
    text = out.stdout + out.stderr
    flags = {}
    for name, _, default in _HELP_FLAG.findall(text):
        flags[name] = default.strip().strip('"')
    if "grpc_port" not in flags:
        raise RuntimeError(f"cannot read kilnd --helpfull:\n{text[:2000]}")
    return flags


def split_flag(arg: str) -> tuple[str, str]:
    """'--grpc-port=8001' -> ('grpc_port', '8001'). Every deploy file spells flags --name=value."""
    m = re.fullmatch(r"--([A-Za-z0-9_-]+)=(.*)", arg)
    if not m:
        raise AssertionError(f"flag {arg!r}: deploy files write flags as --name=value")
    return m.group(1).replace("-", "_"), m.group(2)


# ---- Dockerfiles ----

@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for k, args in self.instructions if k == keyword]

    def one(self, keyword: str) -> str:
        found = self.all(keyword)
        assert len(found) == 1, f"stage {self.name}: expected one {keyword}, found {len(found)}"
        return found[0]


def read_dockerfile(path: Path) -> list[Stage]:
    """Stages of a Dockerfile: continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(base=parts[0], name=name))
        elif stages:
            stages[-1].instructions.append((keyword, args.strip()))
    return stages


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


# ---- a kilnd started from a deploy file's argument list ----

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """kilnd with the given argv; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None):
        self.scratch = Path(tempfile.mkdtemp(prefix="kiln_deploy_"))
        self.log_path = self.scratch / "kilnd.log"
        self.log = open(self.log_path, "w+")
        full_env = dict(os.environ)
        full_env.setdefault("KILN_CACHE_DIR", str(self.scratch / "cache"))
        full_env.update(env or {})
        self.args = args
        self.proc = subprocess.Popen([str(kilnd_binary()), *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=full_env)

    def logs(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def wait_ready(self, grpc_port: int, timeout: float = 60) -> None:
        import tritonclient.grpc as grpcclient

        deadline = time.monotonic() + timeout
        client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_port}")
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"kilnd {self.args} exited early ({self.proc.returncode}):\n{self.logs()}")
                try:
                    if client.is_server_ready():
                        return
                except Exception:  # not listening yet
                    pass
                time.sleep(0.05)
        finally:
            client.close()
        raise AssertionError(f"kilnd {self.args} not ready in {timeout} s:\n{self.logs()}")

    def stop(self, timeout: float = 40) -> int:
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


@pytest.fixture(scope="session")
def flag_defaults() -> dict[str, str]:
    return kilnd_flag_defaults()
