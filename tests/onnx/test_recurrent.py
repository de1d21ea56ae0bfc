#!/usr/bin/env python3
"""RNN, GRU and LSTM against onnxruntime in the configurations the ONNX backend suite leaves out.

The suite's 12 recurrent cases run forward only, with equal sequence lengths and default activations. Here each op
runs forward, reverse and bidirectional; with sequence_lens that differ per batch entry (so the reverse direction
starts at a different step per entry and Y_h is each entry's last valid state); with initial states, biases,
peepholes, clip, input_forget, linear_before_reset = 0 and 1, layout 1, and non-default activations with their
alpha/beta; at sizes where the step matmuls take the codegen's vector paths. Each configuration becomes a backend-
style case folder whose expected outputs are onnxruntime's (for layout 1, which its CPU kernels refuse, those of
the layout-0 model on transposed inputs, transposed back), run by onnx_node_runner (rtol 1e-3, atol 1e-5: see main).

  test_recurrent.py --runner build/release/tests/onnx/onnx_node_runner [--device CPU] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

from ort_cases import ort_outputs, run_cases, write_case

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def model(op, seq, batch, inp, hidden, direction="forward", layout=0, lens=None, bias=True, init=True, peep=False,
          clip=None, attrs=None, seed=0):
    """(ModelProto, feeds) for one recurrent node with every optional input the configuration asks for."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = rng.uniform(-1, 1, (seq, batch, inp)).astype(np.float32)
    if layout == 1:
        x = x.transpose(1, 0, 2).copy()
    w = rng.uniform(-0.6, 0.6, (dirs, g * hidden, inp)).astype(np.float32)
    r = rng.uniform(-0.6, 0.6, (dirs, g * hidden, hidden)).astype(np.float32)
    inputs, feeds, names = [], {}, ["X", "W", "R"]
    for name, v in (("X", x), ("W", w), ("R", r)):
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, v.shape))
        feeds[name] = v
    extra = []
    if bias:
        extra.append(("B", rng.uniform(-0.5, 0.5, (dirs, 2 * g * hidden)).astype(np.float32)))
    else:
        extra.append(("", None))
    extra.append(("sequence_lens", np.asarray(lens, np.int32)) if lens is not None else ("", None))
    lay = (lambda a: a.transpose(1, 0, 2).copy()) if layout == 1 else (lambda a: a)
    state = (dirs, batch, hidden)
    extra.append(("initial_h", lay(rng.uniform(-1, 1, state).astype(np.float32))) if init else ("", None))
    if op == "LSTM":
        extra.append(("initial_c", lay(rng.uniform(-1, 1, state).astype(np.float32))) if init else ("", None))
        extra.append(("P", rng.uniform(-0.5, 0.5, (dirs, 3 * hidden)).astype(np.float32)) if peep else ("", None))
    while extra and extra[-1][0] == "":
        extra.pop()
    for name, v in extra:
        names.append(name)
        if name:
            dt = TensorProto.INT32 if name == "sequence_lens" else TensorProto.FLOAT
            inputs.append(helper.make_tensor_value_info(name, dt, v.shape))
            feeds[name] = v
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    kw = dict(attrs or {})
    kw.update(hidden_size=hidden, direction=direction)
    if layout:
        kw["layout"] = layout
    if clip is not None:
        kw["clip"] = clip
    node = helper.make_node(op, names, outs, **kw)
    graph = helper.make_graph([node], op.lower(), inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m, feeds


def configurations():
    lens = [5, 2, 4, 1]
    yield "rnn_reverse_lens", dict(op="RNN", seq=5, batch=4, inp=3, hidden=6, direction="reverse", lens=lens)
    yield "rnn_bidirectional_relu", dict(op="RNN", seq=4, batch=3, inp=5, hidden=4, direction="bidirectional",
                                         attrs={"activations": ["Relu", "LeakyRelu"], "activation_alpha": [0.2]})
    yield "rnn_layout1_clip", dict(op="RNN", seq=6, batch=2, inp=3, hidden=5, layout=1, clip=0.7, init=False)
    yield "gru_bidirectional_lens", dict(op="GRU", seq=5, batch=4, inp=3, hidden=6, direction="bidirectional",
                                         lens=lens)
    yield "gru_linear_before_reset", dict(op="GRU", seq=4, batch=3, inp=4, hidden=5,
                                          attrs={"linear_before_reset": 1})
    yield "gru_reverse_activations", dict(op="GRU", seq=4, batch=2, inp=3, hidden=4, direction="reverse",
                                          attrs={"activations": ["HardSigmoid", "ScaledTanh"],
                                                 "activation_alpha": [0.3, 0.9], "activation_beta": [0.4, 1.1]})
    yield "gru_layout1_nobias", dict(op="GRU", seq=3, batch=5, inp=2, hidden=3, layout=1, bias=False, init=False)
    yield "lstm_bidirectional_lens_peepholes", dict(op="LSTM", seq=5, batch=4, inp=3, hidden=6,
                                                    direction="bidirectional", lens=lens, peep=True)
    yield "lstm_input_forget_clip", dict(op="LSTM", seq=4, batch=3, inp=4, hidden=5, clip=0.5,
                                         attrs={"input_forget": 1})
    yield "lstm_reverse_layout1", dict(op="LSTM", seq=6, batch=2, inp=3, hidden=4, direction="reverse", layout=1,
                                       lens=[6, 3])
    yield "lstm_activations", dict(op="LSTM", seq=3, batch=2, inp=3, hidden=4,
                                   attrs={"activations": ["Sigmoid", "Softsign", "Elu"], "activation_alpha": [0.8]})
    # large enough that the step matmuls take the vector paths (16-wide lanes, threads)
    yield "lstm_wide", dict(op="LSTM", seq=8, batch=16, inp=64, hidden=64, direction="bidirectional",
                            lens=[8, 7, 6, 5, 4, 3, 2, 1] * 2)
    yield "gru_wide", dict(op="GRU", seq=8, batch=16, inp=48, hidden=80)


def reference(m, feeds):
    """onnxruntime's outputs and which run gave them: for layout 1, which its CPU kernels refuse, the layout-0 model on
    transposed X and states, its outputs transposed back."""
    layout = next((a.i for a in m.graph.node[0].attribute if a.name == "layout"), 0)
    if layout == 0:
        return ort_outputs(m, feeds), "onnxruntime"
    m0 = onnx.ModelProto()
    m0.CopyFrom(m)
    attrs = [a for a in m0.graph.node[0].attribute if a.name != "layout"]
    del m0.graph.node[0].attribute[:]
    m0.graph.node[0].attribute.extend(attrs)
    for vi in m0.graph.input:
        if vi.name in ("X", "initial_h", "initial_c"):
            d = vi.type.tensor_type.shape.dim
            d[0].dim_value, d[1].dim_value = d[1].dim_value, d[0].dim_value
    f0 = {k: (v.transpose(1, 0, 2).copy() if k in ("X", "initial_h", "initial_c") else v) for k, v in feeds.items()}
    o0 = ort_outputs(m0, f0)
    return [o0[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in o0[1:]], "onnxruntime, layout 0 transposed"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--keep", default="", help="write the case folders here (default: a temporary folder)")
    args = ap.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="kiln_recurrent_")
    cases, refs = [], {}
    for name, cfg in configurations():
        op = cfg.pop("op")
        folder = os.path.join(root, name)
        m, feeds = model(op, **cfg)
        outputs, refs[name] = reference(m, feeds)
        write_case(folder, m, feeds, outputs)
        cases.append(folder)
    # atol 1e-5 instead of onnx's 1e-7: values are O(1) and float32 rounding accumulates over the steps
    # (onnxruntime's own gru_wide output is 1.3e-6 from a float64 evaluation); a wrong gate is off by O(0.1).
    return run_cases(args.runner, args.device, 1e-5, root, cases, "recurrent ops vs onnxruntime",
                     {k: f"reference: {v}" for k, v in refs.items()})


if __name__ == "__main__":
    sys.exit(main())
