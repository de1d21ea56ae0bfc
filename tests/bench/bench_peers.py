"""The servers tests/bench/load_compare.py measures kiln against, and how it starts them.

Triton Inference Server itself: the `tritonserver` binary, its Python backend
(backends/python/libtriton_python.so) and the backend stubs (one per Python minor version) ship in
PyPI's `nvidia-pytriton` wheel. They are installed on demand into <repo>/.venv-bench (pinned in
tests/bench/requirements-bench.txt; gitignored, never part of .venv or CI), made with Debian's
/usr/bin/python3: the stub of its version (3.11 on Debian 12) links Debian's libpython3.X.so.1.0, so
the venv's packages (numpy, onnxruntime) match the interpreter that runs model.py. What running it takes here:
  - the wheel's bundled libraries (nvidia_pytriton.libs) are found through the binaries' RPATH,
    which is relative to the installed files, so the binaries run in place (LD_LIBRARY_PATH is set
    as well, as PyTriton does);
  - the Python backend starts `triton_python_backend_stub` from its own directory; the wheel keeps
    the stubs under python_backend_stubs/<X.Y>/, so the venv's one is copied next to
    libtriton_python.so once, at install;
  - the stub imports model.py's packages from the bench venv (PYTHONPATH = its site-packages);
  - CPU-only: tritonserver starts without a GPU (it logs that CUDA is unavailable) and the model
    config asks for KIND_CPU instances; metrics and GPU metrics are off.

The model it serves is kiln's Fashion-MNIST CNN (tinygrad's beautiful_mnist) with the same weights,
exported here to ONNX with the `onnx` helper API from the safetensors file and run by onnxruntime in
the Python backend's model.py, with the same dynamic_batching settings and max_batch_size.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BENCH_VENV = ROOT / ".venv-bench"
REQUIREMENTS = ROOT / "tests" / "bench" / "requirements-bench.txt"
BENCH_PYTHON = "/usr/bin/python3"  # the system interpreter: the stub links the system's libpython3.X


class Unavailable(Exception):
    """A peer server that cannot run on this machine; the message says why."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# the bench venv


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise Unavailable(f"{venv} has no lib/python3*/site-packages")
    return found[0]


def tritonserver_dir(venv: Path = BENCH_VENV) -> Path:
    return _site_packages(venv) / "pytriton" / "tritonserver"


def ensure_bench_venv(log=print) -> Path:
    """Creates or updates .venv-bench from requirements-bench.txt (a stamp keeps the file's hash)
    and puts the Python backend stub in place. Raises Unavailable with the reason."""
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = BENCH_VENV / ".requirements.sha256"
    python = BENCH_VENV / "bin" / "python"
    if not (python.exists() and stamp.exists() and stamp.read_text().strip() == want):
        if not os.access(BENCH_PYTHON, os.X_OK):
            raise Unavailable(f"{BENCH_PYTHON} is missing (Triton's Python backend stub links the "
                              "system's libpython3.X)")
        log(f"bench venv: installing {REQUIREMENTS.relative_to(ROOT)} into {BENCH_VENV} (PyPI)")
        if not python.exists():
            shutil.rmtree(BENCH_VENV, ignore_errors=True)
            r = subprocess.run([BENCH_PYTHON, "-m", "venv", str(BENCH_VENV)], capture_output=True, text=True)
            if r.returncode != 0:
                raise Unavailable(f"python3 -m venv {BENCH_VENV} failed: {r.stderr.strip()}")
        stamp.unlink(missing_ok=True)
        r = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "-r", str(REQUIREMENTS)], capture_output=True, text=True)
        if r.returncode != 0:
            raise Unavailable(f"pip install -r {REQUIREMENTS.name} failed:\n{r.stdout}{r.stderr}")
        stamp.write_text(want + "\n")
    tdir = tritonserver_dir()
    stub = tdir / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():
        ver = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
        src = tdir / "python_backend_stubs" / ver / "triton_python_backend_stub"
        if not src.exists():
            raise Unavailable(f"the nvidia-pytriton wheel has no Python backend stub for Python {ver} ({src})")
        shutil.copy2(src, stub)
    missing = [l.split()[0] for l in subprocess.run(["ldd", str(stub)], capture_output=True, text=True)
               .stdout.splitlines() if "not found" in l]
    if missing:
        raise Unavailable(f"Triton's Python backend stub needs {', '.join(missing)} (Debian: the "
                          "libpython3.X package of /usr/bin/python3's version)")
    return BENCH_VENV


# ---------------------------------------------------------------------------------------------
# the CNN as ONNX


