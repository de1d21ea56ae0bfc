"""Shared by the onnxruntime comparisons of single ops (test_recurrent.py, test_grid_sample.py, test_spectral.py):
each configuration becomes a backend-style case folder (model.onnx + test_data_set_0/{input,output}_N.pb) whose
expected outputs come from onnxruntime, and onnx_node_runner runs the folders through kiln and compares them."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def ort_outputs(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def write_case(folder, m, feeds, outputs=None):
    """The case folder for model m on `feeds` (by input name); `outputs` default to onnxruntime's."""
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    onnx.save(m, os.path.join(folder, "model.onnx"))
    if outputs is None:
        outputs = ort_outputs(m, feeds)
    for k, name in enumerate(i.name for i in m.graph.input):
        with open(os.path.join(folder, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[name], name).SerializeToString())
    for k, (o, v) in enumerate(zip(m.graph.output, outputs)):
        with open(os.path.join(folder, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(v), o.name).SerializeToString())


def run_cases(runner, device, atol, root, folders, label, notes=None):
    """Runs the case folders under `root` through onnx_node_runner; prints each verdict and a summary line. Returns
    the exit status: 0 when every case passes."""
    p = subprocess.run([runner, "--device", device, "--atol", str(atol), *folders], capture_output=True, text=True,
                       timeout=600)
    results = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    failed = [l for l in results if " PASS" not in l]
    for l in results:
        name = l.split()[1].replace(root + "/", "")
        note = f" ({notes[name]})" if notes and name in notes else ""
        print(l.replace(root + "/", "") + note)
    if p.returncode != 0 or len(results) != len(folders):
        print(p.stderr[-2000:], file=sys.stderr)
        print(f"runner exit {p.returncode}, {len(results)} results for {len(folders)} cases", file=sys.stderr)
        return 1
    print(f"{label} on {device}: {len(results) - len(failed)}/{len(folders)} pass")
    return 1 if failed else 0
