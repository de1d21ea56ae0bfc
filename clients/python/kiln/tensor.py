"""kiln.Tensor: a lazy tensor with tinygrad's (and numpy's) common surface that realizes on kilnd.

Operations only record a graph; `.numpy()`, `.item()`, `.tolist()` or `.realize()` encode the
graph as a kiln.v1.Graph (nodes in topological order, tinygrad op names: INPUT, CONST, ADD, MUL,
SUB, FDIV, MAX, CMPLT, WHERE, EXP2, LOG2, SQRT, RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP,
REDUCE_AXIS, CAST, ...), send it through kiln.v1.Engine/Execute with the numpy data of its
leaves as inputs, and keep the result; a realized tensor is an input of later graphs.

Shapes and dtypes are computed here as numpy would (broadcasting, promotion with Python scalars
taking the tensor's dtype); the server checks them again. Defaults follow tinygrad: Python
floats are float32, Python ints int32. Not thread-safe (like tinygrad's Tensor).

Where data comes from: `Tensor(array)`, `arange`, `linspace` and the random constructors (`rand`,
`randn`, `randint`; numpy's PCG64, seeded by `Tensor.manual_seed`) make their values here and
send them as graph inputs; `zeros`, `ones`, `full`, `eye` and everything computed from tensors
(`uniform`, `normal`, `cat`, `conv2d`, strided slices, ...) are graph nodes that kilnd runs.
`device=` names the kilnd device a graph runs on ("" = kilnd's default); tensors on different
devices do not mix (`.to(device)` moves one), and a result computed on another device than the
one asked for raises KilnError."""

from __future__ import annotations

import math
import os
from typing import Iterable, Sequence

import numpy as np

from kiln.client import Client, KilnError, default_client
from kiln.v1 import graph_pb2

_LOG2_E = 1.0 / math.log(2.0)
_LN_2 = math.log(2.0)


def _default_dtype(value) -> np.dtype:
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, int):
        return np.dtype(np.int32)
    return np.dtype(np.float32)


def _as_array(data, dtype) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data if dtype is None else data.astype(dtype))
    arr = np.asarray(data)
    if dtype is not None:
        return np.ascontiguousarray(arr.astype(dtype))
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    elif arr.dtype == np.int64:
        arr = arr.astype(np.int32)
    return np.ascontiguousarray(arr)


def _shape_arg(shape) -> tuple[int, ...]:
    """tinygrad's argfix: f(2, 3), f((2, 3)) and f([2, 3]) are the same shape."""
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = tuple(shape[0])
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


def _same_device(a: str, b: str) -> bool:
    """"CL" and "CL:0" name one device; "" (kilnd's default) matches any."""
    if not a or not b:
        return True
    norm = [d.upper() if ":" in d else d.upper() + ":0" for d in (a, b)]
    return norm[0] == norm[1]


def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} out of range for {ndim} dims")
        out.append(a % ndim)
    return tuple(sorted(set(out)))


