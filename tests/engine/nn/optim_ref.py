#!/usr/bin/env python3
"""numpy reference trajectories for optim_numpy_test.cc: SGD (momentum, nesterov, weight decay), Adam (L2 weight
decay) and AdamW, with the update rules as the PyTorch documentation states them (float64).

Problem: two parameters p (shape (5,) and (2, 3)) and loss = sum(0.5 * d * p^2 + c * p) over both, so the gradient of
p is d * p + c (analytic, written out below; never taken from kiln).

Output (text, to stdout), per configuration:
  config <name> <opt> <lr> <momentum> <weight_decay> <nesterov> <b1> <b2> <eps>
  param <i> <ndim> <dims...> init <values...>
  const <i> c <values...> d <values...>
  step <k> <i> <values...>          (parameter i after step k, k = 1..STEPS)
  end
"""
import numpy as np

STEPS = 6
rng = np.random.default_rng(0)
SHAPES = [(5,), (2, 3)]
INIT = [rng.uniform(-1, 1, s) for s in SHAPES]
C = [rng.uniform(-1, 1, s) for s in SHAPES]
D = [rng.uniform(0.5, 2.0, s) for s in SHAPES]

CONFIGS = [
    # name, opt, lr, momentum, weight_decay, nesterov, b1, b2, eps
    ("sgd", "sgd", 0.1, 0.0, 0.0, 0, 0.9, 0.999, 1e-8),
    ("sgd_wd", "sgd", 0.1, 0.0, 0.05, 0, 0.9, 0.999, 1e-8),
    ("sgd_momentum", "sgd", 0.1, 0.9, 0.0, 0, 0.9, 0.999, 1e-8),
    ("sgd_momentum_wd", "sgd", 0.05, 0.8, 0.1, 0, 0.9, 0.999, 1e-8),
    ("sgd_nesterov", "sgd", 0.05, 0.9, 0.0, 1, 0.9, 0.999, 1e-8),
    ("sgd_nesterov_wd", "sgd", 0.05, 0.9, 0.1, 1, 0.9, 0.999, 1e-8),
    ("adam", "adam", 0.01, 0.0, 0.0, 0, 0.9, 0.999, 1e-8),
    ("adam_betas", "adam", 0.05, 0.0, 0.0, 0, 0.8, 0.99, 1e-6),
    ("adam_l2", "adam", 0.01, 0.0, 0.1, 0, 0.9, 0.999, 1e-8),
    ("adamw", "adamw", 0.01, 0.0, 0.1, 0, 0.9, 0.999, 1e-8),
    ("adamw_strong", "adamw", 0.05, 0.0, 0.5, 0, 0.85, 0.995, 1e-8),
]


def grad(i, p):
  return D[i] * p + C[i]


def trajectory(opt, lr, mom, wd, nesterov, b1, b2, eps):
  ps = [x.copy() for x in INIT]
  bufs = [None] * len(ps)
  m = [np.zeros_like(x) for x in ps]
  v = [np.zeros_like(x) for x in ps]
  out = []
  for t in range(1, STEPS + 1):
    for i, p in enumerate(ps):
      g = grad(i, p)
      if opt == "sgd":  # torch.optim.SGD, dampening 0
        if wd: g = g + wd * p
        if mom:
          bufs[i] = g.copy() if bufs[i] is None else mom * bufs[i] + g
          g = g + mom * bufs[i] if nesterov else bufs[i]
        ps[i] = p - lr * g
      else:  # torch.optim.Adam (L2) / AdamW (decoupled)
        if opt == "adamw":
          p = p * (1 - lr * wd)
        elif wd:
          g = g + wd * p
        m[i] = b1 * m[i] + (1 - b1) * g
        v[i] = b2 * v[i] + (1 - b2) * g * g
        mhat, vhat = m[i] / (1 - b1**t), v[i] / (1 - b2**t)
        ps[i] = p - lr * mhat / (np.sqrt(vhat) + eps)
    out.append([x.copy() for x in ps])
  return out


def fmt(a):
  return " ".join(repr(float(x)) for x in np.asarray(a).ravel())


def main():
  lines = []
  for name, opt, lr, mom, wd, nest, b1, b2, eps in CONFIGS:
    lines.append(f"config {name} {opt} {lr} {mom} {wd} {nest} {b1} {b2} {eps}")
    for i, s in enumerate(SHAPES):
      lines.append(f"param {i} {len(s)} {' '.join(map(str, s))} init {fmt(INIT[i])}")
      lines.append(f"const {i} c {fmt(C[i])} d {fmt(D[i])}")
    for k, ps in enumerate(trajectory(opt, lr, mom, wd, nest, b1, b2, eps), 1):
      for i, p in enumerate(ps):
        lines.append(f"step {k} {i} {fmt(p)}")
    lines.append("end")
  print("\n".join(lines))


if __name__ == "__main__":
  main()
