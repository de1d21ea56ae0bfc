"""deploy/Dockerfile and deploy/Dockerfile.cuda, without a Docker engine: hadolint, the shape of
each stage, the runtime package list against `ldd kilnd` mapped through `dpkg -S`, the CUDA
image's library bundle, and the HEALTHCHECK script against real HTTP servers."""

from __future__ import annotations

import http.server
import os
import re
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import (DEPLOY, REPO, exec_form, free_port, kiln_cli, kilnd_binary,
                      read_dockerfile, run, tool)

DOCKERFILES = [DEPLOY / "Dockerfile", DEPLOY / "Dockerfile.cuda"]
RUNTIME_PACKAGES = DEPLOY / "runtime-packages.txt"
HEALTHCHECK = DEPLOY / "healthcheck.sh"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(path):
    out = run([tool("hadolint"), "--failure-threshold", "info", str(path)])
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_catches_problems():
    """The linter really runs: an unpinned base image and sudo are reported."""
    out = run([tool("hadolint"), "-"], input="FROM debian\nRUN sudo true\n")
    assert out.returncode != 0
    assert "DL3006" in out.stdout and "DL3004" in out.stdout


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_build_stage_matches_make_test(path):
    build, runtime = read_dockerfile(path)
    assert build.base == "debian:bookworm" and build.name == "build"
    runs = " && ".join(build.all("RUN"))
    assert "bash deploy/install-deps.sh" in runs
    # make test builds the release preset (Makefile: test -> build-release -> preset release).
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^build-release:.*\n\t\$\(call build,release\)", makefile, re.M)
    assert "cmake --preset release" in runs
    assert "cmake --build --preset release --target kilnd" in runs
    assert runtime.name == "runtime"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_runtime_stage(path):
    runtime = read_dockerfile(path)[-1]
    if path.name == "Dockerfile":
        assert runtime.base == "debian:bookworm-slim"
    else:
        assert runtime.base.startswith("nvidia/cuda:") and "-runtime-" in runtime.base
    user = runtime.one("USER")
    assert user.split(":")[0] not in ("root", "0"), user
    assert runtime.one("EXPOSE").split() == ["8000", "8001", "8002"]
    health = runtime.one("HEALTHCHECK")
    assert "CMD" in health and "/v2/health/ready" in health
    copies = runtime.all("COPY")
    # The repository is kilnd's to write (training publishes there); it and the data directory
    # are volumes, and the CLI and the dataset the README trains on are in the image.
    assert "--chown=10001:10001 models /var/lib/kiln/models" in copies
    assert "deploy/healthcheck.sh /usr/local/bin/kiln-healthcheck" in copies
    assert "--from=build /out/kilnd /usr/local/bin/kilnd" in copies
    assert "--from=build /out/kiln /usr/local/bin/kiln" in copies
    assert ("--from=build /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist"
            in copies)
    assert set(exec_form(runtime.one("VOLUME"))) == {
        "/var/lib/kiln/cache", "/var/lib/kiln/data", "/var/lib/kiln/models"}
    assert "mkdir -p /var/lib/kiln/cache /var/lib/kiln/data" in " ".join(runtime.all("RUN"))
    build_runs = " && ".join(read_dockerfile(path)[0].all("RUN"))
    assert "--target kilnd kiln" in build_runs
    assert "strip --strip-debug -o /out/kiln build/release/clients/cpp/kiln" in build_runs
    assert exec_form(runtime.one("ENTRYPOINT")) == ["/usr/local/bin/kilnd"]
    assert runtime.one("STOPSIGNAL") == "SIGTERM"


def test_both_images_run_the_same_command():
    cmds = [exec_form(read_dockerfile(p)[-1].one("CMD")) for p in DOCKERFILES]
    assert cmds[0] == cmds[1]


# ---- runtime libraries: deploy/runtime-packages.txt == dpkg -S of ldd kilnd ----

def listed_packages() -> list[str]:
    names = []
    for line in RUNTIME_PACKAGES.read_text().splitlines():
        names += line.split("#", 1)[0].split()
    return names


def ldd_paths(binary: Path) -> list[str]:
    out = run(["ldd", str(binary)])
    assert out.returncode == 0, out.stderr
    paths = []
    for line in out.stdout.splitlines():
        assert "not found" not in line, f"kilnd has an unresolved library: {line.strip()}"
        parts = line.split()
        if "=>" in parts:
            target = parts[parts.index("=>") + 1]
            if target.startswith("/"):
                paths.append(target)
        elif parts and parts[0].startswith("/"):
            paths.append(parts[0])  # the dynamic loader
    assert len(paths) > 5, out.stdout
    return paths


def candidates(path: str) -> list[str]:
    """`path` as dpkg may know it: the file itself first (a symlink may belong to a -dev
    package), then the link, each with and without the merged-/usr prefix."""
    out = []
    for p in (os.path.realpath(path), path):
        out.append(p)
        if p.startswith("/usr/lib/"):
            out.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            out.append("/usr" + p)
    return list(dict.fromkeys(out))


