#!/usr/bin/env python3
"""Generates kiln conformance cases with numpy: inputs and expected outputs as raw little-endian files plus a
manifest that tests/conformance/conformance_test.cc reads.

Manifest: one case per line, whitespace-separated:
    <name> <op> <attr> <n_in> (<file> <dtype> <ndim> <dims...>){n_in} <file> <dtype> <ndim> <dims...>
<attr> is a comma-separated list of ints, or '-' when the op takes none. dtypes: float32, int32, bool.

Usage: gen_cases.py OUT_DIR
"""
import os
import sys

import numpy as np

RNG = np.random.default_rng(20240607)


def f32(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def i32(*shape, lo=-50, hi=50):
    return RNG.integers(lo, hi, size=shape, dtype=np.int32)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layernorm(x, axes):
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def cases():
    a, b = f32(4, 5), f32(4, 5)
    pos = f32(4, 5, lo=0.1, hi=3.0)
    v = f32(5)
    big = f32(16, 33)
    ia, ib = i32(4, 5), i32(4, 5, lo=1, hi=9)
    x3 = f32(2, 3, 4)
    # name, op, attr, inputs, expected
    yield "add", "add", None, [a, b], a + b
    yield "sub", "sub", None, [a, b], a - b
    yield "mul", "mul", None, [a, b], a * b
    yield "div", "div", None, [a, pos], a / pos
    yield "maximum", "maximum", None, [a, b], np.maximum(a, b)
    yield "broadcast_add", "add", None, [a, v], a + v
    yield "lt", "lt", None, [a, b], a < b
    yield "where", "where", None, [a > 0, a, b], np.where(a > 0, a, b)
    yield "neg", "neg", None, [a], -a
    yield "exp", "exp", None, [a], np.exp(a)
    yield "log", "log", None, [pos], np.log(pos)
    yield "sqrt", "sqrt", None, [pos], np.sqrt(pos)
    yield "relu", "relu", None, [a], np.maximum(a, 0)
    yield "sigmoid", "sigmoid", None, [a], sigmoid(a)
    yield "tanh", "tanh", None, [a], np.tanh(a)
    yield "sin", "sin", None, [a], np.sin(a)
    yield "abs", "abs", None, [a], np.abs(a)
    yield "reciprocal", "reciprocal", None, [pos], 1.0 / pos
    yield "sum_all", "sum", None, [big], big.sum()
    yield "sum_axis1", "sum", [1], [big], big.sum(axis=1)
    yield "sum_axis0", "sum", [0], [big], big.sum(axis=0)
    yield "max_axis1", "max", [1], [big], big.max(axis=1)
    yield "mean_axis0", "mean", [0], [big], big.mean(axis=0)
    yield "std_axis1", "std", [1], [big], big.std(axis=1, ddof=1)
    yield "reshape", "reshape", [5, 4], [a], a.reshape(5, 4)
    yield "permute", "permute", [2, 0, 1], [x3], x3.transpose(2, 0, 1)
    yield "pad", "pad", [1, 2, 0, 1], [a], np.pad(a, ((1, 2), (0, 1)))
    yield "flip", "flip", [1], [a], a[:, ::-1]
    yield "shrink", "shrink", [1, 3, 2, 5], [a], a[1:3, 2:5]
    yield "expand", "expand", [3, 4, 5], [a.reshape(1, 4, 5)], np.broadcast_to(a.reshape(1, 4, 5), (3, 4, 5))
    yield "matmul", "matmul", None, [f32(8, 12), f32(12, 5)], None
    yield "softmax", "softmax", None, [big], softmax(big)
    yield "layernorm", "layernorm", [2], [x3], layernorm(x3, (1, 2))
    yield "center", "center", [0], [big], big - big.mean(axis=0, keepdims=True)
    cx, cw, cb = f32(2, 3, 9, 8), f32(4, 3, 3, 3), f32(4)
    win = np.lib.stride_tricks.sliding_window_view(cx, (3, 3), axis=(2, 3))  # (2,3,7,6,3,3)
    conv = np.einsum("nchwij,ocij->nohw", win, cw) + cb.reshape(1, 4, 1, 1)
    yield "conv2d_relu", "conv2d_relu", None, [cx, cw, cb], np.maximum(conv, 0)
    yield "int_add", "add", None, [ia, ib], ia + ib
    yield "int_mul", "mul", None, [ia, ib], ia * ib
    yield "int_floordiv", "floordiv", None, [ia, ib], ia // ib
    yield "int_mod", "mod", None, [ia, ib], ia % ib
    yield "int_sum", "sum", [1], [ia], ia.sum(axis=1).astype(np.int32)
    yield "int_max", "max", [0], [ia], ia.max(axis=0)
    yield "cast_f2i", "cast_int", None, [a * 10], (a * 10).astype(np.int32)
    yield "int_lt", "lt", None, [ia, ib], ia < ib


DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.int32): "int32", np.dtype(np.bool_): "bool"}


def spec(path, arr):
    arr = np.array(arr, order="C")  # (ascontiguousarray would turn 0-d into 1-d)
    arr.astype(arr.dtype.newbyteorder("<")).tofile(path)
    return [os.path.basename(path), DTYPES[arr.dtype], str(arr.ndim)] + [str(d) for d in arr.shape]


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    lines = []
    for name, op, attr, ins, want in cases():
        if op == "matmul":
            want = ins[0] @ ins[1]
        want = np.asarray(want)
        if want.dtype == np.float64:
            want = want.astype(np.float32)
        toks = [name, op, ",".join(str(x) for x in attr) if attr else "-", str(len(ins))]
        for k, x in enumerate(ins):
            toks += spec(os.path.join(out_dir, f"{name}.in{k}.bin"), np.asarray(x))
        toks += spec(os.path.join(out_dir, f"{name}.out.bin"), want)
        lines.append(" ".join(toks))
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} cases to {out_dir}")


if __name__ == "__main__":
    main()
