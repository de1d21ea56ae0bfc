"""Shared pieces of the conformance case generators: the Case record and input makers."""
import numpy as np

np.seterr(all="ignore")  # references with nan/inf/overflow are intended
RNG = np.random.default_rng(20240607)
NONE = 999999999  # "None" in slice attributes (conformance_ops.cc kNone)
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32]
BOTH = "CPU,INTERP"


class Case:
    """One conformance case. `want` is numpy's answer; `dt` casts it to kiln's result dtype where that differs
    from numpy's and then `note` must say why. A float64 reference computed from float32-only inputs is cast to
    float32 silently (the reference is just more precise). `xfail` = (backends, reason) marks a known kiln bug."""

    def __init__(self, name, op, ins, want, attr=None, dt=None, note=None, xfail=None, family="", atol=None):
        want = np.asarray(want)
        ins = [np.asarray(x) for x in ins]
        if dt is not None:
            dt = np.dtype(dt)
            if dt != want.dtype and not (want.dtype == np.float64 and dt == np.float32 and
                                         all(x.dtype != np.float64 for x in ins)):
                assert note, f"{name}: kiln dtype {dt} differs from numpy {want.dtype}; give a note"
            with np.errstate(all="ignore"):
                want = want.astype(dt)
        elif want.dtype == np.float64 and all(x.dtype != np.float64 for x in ins):
            assert all(x.dtype == np.float32 for x in ins if x.dtype.kind == "f"), name
            want = want.astype(np.float32)
        self.name, self.op, self.ins, self.want = name, op, ins, want
        self.attr = list(attr) if attr is not None else None
        self.note, self.xfail, self.family = note, xfail, family or op
        self.atol = atol  # absolute tolerance replacing the default 1e-5 (float outputs), e.g. for long sums


def f32(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def ints(dtype, *shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return RNG.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64).astype(dtype)


def dname(dt):
    return np.dtype(dt).name


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def log_softmax(x, axis=-1):
    x = x.astype(np.float64)
    m = x - x.max(axis=axis, keepdims=True)
    return m - np.log(np.exp(m).sum(axis=axis, keepdims=True))