class Tensor:
    """A lazy tensor. Create from numpy / lists / scalars: Tensor(np.ones((2, 3)))."""

    __slots__ = ("_op", "_src", "_arg", "shape", "dtype", "_value", "device")

    _rng: np.random.Generator = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    def __init__(self, data, dtype=None, device: str | None = None):
        if isinstance(data, Tensor):
            device = data.device if device is None else device
            data = data.numpy()
        arr = _as_array(data, dtype)
        self._op, self._src, self._arg = "INPUT", (), None
        self.shape: tuple[int, ...] = tuple(int(d) for d in arr.shape)
        self.dtype: np.dtype = arr.dtype
        self._value: np.ndarray | None = arr
        self.device: str = device or ""

    @classmethod
    def _node(cls, op: str, dtype, src: Sequence["Tensor"], arg, shape,
              device: str | None = None) -> "Tensor":
        t = cls.__new__(cls)
        t._op, t._src, t._arg = op, tuple(src), arg
        t.shape = tuple(int(d) for d in shape)
        t.dtype = np.dtype(dtype)
        t._value = None
        devices = {s.device for s in src if s.device}
        if device:
            devices.add(device)
        if len(devices) > 1:
            raise ValueError(f"{op}: tensors on different devices {sorted(devices)}; "
                             "move one with .to(device)")
        t.device = devices.pop() if devices else ""
        return t

    # ** creation **

    @staticmethod
    def full(shape, value, dtype=None, device: str | None = None) -> "Tensor":
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype) if dtype is not None else _default_dtype(value)
        c = Tensor._const(value, dtype, device)
        return c.reshape(*([1] * len(shape))).expand(*shape) if shape else c

    @staticmethod
    def zeros(*shape, dtype=None, device: str | None = None) -> "Tensor":
        return Tensor.full(_shape_arg(shape), 0.0, dtype or np.float32, device)

    @staticmethod
    def ones(*shape, dtype=None, device: str | None = None) -> "Tensor":
        return Tensor.full(_shape_arg(shape), 1.0, dtype or np.float32, device)

    def full_like(self, value, dtype=None) -> "Tensor":
        return Tensor.full(self.shape, value, dtype or self.dtype, self.device)

    def zeros_like(self, dtype=None) -> "Tensor":
        return self.full_like(0, dtype)

    def ones_like(self, dtype=None) -> "Tensor":
        return self.full_like(1, dtype)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None, device: str | None = None) -> "Tensor":
        """tinygrad's arange: int32 when start, stop and step are ints, else float32."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be 0")
        if dtype is None:
            ints = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
            dtype = np.int32 if ints else np.float32
        return Tensor(np.arange(start, stop, step), dtype, device)

    @staticmethod
    def linspace(start, stop, steps: int, dtype=None, device: str | None = None) -> "Tensor":
        return Tensor(np.linspace(start, stop, steps), dtype or np.float32, device)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype=None, device: str | None = None) -> "Tensor":
        """Ones on the diagonal, built on kilnd from movement ops (tinygrad's eye)."""
        if n < 0 or (m is not None and m < 0):
            raise ValueError(f"eye: negative size ({n}, {m})")
        x = Tensor.ones(n, 1, dtype=dtype, device=device).pad(((0, 0), (0, n))).flatten()
        x = x.shrink(((0, n * n),)).reshape(n, n)
        if m is None or m == n:
            return x
        return x.pad(((0, 0), (0, m - n))) if m > n else x.shrink((None, (0, m)))

    # ** random: numpy's PCG64 here, the values sent as graph inputs **

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Makes rand / randn / randint (and what builds on them) repeat for the same seed."""
        Tensor._rng = np.random.default_rng(seed)

    @staticmethod
    def _random(shape, dtype, device, draw) -> "Tensor":
        dtype = np.dtype(dtype or np.float32)
        return Tensor(draw(_shape_arg(shape)).astype(dtype), None, device)

    @staticmethod
    def rand(*shape, dtype=None, device: str | None = None) -> "Tensor":
        """Uniform on [0, 1)."""
        return Tensor._random(shape, dtype, device, lambda s: Tensor._rng.random(s))

    @staticmethod
    def randn(*shape, dtype=None, device: str | None = None) -> "Tensor":
        """Standard normal."""
        return Tensor._random(shape, dtype, device, lambda s: Tensor._rng.standard_normal(s))

    @staticmethod
    def randint(*shape, low: int = 0, high: int = 10, dtype=np.int32,
                device: str | None = None) -> "Tensor":
        """Integers uniform on [low, high)."""
        if high <= low:
            raise ValueError(f"randint: high ({high}) must exceed low ({low})")
        return Tensor._random(shape, dtype, device,
                              lambda s: Tensor._rng.integers(low, high, size=s))

    @staticmethod
    def uniform(*shape, low: float = 0.0, high: float = 1.0, dtype=None,
                device: str | None = None) -> "Tensor":
        return Tensor.rand(*shape, dtype=dtype, device=device) * (high - low) + low

    @staticmethod
    def normal(*shape, mean: float = 0.0, std: float = 1.0, dtype=None,
               device: str | None = None) -> "Tensor":
        return Tensor.randn(*shape, dtype=dtype, device=device) * std + mean

    def rand_like(self, dtype=None) -> "Tensor":
        return Tensor.rand(*self.shape, dtype=dtype or self.dtype, device=self.device)

    def randn_like(self, dtype=None) -> "Tensor":
        return Tensor.randn(*self.shape, dtype=dtype or self.dtype, device=self.device)

    @staticmethod
    def _const(value, dtype, device: str | None = None) -> "Tensor":
        return Tensor._node("CONST", dtype, (), np.dtype(dtype).type(value).item(), (), device)

    # ** realization **

    def realize(self, client: Client | None = None) -> "Tensor":
        if self._value is None:
            graph, feeds = self._graph()
            outputs, response = (client or default_client()).execute(graph, feeds, self.device)
            for k in response.kernels:
                if not _same_device(self.device, k.device):
                    raise KilnError("FAILED_PRECONDITION",
                                    f"device: asked for {self.device}, kilnd ran the graph on "
                                    f"{k.device}")
            value = outputs["out"]
            self._value = value.reshape(self.shape).astype(self.dtype, copy=False)
            self._op, self._src, self._arg = "INPUT", (), None
        return self

    def to(self, device: str | None) -> "Tensor":
        """This tensor on `device` (realized where it is, then an input there)."""
        if (device or "") == self.device:
            return self
        return Tensor(self.realize()._value, None, device)

    def numpy(self) -> np.ndarray:
        return self.realize()._value.copy()

    def item(self):
        if math.prod(self.shape) != 1:
            raise ValueError(f"item() needs one element, shape is {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def _graph(self) -> tuple[graph_pb2.Graph, dict[str, np.ndarray]]:
        """This tensor's graph (iterative toposort; realized tensors become INPUTs)."""
        order: list[Tensor] = []
        index: dict[int, int] = {}
        stack: list[tuple[Tensor, bool]] = [(self, False)]
        visiting: set[int] = set()
        while stack:
            t, expanded = stack.pop()
            if id(t) in index:
                continue
            if expanded or t._value is not None:
                index[id(t)] = len(order)
                order.append(t)
                continue
            if id(t) in visiting:
                continue
            visiting.add(id(t))
            stack.append((t, True))
            for s in reversed(t._src):
                if id(s) not in index:
                    stack.append((s, False))
        g = graph_pb2.Graph(name="kiln.Tensor")
        feeds: dict[str, np.ndarray] = {}
        for t in order:
            if t._value is not None:
                name = f"in{len(feeds)}"
                g.inputs.add(name=name, dtype=t.dtype.name, shape=list(t.shape))
                feeds[name] = t._value
                n = g.nodes.add(op="INPUT", dtype=t.dtype.name)
                n.arg.int_value = len(feeds) - 1
                continue
            n = g.nodes.add(op=t._op, dtype=t.dtype.name, src=[index[id(s)] for s in t._src])
            a = t._arg
            if t._op == "CONST":
                if isinstance(a, bool):
                    n.arg.bool_value = a
                elif isinstance(a, int):
                    n.arg.int_value = a
                else:
                    n.arg.float_value = float(a)
            elif t._op == "REDUCE_AXIS":
                n.arg.reduce.op, axes = a
                n.arg.reduce.axes.extend(axes)
            elif a is not None:
                n.arg.ints.values.extend(a)
        g.outputs.add(name="out", node=index[id(self)])
        return g, feeds

    # ** movement **

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    size = property(numel)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def reshape(self, *shape) -> "Tensor":
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        if shape.count(-1) > 1:
            raise ValueError("only one dimension can be -1")
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape = tuple(self.numel() // known if d == -1 else d for d in shape)
        if math.prod(shape) != self.numel():
            raise ValueError(f"cannot reshape {self.shape} to {shape}")
        if tuple(shape) == self.shape:
            return self
        return Tensor._node("RESHAPE", self.dtype, (self,), list(shape), shape)

    def permute(self, *order) -> "Tensor":
        order = tuple(order[0]) if len(order) == 1 and not isinstance(order[0], int) else order
        order = tuple(o % self.ndim for o in order)
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"{order} is not a permutation of {self.ndim} dims")
        return Tensor._node("PERMUTE", self.dtype, (self,), list(order),
                            [self.shape[o] for o in order])

    def transpose(self, dim0: int = -2, dim1: int = -1) -> "Tensor":
        order = list(range(self.ndim))
        order[dim0], order[dim1] = order[dim1], order[dim0]
        return self.permute(*order)

    @property
    def T(self) -> "Tensor":  # noqa: N802 (numpy's name)
        return self.permute(*reversed(range(self.ndim)))

    def expand(self, *shape) -> "Tensor":
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        x = self
        if len(shape) > x.ndim:
            x = x.reshape(*([1] * (len(shape) - x.ndim)), *x.shape)
        shape = tuple(s if d == -1 else d for s, d in zip(x.shape, shape))
        for s, d in zip(x.shape, shape):
            if s != d and s != 1:
                raise ValueError(f"cannot expand {self.shape} to {shape}")
        if shape == x.shape:
            return x
        return Tensor._node("EXPAND", x.dtype, (x,), list(shape), shape)

    def pad(self, padding: Sequence) -> "Tensor":
        """Zero padding: one (before, after) pair (or None) per dimension."""
        pairs = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
        if len(pairs) != self.ndim or any(b < 0 or a < 0 for b, a in pairs):
            raise ValueError(f"padding {padding} does not fit shape {self.shape}")
        shape = [s + b + a for s, (b, a) in zip(self.shape, pairs)]
        return Tensor._node("PAD", self.dtype, (self,), [v for p in pairs for v in p], shape)

    def shrink(self, arg: Sequence) -> "Tensor":
        """Keeps [start, end) of each dimension (None = all)."""
        pairs = [(0, s) if p is None else (int(p[0]), int(p[1])) for p, s in zip(arg, self.shape)]
        if len(pairs) != self.ndim or any(not 0 <= b <= e <= s
                                          for (b, e), s in zip(pairs, self.shape)):
            raise ValueError(f"shrink {arg} does not fit shape {self.shape}")
        return Tensor._node("SHRINK", self.dtype, (self,), [v for p in pairs for v in p],
                            [e - b for b, e in pairs])

    def flatten(self, start_dim: int = 0) -> "Tensor":
        start_dim %= max(self.ndim, 1)
        return self.reshape(*self.shape[:start_dim], -1)

    def unsqueeze(self, dim: int) -> "Tensor":
        dim = dim % (self.ndim + 1)
        return self.reshape(*self.shape[:dim], 1, *self.shape[dim:])

    def squeeze(self, dim: int | None = None) -> "Tensor":
        if dim is None:
            return self.reshape(*[s for s in self.shape if s != 1])
        dim %= self.ndim
        if self.shape[dim] != 1:
            return self
        return self.reshape(*self.shape[:dim], *self.shape[dim + 1:])

    def flip(self, axis) -> "Tensor":
        axes = _axes(axis, self.ndim)
        if not axes:
            return self
        return Tensor._node("FLIP", self.dtype, (self,), [int(i in axes) for i in range(self.ndim)],
                            self.shape)

    def _slice_axis(self, axis: int, start: int, stop: int, step: int) -> "Tensor":
        """x[start:stop:step] along `axis` (Python's slice semantics after slice.indices)."""
        n = len(range(start, stop, step))
        x = self
        if step < 0:  # flipped, the slice walks forward from the mirrored start
            x = x.flip(axis)
            start, step = self.shape[axis] - 1 - start, -step
        bounds = [None] * x.ndim
        bounds[axis] = (start, start + (n - 1) * step + 1 if n else start)
        x = x.shrink(bounds)
        if step == 1 or n <= 1:
            return x
        # Every step-th element: pad to n * step, view as (n, step), keep column 0.
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, n * step - x.shape[axis])
        x = x.pad(pad)
        x = x.reshape(*x.shape[:axis], n, step, *x.shape[axis + 1:])
        bounds = [None] * x.ndim
        bounds[axis + 1] = (0, 1)
        x = x.shrink(bounds)
        return x.reshape(*x.shape[:axis], n, *x.shape[axis + 2:])

    def __getitem__(self, index) -> "Tensor":
        """numpy basic indexing: integers, slices with any step (negative too), None, `...`."""
        index = index if isinstance(index, tuple) else (index,)
        if sum(i is Ellipsis for i in index) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        used = sum(1 for i in index if i is not None and i is not Ellipsis)
        if used > self.ndim:
            raise IndexError(f"{used} indices for {self.ndim} dims")
        if Ellipsis in index:
            k = index.index(Ellipsis)
            index = index[:k] + (slice(None),) * (self.ndim - used) + index[k + 1:]
        x, axis, out_shape = self, 0, []
        for idx in index:
            if idx is None:
                out_shape.append(1)
                continue
            s = self.shape[axis]
            if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
                idx = int(idx)
                if not -s <= idx < s:
                    raise IndexError(f"index {idx} out of range for size {s}")
                x = x._slice_axis(axis, idx % s, idx % s + 1, 1)
            elif isinstance(idx, slice):
                if idx.step == 0:
                    raise ValueError("slice step cannot be zero")
                b, e, st = idx.indices(s)
                x = x._slice_axis(axis, b, e, st)
                out_shape.append(x.shape[axis])
            else:
                raise IndexError(f"unsupported index {idx!r} (integers, slices, None, ...)")
            axis += 1
        out_shape += list(x.shape[axis:])
        return x.reshape(*out_shape)

    # ** combining **

    def cat(self, *others: "Tensor", dim: int = 0) -> "Tensor":
        """tinygrad's cat: Tensor.cat(a, b, dim=1) or a.cat(b, dim=1). Each piece is padded to the
        full length along `dim` and the pieces are added."""
        parts = [self, *others]
        if not all(isinstance(p, Tensor) for p in parts):
            raise TypeError("cat takes kiln.Tensor arguments")
        dim = _axes(dim, self.ndim)[0]
        for p in parts:
            if p.ndim != self.ndim or any(a != b for i, (a, b)
                                          in enumerate(zip(p.shape, self.shape)) if i != dim):
                raise ValueError(f"cat: shapes {[q.shape for q in parts]} differ outside dim {dim}")
        dtype = np.result_type(*[p.dtype for p in parts])
        total = sum(p.shape[dim] for p in parts)
        out, offset = None, 0
        for p in parts:
            pad = [(0, 0)] * self.ndim
            pad[dim] = (offset, total - offset - p.shape[dim])
            offset += p.shape[dim]
            piece = p.cast(dtype).pad(pad)
            out = piece if out is None else out + piece
        return out

    def stack(self, *others: "Tensor", dim: int = 0) -> "Tensor":
        """tinygrad's stack: a new axis `dim` (Tensor.stack(a, b) or a.stack(b))."""
        dim = dim % (self.ndim + 1)
        return Tensor.cat(*[t.unsqueeze(dim) for t in (self, *others)], dim=dim)

    # ** convolution **

    def conv2d(self, weight: "Tensor", bias: "Tensor | None" = None, groups: int = 1,
               stride=1, dilation=1, padding=0) -> "Tensor":
        """tinygrad's conv2d: self (N, Cin, H, W), weight (Cout, Cin / groups, KH, KW), bias
        (Cout,); stride and dilation an int or (h, w); padding an int, (h, w) or (left, right,
        top, bottom). Built as a sum over the KH * KW shifted, strided views of the input."""
        w = weight if isinstance(weight, Tensor) else Tensor(weight)
        if self.ndim != 4 or w.ndim != 4:
            raise ValueError(f"conv2d: input {self.shape} and weight {w.shape} must be 4-d")
        n, cin, h, wd = self.shape
        cout, cin_g, kh, kw = w.shape
        if cin != cin_g * groups or cout % groups:
            raise ValueError(f"conv2d: input channels {cin}, weight {w.shape}, groups {groups}")
        pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
        (sh, sw), (dh, dw) = pair(stride), pair(dilation)
        if isinstance(padding, int):
            pl = pr = pt = pb = padding
        elif len(padding) == 2:
            pt = pb = padding[0]
            pl = pr = padding[1]
        elif len(padding) == 4:
            pl, pr, pt, pb = padding
        else:
            raise ValueError(f"conv2d: padding {padding} is not an int, (h, w) or (l, r, t, b)")
        oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
        ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
        if oh <= 0 or ow <= 0:
            raise ValueError(f"conv2d: the kernel {w.shape} does not fit the input {self.shape}")
        x = self.pad(((0, 0), (0, 0), (pt, pb), (pl, pr)))
        views = [x[:, :, ky * dh: ky * dh + sh * (oh - 1) + 1: sh,
                   kx * dw: kx * dw + sw * (ow - 1) + 1: sw]
                 for ky in range(kh) for kx in range(kw)]
        cols = Tensor.stack(*views, dim=2)                            # (N, Cin, K, OH, OW)
        k = kh * kw
        cols = cols.reshape(n, groups, 1, cin_g * k, oh, ow)
        wg = w.reshape(groups, cout // groups, cin_g * k).reshape(1, groups, cout // groups,
                                                                    cin_g * k, 1, 1)
        out = (cols * wg).sum(3).reshape(n, cout, oh, ow)
        if bias is not None:
            b = bias if isinstance(bias, Tensor) else Tensor(bias)
            out = out + b.reshape(1, cout, 1, 1)
        return out

    # ** elementwise **

    def _operand(self, other) -> "Tensor":
        if isinstance(other, Tensor):
            return other
        if isinstance(other, np.ndarray):
            return Tensor(other)
        dtype = self.dtype
        if isinstance(other, float) and dtype.kind in "iub":
            dtype = np.dtype(np.float32)
        return Tensor._const(other, dtype)

    def cast(self, dtype) -> "Tensor":
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        return Tensor._node("CAST", dtype, (self,), None, self.shape)

    def float(self) -> "Tensor":
        return self.cast(np.float32)

    def int(self) -> "Tensor":
        return self.cast(np.int32)

    def _broadcast(self, shape, dtype) -> "Tensor":
        x = self.cast(dtype)
        if x.shape == tuple(shape):
            return x
        return x.reshape(*([1] * (len(shape) - x.ndim)), *x.shape).expand(*shape)

    def _binary(self, op: str, other, reverse=False, out_dtype=None) -> "Tensor":
        a, b = self, self._operand(other)
        if reverse:
            a, b = b, a
        if a._op == "CONST" and b._op != "CONST":
            dtype = b.dtype if not (a.dtype.kind == "f" and b.dtype.kind in "iub") else a.dtype
        elif b._op == "CONST" and a._op != "CONST":
            dtype = a.dtype if not (b.dtype.kind == "f" and a.dtype.kind in "iub") else b.dtype
        else:
            dtype = np.result_type(a.dtype, b.dtype)
        shape = np.broadcast_shapes(a.shape, b.shape)
        a, b = a._broadcast(shape, dtype), b._broadcast(shape, dtype)
        return Tensor._node(op, out_dtype or dtype, (a, b), None, shape)

    def _unary(self, op: str) -> "Tensor":
        x = self if self.dtype.kind == "f" else self.float()
        return Tensor._node(op, x.dtype, (x,), None, x.shape)

    def __add__(self, o): return self._binary("ADD", o)
    def __radd__(self, o): return self._binary("ADD", o, reverse=True)
    def __sub__(self, o): return self._binary("SUB", o)
    def __rsub__(self, o): return self._binary("SUB", o, reverse=True)
    def __mul__(self, o): return self._binary("MUL", o)
    def __rmul__(self, o): return self._binary("MUL", o, reverse=True)

    def __truediv__(self, o):
        x = self if self.dtype.kind == "f" else self.float()
        return x._binary("FDIV", o)

    def __rtruediv__(self, o):
        x = self if self.dtype.kind == "f" else self.float()
        return x._binary("FDIV", o, reverse=True)

    def __neg__(self): return Tensor._node("NEG", self.dtype, (self,), None, self.shape)

    def __pow__(self, exponent):
        if isinstance(exponent, int) and exponent >= 0:
            result, base, e = None, self, exponent
            while e:
                if e & 1:
                    result = base if result is None else result * base
                base, e = base * base, e >> 1
            return result if result is not None else Tensor.full(self.shape, 1, self.dtype)
        return (self.log() * exponent).exp()

    def __lt__(self, o): return self._binary("CMPLT", o, out_dtype=np.bool_)
    def __gt__(self, o): return self._binary("CMPLT", o, reverse=True, out_dtype=np.bool_)
    def eq(self, o): return self._binary("CMPEQ", o, out_dtype=np.bool_)
    def ne(self, o): return self._binary("CMPNE", o, out_dtype=np.bool_)

    def maximum(self, o): return self._binary("MAX", o)
    def minimum(self, o): return -((-self)._binary("MAX", -self._operand(o)))

    def where(self, x, y) -> "Tensor":
        """self (bool) ? x : y, broadcast."""
        x = x if isinstance(x, Tensor) else Tensor._const(x, _default_dtype(x))
        y = y if isinstance(y, Tensor) else Tensor._const(y, x.dtype)
        dtype = np.result_type(x.dtype, y.dtype)
        shape = np.broadcast_shapes(self.shape, x.shape, y.shape)
        return Tensor._node("WHERE", dtype, (self._broadcast(shape, np.bool_),
                                              x._broadcast(shape, dtype),
                                              y._broadcast(shape, dtype)), None, shape)

    def relu(self): return self.maximum(0)
    def exp(self): return (self._unary("NEG")._unary("NEG") * _LOG2_E)._unary("EXP2")
    def exp2(self): return self._unary("EXP2")
    def log(self): return self._unary("LOG2") * _LN_2
    def log2(self): return self._unary("LOG2")
    def sqrt(self): return self._unary("SQRT")
    def reciprocal(self): return self._unary("RECIPROCAL")
    def sin(self): return self._unary("SIN")
    def cos(self): return (math.pi / 2 - self.float()).sin()
    def abs(self): return self.maximum(-self)
    def square(self): return self * self
    def sigmoid(self): return 1.0 / (1.0 + (-self.float()).exp())
    def tanh(self): return 2.0 * (2.0 * self.float()).sigmoid() - 1.0

    # ** reductions **

    def _reduce(self, op: str, axis, keepdim: bool) -> "Tensor":
        axes = _axes(axis, self.ndim)
        kept = [1 if i in axes else s for i, s in enumerate(self.shape)]
        x = Tensor._node("REDUCE_AXIS", self.dtype, (self,), (op, list(axes)), kept) if axes \
            else self
        if keepdim:
            return x
        return x.reshape(*[s for i, s in enumerate(self.shape) if i not in axes])

    def sum(self, axis=None, keepdim=False): return self._reduce("ADD", axis, keepdim)
    def max(self, axis=None, keepdim=False): return self._reduce("MAX", axis, keepdim)
    def min(self, axis=None, keepdim=False): return -((-self).max(axis, keepdim))

    def mean(self, axis=None, keepdim=False):
        x = self if self.dtype.kind == "f" else self.float()
        count = math.prod(self.shape[a] for a in _axes(axis, self.ndim))
        return x.sum(axis, keepdim) * (1.0 / max(count, 1))

    def var(self, axis=None, keepdim=False):
        d = self.float() - self.float().mean(axis, keepdim=True)
        return (d * d).mean(axis, keepdim)

    def softmax(self, axis=-1):
        x = self.float()
        e = (x - x.max(axis, keepdim=True)).exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis=-1):
        x = self.float()
        m = x - x.max(axis, keepdim=True)
        return m - m.exp().sum(axis, keepdim=True).log()

    def argmax(self, axis=None, keepdim: bool = False) -> "Tensor":
        """Index of the first maximum (tinygrad's construction: the largest reversed index
        among the positions equal to the max). int32."""
        if axis is None:
            return self.flatten().argmax(0)
        axis = _axes(axis, self.ndim)[0]
        n = self.shape[axis]
        is_max = self.eq(self.max(axis, keepdim=True))
        rev = Tensor.arange(n, 0, -1, device=self.device)
        rev = rev.reshape(n, *([1] * (self.ndim - axis - 1)))
        idx = (is_max.cast(np.int32) * rev).max(axis, keepdim=keepdim)
        return (n - idx).cast(np.int32)

    def argmin(self, axis=None, keepdim: bool = False) -> "Tensor":
        x = self if self.dtype.kind != "b" else self.cast(np.int32)
        return (-x).argmax(axis, keepdim)

    # ** matmul **

    def matmul(self, w: "Tensor") -> "Tensor":
        w = w if isinstance(w, Tensor) else Tensor(w)
        if self.ndim == 0 or w.ndim == 0:
            raise ValueError("matmul needs at least 1-d operands")
        x = self.reshape(1, self.shape[0]) if self.ndim == 1 else self
        y = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
        if x.shape[-1] != y.shape[-2]:
            raise ValueError(f"matmul: {self.shape} @ {w.shape}")
        k, n = y.shape[-2], y.shape[-1]
        xe = x.reshape(*x.shape[:-1], 1, k)                            # (..., m, 1, k)
        ye = y.transpose(-1, -2).reshape(*y.shape[:-2], 1, n, k)       # (..., 1, n, k)
        out = (xe * ye).sum(-1)                                        # (..., m, n)
        if self.ndim == 1:
            out = out.squeeze(-2)
        if w.ndim == 1:
            out = out.squeeze(-1)
        return out

    __matmul__ = matmul
    dot = matmul

    def __rmatmul__(self, o): return Tensor(o).matmul(self)

    def __repr__(self) -> str:
        state = "realized" if self._value is not None else f"lazy {self._op}"
        return f"<kiln.Tensor {state} shape={self.shape} dtype={self.dtype.name}>"

    def __bool__(self):
        raise TypeError("the truth value of a kiln.Tensor is ambiguous; use .item() or .numpy()")

    __hash__ = object.__hash__


def stack_inputs(arrays: Iterable[np.ndarray]) -> list[Tensor]:
    return [Tensor(a) for a in arrays]
