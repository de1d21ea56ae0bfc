"""Every README command block marked `<!-- runnable -->` works as written, against a kilnd started
by `make serve`'s own recipe: `make -n -o build-release serve` prints it from the Makefile, with
SERVE_DIR a scratch folder and SERVE_ARGS choosing free loopback ports; the recipe's lines run
as printed (the built kilnd of this test run in place of ./build/release/server/main/kilnd, so
the asan/tsan presets check their own binary).

The blocks run in order in one scratch folder (where they write their files) that links the
checkout's `.venv` and `models`, with `localhost:8000/8001/8002` rewritten to the free ports,
the built `kiln` first on PATH and KILN_URL set (the CLI's and the Python package's default
address); `sh` blocks under `bash -euo pipefail`, `python` blocks with `.venv/bin/python`.
Afterwards the checkout's models/ is unchanged: training published into make serve's copy."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKEFILE_KILND = "./build/release/server/main/kilnd"


def runnable_blocks() -> list[tuple[int, str, str]]:
    """(line number, language, text) of each block marked runnable, in README order."""
    lines = (REPO / "README.md").read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.strip() != "<!-- runnable -->":
            continue
        fence = re.fullmatch(r"```(sh|python)", lines[i + 1].strip())
        assert fence, f"README.md:{i + 2}: a runnable marker precedes a ```sh or ```python fence"
        end = lines.index("```", i + 2)
        out.append((i + 2, fence.group(1), "\n".join(lines[i + 2:end]) + "\n"))
    return out


BLOCKS = runnable_blocks()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value or not Path(value).is_file():
        raise RuntimeError(f"{name} must name the built binary (run through ctest)")
    return Path(value)


class Serve:
    """kilnd as `make serve` starts it."""

    def __init__(self, scratch: Path):
        self.ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
        serve_args = (f"--grpc-address=127.0.0.1 --grpc-port={self.ports['grpc']} "
                      f"--http-port={self.ports['http']} --metrics-port={self.ports['metrics']}")
        # A clean make environment: `make test` runs this test under make, whose MAKEFLAGS
        # (jobserver, command-line variables) must not leak into the recipe printed here.
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        printed = subprocess.run(
            ["make", "--no-print-directory", "-n", "-o", "build-release", "serve",
             f"SERVE_DIR={scratch / 'serve'}", f"SERVE_ARGS={serve_args}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
        recipe = [line for line in printed.splitlines() if line.strip()]
        argv = shlex.split(recipe[-1])
        assert argv[0] == MAKEFILE_KILND, f"make serve's last line starts kilnd: {recipe}"
        assert any(a.startswith("--data-dir=") for a in argv), "make serve trains (--data-dir)"
        for line in recipe[:-1]:
            subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=REPO, check=True,
                           timeout=120)
        self.argv = [str(env_path("KILND")), *argv[1:]]
        self.log = open(scratch / "kilnd.log", "w+")
        self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        url = f"http://127.0.0.1:{self.ports['http']}/v2/health/ready"
        while True:
            assert self.proc.poll() is None, f"kilnd exited: {self.logs()}"
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"kilnd not ready: {self.logs()}"
            time.sleep(0.1)

    def logs(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return self.proc.returncode


def models_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", "models"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("readme")
    before = models_status()
    server = Serve(scratch)
    work = scratch / "work"
    work.mkdir()
    for name in (".venv", "models"):
        (work / name).symlink_to(REPO / name)
    server.work = work
    yield server
    assert server.stop() == 0, server.logs()
    assert models_status() == before, "make serve's training wrote into the checkout's models/"


def test_there_are_runnable_blocks():
    assert len(BLOCKS) >= 5, BLOCKS
    assert {lang for _, lang, _ in BLOCKS} == {"sh", "python"}


@pytest.mark.parametrize("line,lang,text", BLOCKS, ids=[f"README.md:{b[0]}" for b in BLOCKS])
def test_readme_block_runs(serve, line, lang, text):
    for port, name in ((8000, "http"), (8001, "grpc"), (8002, "metrics")):
        text = text.replace(f"localhost:{port}", f"127.0.0.1:{serve.ports[name]}")
    env = dict(os.environ, KILN_URL=f"127.0.0.1:{serve.ports['grpc']}",
               PATH=f"{env_path('KILN_CLI').parent}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(REPO / "clients" / "python"))
    cmd = (["bash", "-euo", "pipefail", "-c", text] if lang == "sh"
           else [str(REPO / ".venv" / "bin" / "python"), "-c", text])
    r = subprocess.run(cmd, cwd=serve.work, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (f"README.md:{line} failed ({r.returncode}):\n{text}\n"
                               f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}\n"
                               f"kilnd:\n{serve.logs()[-4000:]}")
