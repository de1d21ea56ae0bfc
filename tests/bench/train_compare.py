#!/usr/bin/env python3
"""Fashion-MNIST training step: kiln (examples/train_fashion_mnist, TinyJit and JIT=0) vs tinygrad (PyPI, TinyJit) vs
PyTorch (CPU, eager, torch.set_num_threads(2): the machine's 2 cores, as kiln uses them).

The same model (beautiful_mnist's CNN, reference/tinygrad.md §11), batch, optimizer (Adam lr 1e-3) and data (Debian's
dataset-fashion-mnist IDX .gz files, read here with numpy for tinygrad; kiln reads them with engine/nn/state). Both
sides sample each batch on the host and pass it to the jitted step as new input tensors. For each run it prints
  time to first step  (model construction to the first step's loss on the host: includes compiling)
  ms/step             (mean over steps 2..n-1: after the JIT's run and capture calls)
  kernels/step
and the ratios kiln / tinygrad. The runs alternate sides one after another in this process, so a shared machine's
load hits all of them; compile caches are whatever each side has on disk (pass --cold to give both an empty one).

Targets (issues 4 and 21, 2-core machine): kiln's jitted ms/step <= 1/7 of tinygrad's and <= 0.8x PyTorch's; kiln's
time to first step <= 1 s from a cold cache (--cold) and <= 0.3 s from a warm one.
Reported, not asserted: a benchmark never fails on speed.

Usage: train_compare.py [--steps 4] [--batch 512] [--seed 42] [--data DIR] [--binary PATH] [--skip-tinygrad]
                        [--skip-nojit] [--skip-torch] [--cold]
Exit status 1 if a side fails to run or prints no figures; 0 (with a note) if the dataset is missing.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# PyTorch runs in Debian's python3-torch (make deps installs it; onnx_compare.py uses the same). The test venv has
# no torch: PyPI's Linux torch wheel is the CUDA build, gigabytes of nvidia-* wheels (tests/requirements-nodeps.txt).
TORCH_PYTHON = "/usr/bin/python3"

TINYGRAD_SIDE = r"""
import gzip, sys, time
import numpy as np
steps, batch, seed, data = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
from tinygrad import Tensor, TinyJit, nn, GlobalCounters
from tinygrad.helpers import Context

def idx(name, header):
  with gzip.open(f"{data}/{name}", "rb") as f: return np.frombuffer(f.read(), dtype=np.uint8)[header:]

X = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
Y = idx("train-labels-idx1-ubyte.gz", 8)

class Model:
  def __init__(self):
    self.layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32),
                   Tensor.max_pool2d, nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu,
                   nn.BatchNorm(64), Tensor.max_pool2d, lambda x: x.flatten(1), nn.Linear(576, 10)]
  def __call__(self, x): return x.sequential(self.layers)

Tensor.manual_seed(seed)
t_start = time.perf_counter()
model = Model()
opt = nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3)

@TinyJit
def step(x, y):
  with Context(TRAINING=1):
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y).backward()
    return loss.realize(*opt.schedule_step())

rng = np.random.default_rng(seed)
steady = []
for i in range(steps):
  t0 = time.perf_counter()
  k = rng.integers(0, len(Y), batch)
  x = Tensor(X[k].astype(np.float32))  # raw 0-255 pixels, as beautiful_mnist and kiln's example
  y = Tensor(Y[k].astype(np.int32))
  GlobalCounters.reset()
  loss = step(x, y).item()
  t1 = time.perf_counter()
  if i == 0: print(f"time to first step: {(t1 - t_start) * 1e3:.1f} ms")
  if i >= 2: steady.append((t1 - t0) * 1e3)
  print(f"step {i:3d} loss {loss:.7f} {(t1 - t0) * 1e3:8.1f} ms {GlobalCounters.kernel_count:4d} kernels", flush=True)
  kernels = GlobalCounters.kernel_count
if steady:
  print(f"ms/step (steps 2..{steps - 1}): {sum(steady) / len(steady):.1f}")
  print(f"kernels/step: {kernels}")
"""

TORCH_SIDE = r"""
import gzip, sys, time
import numpy as np
steps, batch, seed, data = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
t_start = time.perf_counter()
import torch
torch.set_num_threads(2)
torch.manual_seed(seed)

def idx(name, header):
  with gzip.open(f"{data}/{name}", "rb") as f: return np.frombuffer(f.read(), dtype=np.uint8)[header:]

X = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
Y = idx("train-labels-idx1-ubyte.gz", 8)
nn = torch.nn
model = nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32),
                      nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(),
                      nn.BatchNorm2d(64), nn.MaxPool2d(2), nn.Flatten(1), nn.Linear(576, 10))
model.train()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
rng = np.random.default_rng(seed)
steady = []
for i in range(steps):
  t0 = time.perf_counter()
  k = rng.integers(0, len(Y), batch)
  x = torch.from_numpy(X[k].astype(np.float32))
  y = torch.from_numpy(Y[k].astype(np.int64))
  opt.zero_grad()
  loss = loss_fn(model(x), y)
  loss.backward()
  opt.step()
  loss = loss.item()
  t1 = time.perf_counter()
  if i == 0: print(f"time to first step: {(t1 - t_start) * 1e3:.1f} ms")
  if i >= 2: steady.append((t1 - t0) * 1e3)
  print(f"step {i:3d} loss {loss:.7f} {(t1 - t0) * 1e3:8.1f} ms", flush=True)
