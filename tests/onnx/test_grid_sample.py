#!/usr/bin/env python3
"""GridSample against onnxruntime beyond the ONNX backend suite's 18 cases: every mode (nearest, bilinear, bicubic)
with every padding mode (zeros, border, reflection) and both align_corners, on grids that reach up to 3.5x outside
[-1, 1] (so reflection folds several times and border clamps), non-square data, and batch > 1. Each configuration is
a backend-style case folder with onnxruntime's outputs, run by onnx_node_runner (rtol 1e-3, atol 1e-5: bicubic sums
16 float32 taps).

  test_grid_sample.py --runner build/release/tests/onnx/onnx_node_runner [--device CPU]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_cases import run_cases, write_case  # noqa: E402


def model(mode, padding, align, n, c, h, w, oh, ow, spread, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, c, h, w)).astype(np.float32)
    grid = rng.uniform(-spread, spread, (n, oh, ow, 2)).astype(np.float32)
    node = helper.make_node("GridSample", ["X", "grid"], ["Y"], mode=mode, padding_mode=padding,
                            align_corners=int(align))
    graph = helper.make_graph([node], "grid_sample",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape),
                               helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid.shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    m.ir_version = 8
    return m, {"X": x, "grid": grid}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--device", default="CPU")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="kiln_grid_sample_")
    cases, seed = [], 0
    for mode in ("nearest", "bilinear", "bicubic"):
        for padding in ("zeros", "border", "reflection"):
            for align in (False, True):
                seed += 1
                name = f"{mode}_{padding}_align{int(align)}"
                folder = os.path.join(root, name)
                write_case(folder, *model(mode, padding, align, 2, 3, 5, 7, 4, 6, 3.5, seed))
                cases.append(folder)
    return run_cases(args.runner, args.device, 1e-5, root, cases, "GridSample vs onnxruntime")

if __name__ == "__main__":
    sys.exit(main())
