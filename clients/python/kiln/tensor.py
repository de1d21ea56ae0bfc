"""kiln.Tensor: a lazy tensor with tinygrad's (and numpy's) common surface that realizes on kilnd.

Operations only record a graph; `.numpy()`, `.item()`, `.tolist()` or `.realize()` encode the
graph as a kiln.v1.Graph (nodes in topological order, tinygrad op names: INPUT, CONST, ADD, MUL,
SUB, FDIV, MAX, CMPLT, WHERE, EXP2, LOG2, SQRT, RESHAPE, PERMUTE, EXPAND, PAD, SHRINK,
REDUCE_AXIS, CAST, ...), send it through kiln.v1.Engine/Execute with the numpy data of its
leaves as inputs, and keep the result; a realized tensor is an input of later graphs.

Shapes and dtypes are computed here as numpy would (broadcasting, promotion with Python scalars
taking the tensor's dtype); the server checks them again. Defaults follow tinygrad: Python
floats are float32, Python ints int32. Not thread-safe (like tinygrad's Tensor)."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from kiln.client import Client, default_client
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

    __slots__ = ("_op", "_src", "_arg", "shape", "dtype", "_value")

    def __init__(self, data, dtype=None):
        if isinstance(data, Tensor):
            data = data.numpy()
        arr = _as_array(data, dtype)
        self._op, self._src, self._arg = "INPUT", (), None
        self.shape: tuple[int, ...] = tuple(int(d) for d in arr.shape)
        self.dtype: np.dtype = arr.dtype
        self._value: np.ndarray | None = arr

    @classmethod
    def _node(cls, op: str, dtype, src: Sequence["Tensor"], arg, shape) -> "Tensor":
        t = cls.__new__(cls)
        t._op, t._src, t._arg = op, tuple(src), arg
        t.shape = tuple(int(d) for d in shape)
        t.dtype = np.dtype(dtype)
        t._value = None
        return t

    # ** creation **

    @staticmethod
    def full(shape, value, dtype=None) -> "Tensor":
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype) if dtype is not None else _default_dtype(value)
        return Tensor._const(value, dtype).reshape(*([1] * len(shape))).expand(*shape) \
            if shape else Tensor._const(value, dtype)

    @staticmethod
    def zeros(*shape, dtype=None) -> "Tensor":
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return Tensor.full(shape, 0.0, dtype or np.float32)

    @staticmethod
    def ones(*shape, dtype=None) -> "Tensor":
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return Tensor.full(shape, 1.0, dtype or np.float32)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None) -> "Tensor":
        if stop is None:
            start, stop = 0, start
        return Tensor(np.arange(start, stop, step), dtype)

    @staticmethod
    def _const(value, dtype) -> "Tensor":
        return Tensor._node("CONST", dtype, (), np.dtype(dtype).type(value).item(), ())

    # ** realization **

    def realize(self, client: Client | None = None) -> "Tensor":
        if self._value is None:
            graph, feeds = self._graph()
            outputs, _ = (client or default_client()).execute(graph, feeds)
            value = outputs["out"]
            self._value = value.reshape(self.shape).astype(self.dtype, copy=False)
            self._op, self._src, self._arg = "INPUT", (), None
        return self

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

    def __getitem__(self, index) -> "Tensor":
        """Integers and slices with step 1 (shrink + reshape)."""
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > self.ndim:
            raise IndexError(f"{len(index)} indices for {self.ndim} dims")
        bounds, keep = [], []
        for i, s in enumerate(self.shape):
            idx = index[i] if i < len(index) else slice(None)
            if isinstance(idx, int):
                if not -s <= idx < s:
                    raise IndexError(f"index {idx} out of range for size {s}")
                idx %= s
                bounds.append((idx, idx + 1))
            elif isinstance(idx, slice) and idx.step in (None, 1):
                b, e, _ = idx.indices(s)
                bounds.append((b, max(b, e)))
                keep.append(i)
            else:
                raise IndexError(f"unsupported index {idx!r}")
        x = self.shrink(bounds)
        return x.reshape(*[x.shape[i] for i in keep])

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
