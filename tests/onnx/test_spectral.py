#!/usr/bin/env python3
"""DFT and STFT against onnxruntime beyond the ONNX backend suite's cases: forward and inverse, onesided (rfft) and
inverse onesided (irfft), real and complex input, dft_length that pads and that truncates, every signal axis, opset 17
(axis attribute) and 20 (axis input); STFT with and without a window, complex signals two-sided, frame steps that
leave a remainder. Each configuration is a backend-style case folder with onnxruntime's outputs, run by
onnx_node_runner (rtol 1e-3, atol 1e-4: a length-64 transform of O(1) values sums 64 float32 products).

  test_spectral.py --runner build/release/tests/onnx/onnx_node_runner [--device CPU]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_cases import run_cases, write_case  # noqa: E402


def dft(shape, opset, axis, inverse=0, onesided=0, length=None, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    inits, names = [], ["x"]
    names.append("len" if length is not None else "")
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "len"))
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        names.append("axis")
        inits.append(numpy_helper.from_array(np.array(axis, np.int64), "axis"))
    else:
        attrs["axis"] = axis
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("DFT", names, ["y"], **attrs)
    g = helper.make_graph([node], "dft", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m, {"x": x}


def stft(batch, length, parts, step, flen, window, onesided, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (batch, length, parts)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(step, np.int64), "step")]
    names = ["signal", "step"]
    if window:
        inits.append(numpy_helper.from_array((0.5 - 0.5 * np.cos(2 * np.pi * np.arange(flen) / flen)).astype(
            np.float32), "window"))
        names.append("window")
    else:
        names.append("")
        inits.append(numpy_helper.from_array(np.array(flen, np.int64), "flen"))
        names.append("flen")
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    g = helper.make_graph([node], "stft", [helper.make_tensor_value_info("signal", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, {"signal": x}


def configurations():
    yield "dft_real_axis1", dft((2, 12, 5, 1), 17, 1)
    yield "dft_complex_axis2", dft((2, 4, 9, 2), 17, 2)
    yield "dft_rfft_pad", dft((3, 10, 1), 17, 1, onesided=1, length=16)
    yield "dft_truncate", dft((2, 20, 2), 17, 1, length=7)
    yield "dft_inverse_complex", dft((2, 8, 3, 2), 20, 1, inverse=1)
    yield "dft_irfft", dft((2, 9, 2), 20, -2, inverse=1, onesided=1)
    yield "dft_irfft_odd_length", dft((2, 6, 2), 20, 1, inverse=1, onesided=1, length=11)
    yield "dft_opset20_axis0", dft((64, 3, 1), 20, 0)
    yield "stft_window", stft(2, 100, 1, 7, 16, True, 1)
    yield "stft_no_window", stft(1, 64, 1, 5, 12, False, 1)
    yield "stft_complex_twosided", stft(2, 50, 2, 9, 8, True, 0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--device", default="CPU")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="kiln_spectral_")
    cases = []
    for name, (m, feeds) in configurations():
        folder = os.path.join(root, name)
        write_case(folder, m, feeds)
        cases.append(folder)
    return run_cases(args.runner, args.device, 1e-4, root, cases, "DFT / STFT vs onnxruntime")

if __name__ == "__main__":
    sys.exit(main())
