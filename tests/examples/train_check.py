#!/usr/bin/env python3
"""Checks examples/train_fashion_mnist by running it and parsing its output (the line formats are in its header).

  train_check.py BIN jit-equal        4 steps, batch 16, with JIT=1 and JIT=0: the loss curves must be equal
                                      (rtol 1e-5) and the jitted run must replay its capture
  train_check.py BIN loss-decreases   10 steps, batch 64: last loss < first, mean of the last 2 < mean of the first 2
  train_check.py BIN save-load DIR    2 steps, --save; then --load --eval-only: the same accuracy on 1000 test images
  train_check.py BIN accuracy PCT     70 steps, batch 512 (the issue's run) with seeds 42, 1 and 2: the median test
                                      accuracy on the 10k images >= PCT. One run's accuracy moves by about +-1 point
                                      with the seed (tinygrad 0.14's own run of this setup gives 82.56 / 82.66 /
                                      84.39% for seeds 42 / 1 / 2), and by up to 2 points with ulp-level changes
                                      to the kernels: the same commit built for AVX2 and for AVX-512 gives 81.23 and
                                      83.21% for seed 42 (81.11 and 83.27% for seed 2) while their mean training
                                      losses over steps 50-69 agree within 1% (0.418 / 0.417, 0.430 / 0.415). CMake
                                      passes PCT = 80, below the lowest of the 19 runs seen (81.11%; it was 83, the
                                      middle of the spread, until codegen changes moved two seeds below it): a median
                                      under 80 is a real regression, not the seed.

Exit status: 0 pass, 1 fail, 77 (ctest SKIP_RETURN_CODE) when the dataset is missing.
"""
import os
import re
import subprocess
import sys

STEP = re.compile(r"^step\s+(\d+) loss ([-+0-9.eEnaif]+)\s")
ACC = re.compile(r"^test accuracy: ([0-9.]+)% on (\d+) images")


def run(bin_path, args, jit=None):
  env = dict(os.environ)
  if jit is not None:
    env["JIT"] = str(jit)
  p = subprocess.run([bin_path] + args, env=env, capture_output=True, text=True)
  sys.stdout.write(p.stdout)
  sys.stderr.write(p.stderr)
  if p.returncode == 77:
    sys.exit(77)
  if p.returncode != 0:
    print(f"FAIL: {bin_path} {' '.join(args)} exited {p.returncode}")
    sys.exit(1)
  losses = [float(m.group(2)) for m in map(STEP.match, p.stdout.splitlines()) if m]
  accs = [(float(m.group(1)), int(m.group(2))) for m in map(ACC.match, p.stdout.splitlines()) if m]
  return p.stdout, losses, accs


def fail(msg):
  print("FAIL:", msg)
  sys.exit(1)


def jit_equal(bin_path):
  args = ["--steps", "4", "--batch", "16", "--seed", "3", "--test-images", "0"]
  out1, jitted, _ = run(bin_path, args, jit=1)
  _, plain, _ = run(bin_path, args, jit=0)
  if len(jitted) != 4 or len(plain) != 4:
    fail(f"expected 4 losses each, got {jitted} and {plain}")
  if "(replay)" not in out1:
    fail("the jitted run never replayed")
  for i, (a, b) in enumerate(zip(jitted, plain)):
    if abs(a - b) > 1e-5 * abs(b):
      fail(f"step {i}: jitted loss {a} != non-jitted {b}")
  print("jitted", jitted, "== non-jitted", plain)


def loss_decreases(bin_path):
  _, losses, _ = run(bin_path, ["--steps", "10", "--batch", "64", "--test-images", "0"])
  if len(losses) != 10:
    fail(f"expected 10 losses, got {losses}")
  if not losses[-1] < losses[0]:
    fail(f"last loss {losses[-1]} is not below the first {losses[0]}")
  first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
  if not last < first:
    fail(f"mean of the last 2 losses {last} is not below the mean of the first 2 {first}")
  print("losses", losses)


def save_load(bin_path, d):
  os.makedirs(d, exist_ok=True)
  path = os.path.join(d, f"model_{os.getpid()}.safetensors")
  _, _, trained = run(bin_path, ["--steps", "2", "--batch", "16", "--test-images", "1000", "--save", path])
  _, _, loaded = run(bin_path, ["--load", path, "--eval-only", "--test-images", "1000"])
  os.remove(path)
  if len(trained) != 1 or trained != loaded:
    fail(f"accuracy after training {trained} != after loading the saved weights {loaded}")
  print("accuracy", trained[0], "after training and after --load")


def accuracy(bin_path, pct):
  results = []
  for seed in ("42", "1", "2"):
    _, losses, accs = run(bin_path, ["--steps", "70", "--batch", "512", "--seed", seed])
    if len(losses) != 70 or len(accs) != 1 or accs[0][1] != 10000:
      fail(f"seed {seed}: expected 70 steps and one accuracy on 10000 images, got {len(losses)} steps and {accs}")
    results.append(accs[0][0])
  median = sorted(results)[1]
  print(f"test accuracy per seed (42, 1, 2): {results}; median {median}%")
  if not median >= pct:
    fail(f"median test accuracy {median}% < {pct}%")
  print(f"median test accuracy {median}% >= {pct}%")


if __name__ == "__main__":
  b, mode = sys.argv[1], sys.argv[2]
  if mode == "jit-equal":
    jit_equal(b)
  elif mode == "loss-decreases":
    loss_decreases(b)
  elif mode == "save-load":
    save_load(b, sys.argv[3])
  elif mode == "accuracy":
    accuracy(b, float(sys.argv[3]))
  else:
    fail(f"unknown mode {mode}")
