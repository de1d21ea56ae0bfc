#!/usr/bin/env python3
"""Reference reader/writer for the nn/state tests, independent of kiln (numpy + struct + json + gzip only).

  state_ref.py write PATH        write a safetensors file with known tensors (see TENSORS) and metadata
  state_ref.py check PATH        read a kiln-written safetensors file and verify TENSORS; exit 0 when equal
  state_ref.py mnist DIR I...    print "images labels" counts and, per index I, the train image's pixel sum,
                                 pixel [14][14] and label
"""
import gzip
import json
import struct
import sys

import numpy as np

TENSORS = {
    "a.weight": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5,
    "b": np.array([-3, -2, -1, 0, 1, 2, 3], dtype=np.int64),
    "c_half": np.array([1.5, -2.0, 65504.0], dtype=np.float16),
    "d": np.arange(10, dtype=np.uint8).reshape(2, 5),
    "e": np.array([True, False, True], dtype=np.bool_),
    "f64": np.array([[1e-300, -2.5]], dtype=np.float64),
    "i16": np.array([-32768, 32767], dtype=np.int16),
    "scalar": np.array(7.25, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float32),
}
DT = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.float16): "F16",
      np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL", np.dtype(np.float64): "F64",
      np.dtype(np.int16): "I16"}


def write(path):
    header, blobs, off = {"__metadata__": {"format": "pt", "who": "numpy"}}, [], 0
    # reverse-sorted names: a different order from kiln's writer
    for name in sorted(TENSORS, reverse=True):
        arr = np.asarray(TENSORS[name])  # (ascontiguousarray would make a 0-d array 1-d)
        data = arr.tobytes()
        header[name] = {"dtype": DT[arr.dtype], "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def check(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, "header not padded to 8"
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    inv = {v: k for k, v in DT.items()}
    names = [k for k in header if k != "__metadata__"]
    assert sorted(names) == sorted(TENSORS), names
    end = 0
    for name in sorted(names, key=lambda k: header[k]["data_offsets"][0]):
        e = header[name]
        b, t = e["data_offsets"]
        assert b == end, f"gap or overlap before {name}"
        end = t
        arr = np.frombuffer(data[b:t], dtype=inv[e["dtype"]]).reshape(e["shape"])
        assert b % arr.dtype.itemsize == 0, f"{name} misaligned"
        want = TENSORS[name]
        assert arr.dtype == want.dtype and arr.shape == want.shape, (name, arr.dtype, arr.shape, e)
        assert np.array_equal(arr, want), name
    assert end == len(data), "trailing bytes"
    assert header.get("__metadata__") == {"format": "pt", "who": "numpy"}, header.get("__metadata__")


def mnist(d, idxs):
    with gzip.open(f"{d}/train-images-idx3-ubyte.gz") as f:
        img = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{d}/train-labels-idx1-ubyte.gz") as f:
        lab = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    with gzip.open(f"{d}/t10k-images-idx3-ubyte.gz") as f:
        timg = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 28, 28)
    print(len(img), len(timg))
    for i in idxs:
        print(int(img[i].astype(np.int64).sum()), int(img[i][14][14]), int(lab[i]))


if __name__ == "__main__":
    {"write": lambda: write(sys.argv[2]), "check": lambda: check(sys.argv[2]),
     "mnist": lambda: mnist(sys.argv[2], [int(x) for x in sys.argv[3:]])}[sys.argv[1]]()
