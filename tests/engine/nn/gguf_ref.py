"""Reference GGUF files and values for gguf_test, from llama.cpp's own Python package `gguf` (PyPI):
nothing here comes from kiln.

  gguf_ref.py synthetic DIR   writes DIR/types.gguf with GGUFWriter: one tensor of every type kiln reads (F32, F16,
                              BF16, Q8_0, Q4_0, Q4_1; values quantized by gguf.quants.quantize) and metadata of
                              every value type; for each tensor DIR/<name>.f32 holds gguf.quants.dequantize's float32
                              values (row-major). Prints the manifest:
                                tensor <name> <type> <dim,dim,...> <file>
                                meta <key> <value as text>
  gguf_ref.py model FILE      for each tensor of a real GGUF file: tensor <name> <type> <dims> <sha256 of its
                              dequantized float32 values, row-major>; and its tokenizer/architecture metadata counts.
Run with the project venv.
"""
import hashlib
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize


def synthetic(out: str) -> None:
    rng = np.random.default_rng(24)
    w = GGUFWriter(os.path.join(out, "types.gguf"), arch="llama")
    meta = []

    def put(kind, key, value):
        getattr(w, f"add_{kind}")(key, value)
        meta.append(f"meta {key} {value}")
    put("uint8", "t.u8", 200)
    put("int8", "t.i8", -100)
    put("uint16", "t.u16", 60000)
    put("int16", "t.i16", -30000)
    put("uint32", "t.u32", 4000000000)
    put("int32", "t.i32", -2000000000)
    put("uint64", "t.u64", 18000000000000000000)
    put("int64", "t.i64", -9000000000000000000)
    put("float32", "t.f32", 0.5)
    put("float64", "t.f64", -2.25)
    put("bool", "t.bool", True)
    put("string", "t.str", "héllo wörld")
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.strs", ["a", "bc", ""])
    meta.append("meta t.ints 1,2,3")
    meta.append("meta t.strs a,bc,")

    def data(shape, scale):
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        x.reshape(-1)[:32] = 0.0  # a block of zeros: scale 0
        return x

    tensors = {
        "f32": (Q.F32, data((3, 5), 10.0)),
        "f16": (Q.F16, data((4, 6), 100.0)),
        "bf16": (Q.BF16, data((2, 8), 1e30)),
        "q8_0": (Q.Q8_0, data((3, 64), 2.0)),
        "q4_0": (Q.Q4_0, data((2, 96), 0.5)),
        "q4_1": (Q.Q4_1, data((5, 32), 3.0) + 1.0),
        "q4_1_b": (Q.Q4_1, data((3, 32), 0.5) - 2.0),  # stacked under q4_1 by GgufModel::LoadRows
        "blk.0.q4_1_3d": (Q.Q4_1, data((2, 3, 64), 1.0)),
    }
    lines = []
    for name, (qtype, x) in tensors.items():
        raw = quantize(x, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)
        ref = dequantize(raw, qtype).astype(np.float32).reshape(x.shape)
        file = os.path.join(out, name + ".f32")
        ref.tofile(file)
        lines.append(f"tensor {name} {qtype.name} {','.join(map(str, x.shape))} {file}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    sys.stdout.write("\n".join(lines + meta) + "\ndone\n")


def model(path: str) -> None:
    r = GGUFReader(path)
    lines = []
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape)]  # ggml ne -> row-major
        x = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(shape)
        lines.append(f"tensor {t.name} {t.tensor_type.name} {','.join(map(str, shape))} "
                     f"{hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()}")
    sys.stdout.write("\n".join(lines) + "\ndone\n")


if __name__ == "__main__":
    {"synthetic": synthetic, "model": model}[sys.argv[1]](sys.argv[2])
