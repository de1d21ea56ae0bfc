#!/usr/bin/env python3
"""kiln vs PyTorch (CPU, torch.set_num_threads(2)): convolutions forward and backward, in one run.

Layers: the Fashion-MNIST CNN's four convs at batch 512 (--cnn-batch) and ResNet-50's conv shapes at batch 1
(--resnet-batch): the 7x7 stem, a 1x1 and the 3x3 of each stage, the strided 3x3s and a strided 1x1 downsample.
Parts: fwd (the output), dw (the weight gradient) and dx (the input gradient), each from the same random x, w and
dy on both sides.

kiln: $KILN_BUILD_DIR/tests/bench/conv_perf --shape ... (JSON lines), the sum of the part's kernels' fastest
times over --reps realizes (scheduling and launch overhead not counted; the JSON also has the wall time).
PyTorch: torch.nn.functional.conv2d, torch.nn.grad.conv2d_weight and conv2d_input on pre-made tensors, the fastest
of --reps calls after one warm-up (wall time of the call). Ratio = kiln / PyTorch time: below 1 is faster.

Target (issue 21): >= 1.0x PyTorch's speed, i.e. ratio <= 1. Reported, not asserted: a benchmark never fails on
speed. Exit status 1 if a side fails to run.
Usage: conv_compare.py [--reps 5] [--cnn-batch 512] [--resnet-batch 1] [--only cnn|resnet] [--binary PATH]
"""
import argparse
import json
import os
import subprocess
import sys

# name, cin, cout, hw, k, stride, pad
CNN = [("cnn.conv1", 1, 32, 28, 5, 1, 0), ("cnn.conv2", 32, 32, 24, 5, 1, 0), ("cnn.conv3", 32, 64, 10, 3, 1, 0),
       ("cnn.conv4", 64, 64, 8, 3, 1, 0)]
RESNET = [("rn.stem7x7s2", 3, 64, 224, 7, 2, 3),
          ("rn.l1.1x1", 64, 64, 56, 1, 1, 0), ("rn.l1.3x3", 64, 64, 56, 3, 1, 1), ("rn.l1.1x1up", 64, 256, 56, 1, 1, 0),
          ("rn.l2.3x3s2", 128, 128, 56, 3, 2, 1), ("rn.l2.3x3", 128, 128, 28, 3, 1, 1),
          ("rn.l2.1x1", 512, 128, 28, 1, 1, 0),
          ("rn.l3.3x3s2", 256, 256, 28, 3, 2, 1), ("rn.l3.3x3", 256, 256, 14, 3, 1, 1),
          ("rn.l3.1x1up", 256, 1024, 14, 1, 1, 0), ("rn.l3.down1x1s2", 512, 1024, 28, 1, 2, 0),
          ("rn.l4.3x3s2", 512, 512, 14, 3, 2, 1), ("rn.l4.3x3", 512, 512, 7, 3, 1, 1),
          ("rn.l4.1x1", 2048, 512, 7, 1, 1, 0)]

# PyTorch runs in Debian's python3-torch (make deps installs it; onnx_compare.py uses the same). The test venv has
# no torch: PyPI's Linux torch wheel is the CUDA build, gigabytes of nvidia-* wheels (tests/requirements-nodeps.txt).
TORCH_PYTHON = "/usr/bin/python3"

TORCH_SIDE = r"""
import json, sys, time
import torch
torch.set_num_threads(2)
torch.manual_seed(0)
batch, reps, parts = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
for spec in sys.argv[4:]:
  name, cin, cout, hw, k, s, p = spec.split(":")
  cin, cout, hw, k, s, p = map(int, (cin, cout, hw, k, s, p))
  x = torch.randn(batch, cin, hw, hw)
  w = torch.randn(cout, cin, k, k)
  y = torch.nn.functional.conv2d(x, w, stride=s, padding=p)
  dy = torch.randn_like(y)
  calls = {"fwd": lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p),
           "dw": lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, stride=s, padding=p),
           "dx": lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, stride=s, padding=p)}
  with torch.no_grad():
    for part in parts:
      f = calls[part]
      f()
      best = 1e30
      for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
      print(json.dumps({"layer": name, "part": part, "best_s": best}), flush=True)
"""