def owning_packages(paths: list[str]) -> dict[str, str]:
    """{library path: the Debian package that ships it}, from one `dpkg -S` call."""
    wanted = sorted({c for p in paths for c in candidates(p)})
    out = run(["dpkg", "-S", *wanted])  # exits 1 when some spellings are unknown: expected
    owner = {}
    for line in out.stdout.splitlines():
        if line.startswith("diversion "):
            continue
        packages, _, file = line.partition(": ")
        owner[file] = packages.split(",")[0].strip().split(":")[0]  # drop ":amd64"
    result = {}
    for path in paths:
        found = next((owner[c] for c in candidates(path) if c in owner), None)
        assert found, f"no Debian package ships {path} ({out.stderr.strip()})"
        result[path] = found
    return result


def test_runtime_packages_match_ldd():
    """kilnd's libraries, and those of the `kiln` CLI the image also carries."""
    listed = listed_packages()
    assert listed == sorted(set(listed)), "keep deploy/runtime-packages.txt sorted, one name each"
    needed = {}
    paths = ldd_paths(kilnd_binary()) + ldd_paths(kiln_cli())
    for path, package in owning_packages(sorted(set(paths))).items():
        needed.setdefault(package, []).append(path)
    missing = sorted(set(needed) - set(listed))
    extra = sorted(set(listed) - set(needed))
    assert not missing, "add to deploy/runtime-packages.txt: " + ", ".join(
        f"{p} ({' '.join(needed[p])})" for p in missing)
    assert not extra, "kilnd links nothing from these; remove from " \
        "deploy/runtime-packages.txt: " + ", ".join(extra)


def test_runtime_image_installs_only_the_list():
    """The list is the runtime stage's one source of packages (listed once)."""
    runtime = read_dockerfile(DEPLOY / "Dockerfile")[-1]
    assert "deploy/runtime-packages.txt /tmp/runtime-packages.txt" in runtime.all("COPY")
    installs = [r for r in runtime.all("RUN") if "apt-get install" in r]
    assert len(installs) == 1
    command = " ".join(installs[0].split())
    assert "/tmp/runtime-packages.txt | xargs apt-get install -y --no-install-recommends &&" in \
        command, command


# ---- Dockerfile.cuda: kilnd's own libraries bundled, the base's C runtime used ----

def test_cuda_bundle_runs_kilnd():
    with tempfile.TemporaryDirectory(prefix="kiln_bundle_") as dest:
        out = run(["bash", str(DEPLOY / "bundle-libs.sh"), str(kilnd_binary()), dest])
        assert out.returncode == 0, out.stderr
        bundled = set(os.listdir(dest))
        assert any(n.startswith("libLLVM") for n in bundled), bundled
        assert any(n.startswith("libgrpc++") for n in bundled), bundled
        c_runtime = re.compile(r"(libc|libm|libstdc\+\+|libgcc_s)\.so|ld-linux")
        assert not any(c_runtime.match(n) for n in bundled), bundled
        env = dict(os.environ, LD_LIBRARY_PATH=dest)
        resolved = run(["ldd", str(kilnd_binary())], env=env).stdout
        for line in resolved.splitlines():
            parts = line.split()
            if "=>" in parts and parts[0] in bundled:
                assert parts[parts.index("=>") + 1] == f"{dest}/{parts[0]}", line
        help_out = run([str(kilnd_binary()), "--helpfull"], env=env)
        assert "--grpc_port" in help_out.stdout + help_out.stderr
        # The image's second binary, bundled the same way (Dockerfile.cuda runs both).
        out = run(["bash", str(DEPLOY / "bundle-libs.sh"), str(kiln_cli()), dest])
        assert out.returncode == 0, out.stderr
        cli = run([str(kiln_cli()), "--help"], env=env)
        assert cli.returncode == 0 and cli.stdout.startswith("usage: kiln"), cli


# ---- the HEALTHCHECK script ----

class _Health(http.server.BaseHTTPRequestHandler):
    status = {"/v2/health/ready": 200, "/v2/health/live": 200, "/v2/health/down": 400}

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(self.status.get(self.path, 404))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def healthcheck(port: int, path: str | None = None, timeout: str = "2") -> int:
    env = dict(os.environ, KILN_HTTP_PORT=str(port), KILN_HEALTH_TIMEOUT=timeout)
    return subprocess.run(["bash", str(HEALTHCHECK), *([path] if path else [])], env=env,
                          timeout=30).returncode


def test_healthcheck_script():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert healthcheck(port) == 0  # default path /v2/health/ready
        assert healthcheck(port, "/v2/health/live") == 0
        assert healthcheck(port, "/v2/health/down") == 1  # kilnd's "not ready" is 400
        assert healthcheck(port, "/nowhere") == 1
    finally:
        server.shutdown()
    assert healthcheck(free_port()) == 1  # nothing listening
    # A server that accepts and never answers: the script times out and still says 1.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        assert healthcheck(silent.getsockname()[1], timeout="1") == 1


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_build_context_leaves_out_local_trees(path):
    """BuildKit reads <Dockerfile>.dockerignore. A local build/ in the context would carry a
    CMakeCache.txt for another source path into the image and fail the configure step; .venv
    and .git are large and unused."""
    ignore = Path(f"{path}.dockerignore")
    entries = {line.strip() for line in ignore.read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "build"} <= entries


def test_shellcheck_scripts():
    """The scripts the images run (healthcheck, library bundle) and the build stage's deps
    script."""
    scripts = sorted(DEPLOY.glob("*.sh"))
    assert {p.name for p in scripts} >= {"healthcheck.sh", "bundle-libs.sh", "install-deps.sh"}
    out = run([tool("shellcheck"), *map(str, scripts)])
    assert out.returncode == 0, out.stdout + out.stderr
