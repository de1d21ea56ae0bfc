#!/usr/bin/env python3
"""Writes a backend-test-style case folder (model.onnx + test_data_set_0/{input,output}_N.pb) whose expected outputs
come from onnxruntime, so onnx_node_runner can compare kiln against onnxruntime on any model.

  make_ort_case.py MODEL.onnx OUT_DIR [--light] [--output NAME ...] [--seed S]

Inputs: --light feeds arange(n)/n (the light/ models' rule); otherwise seeded uniform [0, 1) floats and zeros for
integer inputs. --output NAME makes intermediate tensors graph outputs (for bisecting a mismatch).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--light", action="store_true")
    ap.add_argument("--output", action="append", default=[])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    m = onnx.load(args.model)
    if args.output:
        del m.graph.output[:]
        for name in args.output:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    inits = {i.name for i in m.graph.initializer}
    ins = [i for i in m.graph.input if i.name not in inits]
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for i in ins:
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in i.type.tensor_type.shape.dim]
        n = int(np.prod(shape))
        dt = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        if args.light:
            feeds[i.name] = (np.arange(n).reshape(shape) / n).astype(dt)
        elif np.issubdtype(dt, np.floating):
            feeds[i.name] = rng.random(shape).astype(dt)
        else:
            feeds[i.name] = np.zeros(shape, dt)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    # typed outputs for the case's model
    for o, v in zip(m.graph.output, outs):
        o.type.CopyFrom(onnx.helper.make_tensor_type_proto(onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
    os.makedirs(os.path.join(args.out, "test_data_set_0"), exist_ok=True)
    del m.graph.input[:]
    m.graph.input.extend(ins)
    onnx.save(m, os.path.join(args.out, "model.onnx"))
    for k, i in enumerate(ins):
        with open(os.path.join(args.out, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[i.name]).SerializeToString())
    for k, v in enumerate(outs):
        with open(os.path.join(args.out, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v).SerializeToString())


if __name__ == "__main__":
    main()