def cnn_onnx_bytes(weights: dict[str, np.ndarray]) -> bytes:
    """tinygrad's beautiful_mnist CNN (engine/nn's mnist_cnn) as an ONNX graph built with the onnx
    helper API: [N,1,28,28] INPUT -> [N,10] OUTPUT logits. BatchNorm in inference mode (running
    statistics, eps 1e-5), max_pool2d 2x2 stride 2, flatten, Linear 576 -> 10."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.ascontiguousarray(v, np.float32), k) for k, v in weights.items()]
    nodes = []

    def conv(x, i, out):
        nodes.append(helper.make_node("Conv", [x, f"layers.{i}.weight", f"layers.{i}.bias"], [out + "_c"]))
        nodes.append(helper.make_node("Relu", [out + "_c"], [out]))
        return out

    def bn_pool(x, i, out):
        nodes.append(helper.make_node("BatchNormalization",
                                      [x, f"layers.{i}.weight", f"layers.{i}.bias",
                                       f"layers.{i}.running_mean", f"layers.{i}.running_var"],
                                      [out + "_bn"], epsilon=1e-5))
        nodes.append(helper.make_node("MaxPool", [out + "_bn"], [out], kernel_shape=[2, 2], strides=[2, 2]))
        return out

    x = conv("INPUT", 0, "c0")
    x = conv(x, 2, "c2")
    x = bn_pool(x, 4, "p4")
    x = conv(x, 6, "c6")
    x = conv(x, 8, "c8")
    x = bn_pool(x, 10, "p10")
    nodes.append(helper.make_node("Flatten", [x], ["flat"], axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", "layers.13.weight", "layers.13.bias"], ["OUTPUT"], transB=1))
    graph = helper.make_graph(nodes, "fashion_mnist_cnn",
                              [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["N", 1, 28, 28])],
                              [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


# ---------------------------------------------------------------------------------------------
# Triton's model repository

MODEL_PY = '''"""Triton Python backend model: kiln's Fashion-MNIST CNN exported to ONNX (tests/bench/
bench_peers.py), run with onnxruntime on the batch the dynamic batcher formed: the requests'
inputs are concatenated, run once, and the output rows handed back per request."""

import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        opts = ort.SessionOptions()
        threads = int(os.environ.get("KILN_BENCH_ORT_THREADS", "0"))
        if threads > 0:
            opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy() for r in requests]
        sizes = [x.shape[0] for x in inputs]
        batch = inputs[0] if len(inputs) == 1 else np.concatenate(inputs)
        out = self.session.run(["OUTPUT"], {"INPUT": batch})[0]
        responses, at = [], 0
        for n in sizes:
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out[at:at + n])]))
            at += n
        return responses
'''


def dynamic_batching_block(queue_delay_us: int, preferred: list[int]) -> str:
    pref = f" preferred_batch_size: [{', '.join(map(str, preferred))}]" if preferred else ""
    return f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us}{pref} }}\n"


def write_triton_repo(repo: Path, name: str, onnx_bytes: bytes, max_batch: int, batching: str,
                      instances: int = 1) -> None:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(onnx_bytes)
    (folder / "1" / "model.py").write_text(MODEL_PY)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch}\n'
        f'input [{{ name: "INPUT" data_type: TYPE_FP32 dims: [1, 28, 28] }}]\n'
        f'output [{{ name: "OUTPUT" data_type: TYPE_FP32 dims: [10] }}]\n'
        f'instance_group [{{ kind: KIND_CPU count: {instances} }}]\n' + batching)


class TritonServer:
    """tritonserver from the bench venv on loopback ports, stopped with SIGTERM."""

    def __init__(self, repository: Path, log_path: Path, ort_threads: int = 0, timeout: float = 120):
        venv = ensure_bench_venv()
        tdir = tritonserver_dir(venv)
        binary = tdir / "bin" / "tritonserver"
        self.port, self.http_port = free_port(), free_port()
        self.url, self.http_url = f"127.0.0.1:{self.port}", f"127.0.0.1:{self.http_port}"
        env = os.environ.copy()
        libs = _site_packages(venv) / "nvidia_pytriton.libs"
        env["LD_LIBRARY_PATH"] = f"{libs}" + (f":{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else "")
        env["PYTHONPATH"] = str(_site_packages(venv))
        env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
        env["KILN_BENCH_ORT_THREADS"] = str(ort_threads)
        env.pop("PYTHONHOME", None)
        self.log_path = log_path
        self.log = open(log_path, "w+")
        self.proc = subprocess.Popen(
            [str(binary), f"--model-repository={repository}", f"--backend-directory={tdir / 'backends'}",
             "--http-address=127.0.0.1", f"--http-port={self.http_port}",
             "--grpc-address=127.0.0.1", f"--grpc-port={self.port}",
             "--allow-metrics=false", "--allow-gpu-metrics=false", "--strict-readiness=true",
             "--exit-timeout-secs=10", "--log-verbose=0"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(f"tritonserver exited ({self.proc.returncode}) while starting:\n"
                                  + self.logs()[-3000:])
            try:
                with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise Unavailable(f"tritonserver not ready within {timeout:g} s:\n" + self.logs()[-3000:])

    def logs(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


if __name__ == "__main__":  # `python tests/bench/bench_peers.py`: install the bench venv only
    try:
        print(ensure_bench_venv())
    except Unavailable as e:
        print(f"bench_peers: {e}")
        sys.exit(1)