def json_lines(cmd, env):
  p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  if p.returncode != 0:
    sys.stderr.write(p.stderr[-4000:])
    raise RuntimeError(f"{os.path.basename(cmd[0])} exited with {p.returncode}")
  return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--cnn-batch", type=int, default=512)
  ap.add_argument("--resnet-batch", type=int, default=1)
  ap.add_argument("--only", choices=["cnn", "resnet"])
  ap.add_argument("--parts", default="fwd,dw,dx")
  ap.add_argument("--binary", default=os.path.join(os.environ.get("KILN_BUILD_DIR", "build/release"),
                                                   "tests/bench/conv_perf"))
  a = ap.parse_args()
  if not os.access(a.binary, os.X_OK):
    print(f"conv_compare: {a.binary} missing (cmake --build build/release --target conv_perf)")
    return 1
  probe = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__, torch.get_num_threads())"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  if probe.returncode != 0:
    print(f"conv_compare: no PyTorch for {TORCH_PYTHON} (Debian's python3-torch, installed by make deps)")
    return 1
  version, threads = probe.stdout.split()
  print(f"PyTorch {version} ({TORCH_PYTHON}), {threads} threads by default; 2 in this run")
  groups = [("cnn", CNN, a.cnn_batch), ("resnet", RESNET, a.resnet_batch)]
  rows, ratios = [], []
  for group, layers, batch in groups:
    if a.only and a.only != group:
      continue
    specs = [":".join(map(str, l)) for l in layers]
    kiln_cmd = [a.binary, "--batch", str(batch), "--reps", str(a.reps), "--parts", a.parts]
    for spec in specs:
      kiln_cmd += ["--shape", spec]
    kiln = {(r["layer"], r["part"]): r for r in json_lines(kiln_cmd, dict(os.environ))}
    torch_res = {(r["layer"], r["part"]): r for r in json_lines(
        [TORCH_PYTHON, "-c", TORCH_SIDE, str(batch), str(a.reps), a.parts] + specs, dict(os.environ))}
    for name, cin, cout, hw, k, s, p in layers:
      oh = (hw + 2 * p - k) // s + 1
      flops = 2.0 * batch * cout * oh * oh * cin * k * k
      for part in a.parts.split(","):
        kr, tr = kiln.get((name, part)), torch_res.get((name, part))
        if kr is None or tr is None:
          print(f"conv_compare: no result for {name} {part}")
          return 1
        ratio = kr["kernel_s"] / tr["best_s"]
        ratios.append((group, ratio))
        rows.append((f"{name} b{batch}", part, kr["kernel_s"] * 1e3, kr["best_s"] * 1e3, tr["best_s"] * 1e3,
                     flops / kr["kernel_s"] * 1e-9, flops / tr["best_s"] * 1e-9, ratio, kr["kernels"]))
  print(f"\n{'layer':<22} {'part':<4} {'kiln ms':>9} {'(wall)':>9} {'torch ms':>9} {'kiln GF/s':>10} "
        f"{'torch GF/s':>10} {'kiln/torch':>10} {'kernels':>7}")
  for r in rows:
    print(f"{r[0]:<22} {r[1]:<4} {r[2]:>9.3f} {r[3]:>9.3f} {r[4]:>9.3f} {r[5]:>10.1f} {r[6]:>10.1f} {r[7]:>10.2f} "
          f"{r[8]:>7d}")
  for group in ("cnn", "resnet"):
    rs = [r for g, r in ratios if g == group]
    if rs:
      geo = 1.0
      for r in rs:
        geo *= r
      geo **= 1.0 / len(rs)
      faster = sum(1 for r in rs if r <= 1.0)
      print(f"{group}: geometric mean kiln/torch time {geo:.2f} (target <= 1.0); kiln as fast or faster in "
            f"{faster}/{len(rs)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