if steady:
  print(f"ms/step (steps 2..{steps - 1}): {sum(steady) / len(steady):.1f}")
"""

FIRST = re.compile(r"^time to first step: ([0-9.]+) ms", re.M)
STEADY = re.compile(r"^ms/step \(steps [0-9.]+\): ([0-9.]+)", re.M)
KERNELS = re.compile(r"^kernels/step: (\d+)", re.M)


def run(label, cmd, env):
  print(f"-- {label}", flush=True)
  p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  out = p.stdout
  for line in out.splitlines():
    if line.startswith(("step", "time to", "ms/step", "kernels/step", "JIT=")):
      print("   ", line)
  if p.returncode == 77:
    return "skip"
  first, steady, kernels = FIRST.search(out), STEADY.search(out), KERNELS.search(out)
  if p.returncode != 0 or not first or not steady:
    print(out[-3000:])
    print(f"{label}: failed (exit {p.returncode}) or printed no figures")
    return None
  return {"first": float(first.group(1)), "steady": float(steady.group(1)),
          "kernels": int(kernels.group(1)) if kernels else -1}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=4, help="training steps per run (>= 3; figures use steps 2..)")
  ap.add_argument("--batch", type=int, default=512)
  ap.add_argument("--seed", type=int, default=42)
  ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
  ap.add_argument("--binary", default=os.path.join(os.environ.get("KILN_BUILD_DIR", "build/release"),
                                                    "examples/train_fashion_mnist"))
  ap.add_argument("--skip-tinygrad", action="store_true")
  ap.add_argument("--skip-nojit", action="store_true")
  ap.add_argument("--skip-torch", action="store_true")
  ap.add_argument("--cold", action="store_true", help="empty compile caches for both sides (a temp dir each)")
  a = ap.parse_args()
  if a.steps < 3:
    ap.error("--steps must be >= 3 (steps 0 and 1 run and capture the JIT)")
  if not os.path.exists(os.path.join(a.data, "train-images-idx3-ubyte.gz")):
    print(f"train_compare: no Fashion-MNIST in {a.data} (Debian package dataset-fashion-mnist); skipped")
    return 0
  if not os.access(a.binary, os.X_OK):
    print(f"train_compare: {a.binary} missing (cmake --build build/release --target train_fashion_mnist)")
    return 1

  tmp = tempfile.TemporaryDirectory()
  env = dict(os.environ)
  if a.cold:
    env["KILN_CACHE_DIR"] = os.path.join(tmp.name, "kiln")
    env["CACHEDB"] = os.path.join(tmp.name, "tinygrad.db")
  kiln_args = [a.binary, "--steps", str(a.steps), "--batch", str(a.batch), "--seed", str(a.seed), "--data", a.data,
               "--test-images", "0"]
  res = {}
  res["kiln JIT=1"] = run("kiln JIT=1", kiln_args, dict(env, JIT="1"))
  if not a.skip_nojit:
    res["kiln JIT=0"] = run("kiln JIT=0", kiln_args, dict(env, JIT="0"))
  if not a.skip_tinygrad:
    res["tinygrad"] = run("tinygrad TinyJit", [sys.executable, "-c", TINYGRAD_SIDE, str(a.steps), str(a.batch),
                                               str(a.seed), a.data], env)
  if not a.skip_torch:
    res["pytorch"] = run("PyTorch eager, 2 threads", [TORCH_PYTHON, "-c", TORCH_SIDE, str(a.steps), str(a.batch),
                                                      str(a.seed), a.data], env)
  if any(r == "skip" for r in res.values()):
    print("train_compare: dataset unreadable; skipped")
    return 0

  print(f"\nbatch {a.batch}, {a.steps} steps per run (ms/step over steps 2..{a.steps - 1})")
  print(f"{'run':<12} {'ms/step':>10} {'first step ms':>14} {'kernels/step':>13}")
  for k, r in res.items():
    if r:
      print(f"{k:<12} {r['steady']:>10.1f} {r['first']:>14.1f} {r['kernels']:>13d}")
  kj, kn, tg, pt = res.get("kiln JIT=1"), res.get("kiln JIT=0"), res.get("tinygrad"), res.get("pytorch")
  if kj and kn:
    print(f"kiln JIT=0 / JIT=1 ms/step: {kn['steady'] / kj['steady']:.2f}x")
  if kj and tg:
    print(f"kiln JIT / tinygrad JIT ms/step: {kj['steady'] / tg['steady']:.3f} (target <= {1 / 7:.3f})")
    print(f"kiln / tinygrad time to first step: {kj['first'] / tg['first']:.3f} "
          f"(kiln {kj['first'] / 1e3:.2f} s)")
  if kj and pt:
    print(f"kiln JIT / PyTorch ms/step: {kj['steady'] / pt['steady']:.3f} (target <= 0.8)")
  if kj:
    cache = "cold (empty) cache" if a.cold else "warm cache (whatever is on disk)"
    target = 1.0 if a.cold else 0.3
    print(f"kiln time to first step, {cache}: {kj['first'] / 1e3:.2f} s (target <= {target} s)")
  return 0 if all(res.values()) else 1


if __name__ == "__main__":
  sys.exit(main())
