#!/usr/bin/env python3
"""kiln vs onnxruntime on 8-bit integer matmuls (ONNX MatMulInteger, and a Linear layer dynamically quantized the
way onnxruntime.quantization.quantize_dynamic writes it: DynamicQuantizeLinear -> MatMulInteger with the activation's
zero point -> Cast -> Mul by the scales), same machine, one run, onnxruntime with one intra-op thread per core as
kiln's CPU backend uses.

kiln runs through `kiln-onnx bench` (median of JIT replays), twice: as built (on a host with AVX-512 VNNI the CPU's
integer tensor core, vpdpbusd, codegen/tc.cc) and with TC=0 (the plain lowering: int32 multiply-adds). Every kiln
output is checked against onnxruntime's first (integer results bit for bit; the quantized Linear too, since both
round the same way), so a fast wrong kernel cannot pass. Prints one line per model: medians, kiln / onnxruntime and
TC on / off ratios (< 1: kiln faster). Also prints what the CPU offers (onnxruntime uses AMX where the CPU has it).

usage: int8_compare.py [--iters N] [--shapes M:K:N,...]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_compare import ort_run  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.environ.get("KILN_ONNX_TOOL", os.path.join(REPO, "build/release/clients/cpp/kiln-onnx"))
# (M, K, N): a batch of 64 through a 1024-wide layer; SmolLM2-135M's gate/up projection at 8 decode slots; a
# BERT-base layer's attention projection and feed-forward at sequence length 128.
SHAPES = [(64, 1024, 1024), (8, 576, 3072), (128, 768, 768), (128, 768, 3072)]


def matmul_integer(path: str, m: int, k: int, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    w = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["A", "W"], ["Y"])], "mmi",
                          [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.INT32, [m, n])],
                          [numpy_helper.from_array(w, "W")])
    save(g, path)
    return {"A": rng.integers(0, 256, size=(m, k), dtype=np.uint8)}


def dynamic_linear(path: str, m: int, k: int, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    w = rng.integers(-127, 128, size=(k, n), dtype=np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["X"], ["xq", "xs", "xzp"]),
             helper.make_node("MatMulInteger", ["xq", "W", "xzp"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["Y"])]
    g = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(0.01, np.float32), "ws")])
    save(g, path)
    return {"X": rng.standard_normal((m, k)).astype(np.float32)}


def save(g: onnx.GraphProto, path: str) -> None:
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


def kiln(path: str, feeds: dict[str, str], iters: int, tc: bool, out: str) -> float:
    env = dict(os.environ, TC="1" if tc else "0")
    inputs = [a for name, f in feeds.items() for a in ("--input", f"{name}={f}")]
    subprocess.run([TOOL, "run", path, *inputs, "--output", f"Y={out}"], check=True, capture_output=True, env=env)
    r = subprocess.run([TOOL, "bench", path, "--iters", str(iters), *inputs], check=True, capture_output=True,
                       text=True, env=env)
    return float(re.search(r"median_ms=([0-9.]+)", r.stdout + r.stderr).group(1))


def onnxruntime(path: str, feeds: dict[str, np.ndarray], iters: int) -> tuple[float, np.ndarray]:
    ms, outputs = ort_run(path, feeds, iters, warmup=10)
    return ms, outputs[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--shapes", default=",".join(f"{m}:{k}:{n}" for m, k, n in SHAPES))
    a = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split(":")) for s in a.shapes.split(",")]
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    have = [f for f in ("avx512_vnni", "avx_vnni", "amx_int8") if re.search(rf"\b{f}\b", flags)]
    print(f"CPU integer dot products: {', '.join(have) or 'none'}; onnxruntime {ort.__version__}, "
          f"{os.cpu_count()} threads")
    print(f"{'model':<28} {'kiln ms':>9} {'TC=0 ms':>9} {'ort ms':>9} {'kiln/ort':>9} {'TC on/off':>10}")
    rng = np.random.default_rng(0)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for kind, build in (("MatMulInteger", matmul_integer), ("dynamic-quantized Linear", dynamic_linear)):
            for m, k, n in shapes:
                path = os.path.join(tmp, f"{kind[:3]}_{m}_{k}_{n}.onnx")
                feeds = build(path, m, k, n, rng)
                files = {}
                for name, v in feeds.items():
                    files[name] = os.path.join(tmp, f"{name}.npy")
                    np.save(files[name], v)
                ort_ms, want = onnxruntime(path, feeds, a.iters)
                times = {}
                for tc in (True, False):
                    out = os.path.join(tmp, "y.npy")
                    times[tc] = kiln(path, files, a.iters, tc, out)
                    got = np.load(out)
                    if got.dtype != want.dtype or not np.array_equal(got, want):
                        print(f"  WRONG: {kind} {m}x{k}x{n} TC={int(tc)}: max |diff| "
                              f"{np.abs(got.astype(np.float64) - want).max()}")
                        bad += 1
                print(f"{kind[:13] + ' ' + f'{m}x{k}x{n}':<28} {times[True]:9.4f} {times[False]:9.4f} {ort_ms:9.4f} "
                      f"{times[True] / ort_ms:9.3f} {times[True] / times[False]:10.3f}")
    if bad:
        print(f"{bad} outputs differ from onnxruntime's")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
