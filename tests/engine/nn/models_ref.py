"""Independent reference for models_test: tinygrad's beautiful_mnist Model and an MLP.

  models_ref.py write DIR  does both of:
  cnn: writes DIR/cnn.safetensors (tinygrad safe_save(get_state_dict(model)), BatchNorm running
                          statistics set to random values) and DIR/cnn_io.safetensors ("x" float32 (4,1,28,28), "y" the
                          eval-mode logits tinygrad computes)
  mlp: the same for an MLP 12-16-8-3 (Linear/relu list as models.h's Mlp): mlp.safetensors, mlp_io
  models_ref.py names DIR FILE   exits 1 unless FILE (written by kiln) holds the names, shapes and values of
                          DIR/cnn.safetensors except tinygrad's num_batches_tracked
"""
import os
import sys

import numpy as np
from tinygrad import Tensor, nn
from tinygrad.nn.state import get_state_dict, safe_load, safe_save


class Cnn:
  def __init__(self):
    self.layers = [
        nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
        nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
        lambda x: x.flatten(1), nn.Linear(576, 10)]

  def __call__(self, x):
    return x.sequential(self.layers)


class Mlp:
  def __init__(self, sizes):
    self.layers = []
    for i in range(len(sizes) - 1):
      if i: self.layers.append(Tensor.relu)
      self.layers.append(nn.Linear(sizes[i], sizes[i + 1]))

  def __call__(self, x):
    return x.sequential(self.layers)


def write(kind, d):
  Tensor.manual_seed(7)
  rng = np.random.default_rng(0)
  if kind == "cnn":
    model, x = Cnn(), rng.random((4, 1, 28, 28), dtype=np.float32)
    for bn in (model.layers[4], model.layers[10]):
      n = bn.running_mean.shape[0]
      bn.running_mean.assign(Tensor(rng.normal(0, 0.1, n).astype(np.float32))).realize()
      bn.running_var.assign(Tensor(rng.uniform(0.5, 1.5, n).astype(np.float32))).realize()
  else:
    model, x = Mlp([12, 16, 8, 3]), rng.normal(size=(5, 12)).astype(np.float32)
  y = model(Tensor(x)).numpy()  # TRAINING=0 (the default): BatchNorm uses the running statistics
  safe_save(get_state_dict(model), os.path.join(d, kind + ".safetensors"))
  safe_save({"x": Tensor(x), "y": Tensor(y)}, os.path.join(d, kind + "_io.safetensors"))


def names(d, path):
  ref = {k: v.numpy() for k, v in safe_load(os.path.join(d, "cnn.safetensors")).items()
         if not k.endswith("num_batches_tracked")}
  got = {k: v.numpy() for k, v in safe_load(path).items()}
  if sorted(ref) != sorted(got):
    print("names differ:", sorted(ref), sorted(got))
    return 1
  for k in ref:
    if ref[k].shape != got[k].shape or not np.array_equal(ref[k], got[k]):
      print("tensor differs:", k, ref[k].shape, got[k].shape)
      return 1
  return 0


if __name__ == "__main__":
  if sys.argv[1] == "names":
    sys.exit(names(sys.argv[2], sys.argv[3]))
  os.makedirs(sys.argv[2], exist_ok=True)
  for kind in ("cnn", "mlp"):
    write(kind, sys.argv[2])
