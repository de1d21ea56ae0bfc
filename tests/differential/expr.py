"""Expressions of the differential test: the tree, its text form (what diff_eval reads) and its numpy meaning.

An expression is a tree of `E(op, kids, atoms)`: `kids` are tensor operands, `atoms` integer (or dtype, or float)
arguments, exactly as diff_eval.cc reads them: `(op kid... atom...)`. numpy evaluates each node twice:
  v32  in the expression's own dtypes (float32 stays float32): the value kiln should compute, exactly for integers
       and bools;
  v64  with every float32 computed in float64: the reference floats are checked against;
and carries `mag`, the node evaluated with every term made non-negative (a bound on the size of the terms that
rounding acts on, propagated through each op's derivative), so a float result may differ from v64 by rounding
(rtol 1e-4 of |v64| + mag) but not by a wrong index or a lost term. `exact` marks floats that float32 holds exactly
(dyadic values small enough that every op and every summation order gives the same bits); the generator applies
discrete ops (floor, comparisons, casts to int, argmax) only to exact floats, so their results are exact too.
"""
import numpy as np

FLOAT_DTYPES = {"float32"}
INT_DTYPES = {"int8", "uint8", "int16", "int32", "int64", "uint32"}
NP = {"float32": np.float32, "float64": np.float64, "int8": np.int8, "uint8": np.uint8, "int16": np.int16,
      "int32": np.int32, "int64": np.int64, "uint32": np.uint32, "bool": np.bool_}


def sum_acc(dt):
    """engine/dtype SumAccDType."""
    if dt in ("uint8", "uint32"):
        return "uint32"
    if dt in ("int8", "int16", "int32", "bool"):
        return "int32"
    return dt


class E:
    __slots__ = ("op", "kids", "atoms")

    def __init__(self, op, kids=(), atoms=()):
        self.op, self.kids, self.atoms = op, tuple(kids), tuple(str(a) for a in atoms)

    def text(self):
        parts = [self.op] + [k.text() for k in self.kids] + list(self.atoms)
        return "(" + " ".join(parts) + ")"

    def size(self):
        return 1 + sum(k.size() for k in self.kids)

    def subtrees(self):
        yield self
        for k in self.kids:
            yield from k.subtrees()

    def replace(self, old, new):
        if self is old:
            return new
        kids = tuple(k.replace(old, new) for k in self.kids)
        if all(a is b for a, b in zip(kids, self.kids)):
            return self
        return E(self.op, kids, self.atoms)


def parse(s):
    toks = s.replace("(", " ( ").replace(")", " ) ").split()
    pos = 0

    def node():
        nonlocal pos
        assert toks[pos] == "(", s
        op = toks[pos + 1]
        pos += 2
        kids, atoms = [], []
        while toks[pos] != ")":
            if toks[pos] == "(":
                kids.append(node())
            else:
                atoms.append(toks[pos])
                pos += 1
        pos += 1
        # `in` and `const` keep their atoms; everything else lists tensor operands first
        return E(op, kids, atoms)

    return node()


class V:
    """A node's value: v32 (own dtypes), v64 (float reference), mag (float term bound), exact (see module doc)."""
    __slots__ = ("v32", "v64", "mag", "exact", "dtype")

    def __init__(self, v32, v64, mag, exact, dtype):
        self.v32, self.v64, self.mag, self.exact, self.dtype = v32, v64, mag, exact, dtype

    @property
    def shape(self):
        return self.v32.shape


def _f(dt):
    return dt in FLOAT_DTYPES


def fits_exactly(v):
    """Whether every value of the float64 array v is a float32 that stays exact through add/sub/mul: a dyadic
    rational whose numerator at its own granularity fits in 24 bits."""
    v = np.asarray(v, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        return False
    if v.size == 0:
        return True
    for g in range(0, 31):
        s = v * (2.0 ** g)
        if np.all(s == np.round(s)):
            return float(np.max(np.abs(s))) < 2.0 ** 24
    return False


def _granularity(v):
    v = np.asarray(v, dtype=np.float64)
    for g in range(0, 31):
        s = v * (2.0 ** g)
        if np.all(s == np.round(s)):
            return g
    return 99


def _move(fn, x):
    return V(fn(x.v32), fn(x.v64), None if x.mag is None else fn(x.mag), x.exact, x.dtype)


def _slices(atoms):
    out = []
    for i in range(0, len(atoms), 3):
        a = [None if t == "n" else int(t) for t in atoms[i:i + 3]]
        out.append(slice(a[0], a[1], a[2]))
    return tuple(out)


UNARY_FLOAT = {"exp", "log", "sqrt", "sin", "cos", "sigmoid", "tanh", "recip"}
EXACT_UNARY = {"neg", "abs", "relu", "square", "floor", "ceil", "trunc", "round", "contig"}
COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
           "ne": np.not_equal}
BITWISE = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def _unary_float(op, x):
    f = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
         "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "recip": lambda a: 1 / a}[op]
    with np.errstate(all="ignore"):
        return f(x)


def _unary_mag(op, x, v64):
    a, m = np.abs(x.v64), x.mag
    av = np.abs(v64)
    with np.errstate(all="ignore"):
        if op == "exp":
            return av * (1 + m)
        if op == "log":
            return av + m / a
        if op == "sqrt":
            return av + m / (2 * np.sqrt(a))
        if op in ("sin", "cos"):
            return 1 + m
        if op in ("sigmoid", "tanh"):
            return av + m
        if op == "recip":
            return av + m / (a * a)
    raise AssertionError(op)


def _windows(x, kernel, stride, pads, dil, fill):
    """(N, C, H, W) -> (N, C, OH, OW, KH, KW): every output's window, the padding filled with `fill`."""
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])), constant_values=fill)
    oh = (xp.shape[2] - dil[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dil[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    taps = [[xp[:, :, ky * dil[0]:ky * dil[0] + stride[0] * (oh - 1) + 1:stride[0],
                kx * dil[1]:kx * dil[1] + stride[1] * (ow - 1) + 1:stride[1]] for kx in range(kernel[1])]
            for ky in range(kernel[0])]
    return np.stack([np.stack(row, -1) for row in taps], -2)


def _conv(x, w, stride, pads, dil, groups):
    """Conv2d as its definition: out[n, o, y, x] = sum over c, ky, kx of the window times w, group by group."""
    win = _windows(x, w.shape[2:], stride, pads, dil, 0)  # (N, Ci, OH, OW, KH, KW)
    cg, og = w.shape[1], w.shape[0] // groups
    outs = [np.einsum("nchwyx,ocyx->nohw", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]) for g in range(groups)]
    return np.concatenate(outs, 1)


def _pool(x, kernel, stride, pads, dil, kind, count_include_pad=True):
    if kind == "max":
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return _windows(x, kernel, stride, pads, dil, fill).max(axis=(-2, -1))
    s = _windows(x, kernel, stride, pads, dil, 0).sum(axis=(-2, -1))
    if count_include_pad:
        return s / (kernel[0] * kernel[1])
    ones = np.ones((1, 1) + x.shape[2:], dtype=np.float64)
    return s / _windows(ones, kernel, stride, pads, dil, 0).sum(axis=(-2, -1))


def evaluator(inputs):
    """A function node -> V over `inputs` that evaluates each node once."""
    memo = {}

    def ev(n):
        key = id(n)
        if key not in memo:
            memo[key] = _eval(n, ev, inputs)
        return memo[key]

    return ev


def evaluate(e, inputs):
    """Evaluates tree `e` over `inputs` (list of (dtype, np array in that dtype, exact flag)). Returns V."""
    return evaluator(inputs)(e)


def _eval(n, ev, inputs):
    op, at = n.op, n.atoms
    if op == "in":
        dt, arr, exact = inputs[int(at[0])]
        if _f(dt):
            return V(arr, arr.astype(np.float64), np.abs(arr.astype(np.float64)), exact, dt)
        return V(arr, arr, None, True, dt)
    if op == "const":
        dt = at[0]
        if _f(dt):
            v = np.asarray(float(at[1]), dtype=np.float32)
            return V(v, v.astype(np.float64), np.abs(v.astype(np.float64)), fits_exactly(v), dt)
        v = np.asarray(int(at[1]) if dt != "bool" else at[1] != "0", dtype=NP[dt])
        return V(v, v, None, True, dt)
    if op == "vjp":
        grads = vjp(n.kids[0], inputs, ev(n.kids[1]).v64, [int(a) for a in at])
        g64 = np.concatenate([g.reshape(-1) for g, _ in grads])
        gm = np.concatenate([m.reshape(-1) for _, m in grads])
        return V(g64.astype(np.float32), g64, gm, False, "float32")
    xs = [ev(k) for k in n.kids]
    x = xs[0] if xs else None
    if op in UNARY_FLOAT:
        v32 = _unary_float(op, x.v32).astype(np.float32)
        v64 = _unary_float(op, x.v64)
        return V(v32, v64, _unary_mag(op, x, v64), False, "float32")
    if op in EXACT_UNARY:
        if op == "contig":
            return x
        f = {"neg": np.negative, "abs": np.abs, "relu": lambda a: np.maximum(a, np.zeros((), a.dtype)),
             "square": lambda a: a * a, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
             "round": np.round}[op]
        with np.errstate(all="ignore"):
            v32, v64 = f(x.v32), f(x.v64)
        if not _f(x.dtype):
            return V(v32, v64, None, True, x.dtype)
        mag = x.mag * x.mag if op == "square" else x.mag
        return V(v32, v64, mag, x.exact and fits_exactly(v64), x.dtype)
    if op == "lnot":
        return V(np.logical_not(x.v32), np.logical_not(x.v64), None, True, "bool")
    if op == "bnot":
        return V(np.invert(x.v32), np.invert(x.v64), None, True, x.dtype)
    if op in ("add", "sub", "mul", "div", "max2", "min2"):
        a, b = xs
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max2": np.maximum,
             "min2": np.minimum}[op]
        with np.errstate(all="ignore"):
            v32, v64 = f(a.v32, b.v32), f(a.v64, b.v64)
        if not _f(a.dtype):
            return V(v32, v64, None, True, a.dtype)
        if op in ("add", "sub"):
            mag = a.mag + b.mag
        elif op == "mul":
            mag = a.mag * b.mag
        elif op == "div":
            with np.errstate(all="ignore"):
                mag = a.mag / np.abs(b.v64) * (1 + b.mag / np.abs(b.v64))
        else:
            mag = np.maximum(a.mag, b.mag)
        exact = a.exact and b.exact and op != "div" and fits_exactly(v64)
        return V(v32.astype(np.float32), v64, mag, exact, a.dtype)
    if op in ("idiv", "mod"):
        a, b = xs
        f = np.floor_divide if op == "idiv" else np.mod
        return V(f(a.v32, b.v32), f(a.v64, b.v64), None, True, a.dtype)
    if op in COMPARE:
        a, b = xs
        return V(COMPARE[op](a.v32, b.v32), COMPARE[op](a.v64, b.v64), None, True, "bool")
    if op in BITWISE:
        a, b = xs
        return V(BITWISE[op](a.v32, b.v32), BITWISE[op](a.v64, b.v64), None, True, a.dtype)
    if op in ("land", "lor"):
        a, b = xs
        f = np.logical_and if op == "land" else np.logical_or
        return V(f(a.v32, b.v32), f(a.v64, b.v64), None, True, "bool")
    if op == "where":
        c, a, b = xs
        mag = None if a.mag is None else np.where(c.v32, a.mag, b.mag)
        v64 = np.where(c.v64, a.v64, b.v64)
        return V(np.where(c.v32, a.v32, b.v32), v64, mag, a.exact and b.exact, a.dtype)
    if op == "multi":  # realized together, flattened and concatenated (same dtype)
        cat = lambda arrs: np.concatenate([np.asarray(x).reshape(-1) for x in arrs])
        mag = None if xs[0].mag is None else cat([x.mag for x in xs])
        return V(cat([x.v32 for x in xs]), cat([x.v64 for x in xs]), mag, all(x.exact for x in xs), xs[0].dtype)
    if op == "matmul":
        a, b = xs
        v64 = np.matmul(a.v64, b.v64)
        mag = np.matmul(a.mag, b.mag)
        exact = a.exact and b.exact and fits_exactly(mag * 2.0 ** (_granularity(a.v64) + _granularity(b.v64)))
        return V(np.matmul(a.v32, b.v32), v64, mag, exact, "float32")
    if op == "cast":
        dt = at[0]
        if _f(dt):
            v32 = x.v32.astype(np.float32)
            v64 = x.v64.astype(np.float64)
            exact = x.exact if _f(x.dtype) else bool(np.all(np.abs(v64) < 2 ** 24))
            return V(v32, v64, np.abs(v64) if x.mag is None else x.mag, exact, dt)
        with np.errstate(all="ignore"):
            v32 = x.v32.astype(NP[dt])
            v64 = x.v64.astype(NP[dt])
        return V(v32, v64, None, True, dt)
    if op in ("sum", "rmax", "rmin", "mean", "var", "any", "all"):
        keep, axes = int(at[0]) != 0, tuple(int(a) for a in at[1:])
        if op in ("any", "all"):
            f = np.any if op == "any" else np.all
            return V(f(x.v32, axis=axes, keepdims=keep), f(x.v64, axis=axes, keepdims=keep), None, True, "bool")
        if op in ("rmax", "rmin"):
            f = np.max if op == "rmax" else np.min
            mag = None if x.mag is None else np.max(x.mag, axis=axes, keepdims=keep)
            return V(f(x.v32, axis=axes, keepdims=keep), f(x.v64, axis=axes, keepdims=keep), mag, x.exact, x.dtype)
        count = int(np.prod([x.shape[a] for a in axes]))
        if op == "sum":
            acc = sum_acc(x.dtype)
            # dtype=: numpy sums small integers in the platform's (u)int64; kiln (and tinygrad) in SumAccDType.
            v32 = np.sum(x.v32.astype(NP[acc]), axis=axes, keepdims=keep, dtype=NP[acc])
            if not _f(acc):
                return V(v32, v32, None, True, acc)
            v64 = np.sum(x.v64, axis=axes, keepdims=keep)
            mag = np.sum(x.mag, axis=axes, keepdims=keep)
            exact = x.exact and fits_exactly(mag * 2.0 ** _granularity(x.v64))
            return V(v32, v64, mag, exact, acc)
        if op == "mean":
            if _f(x.dtype):
                v32 = (np.sum(x.v32, axis=axes, keepdims=keep) / np.float32(count)).astype(np.float32)
                v64 = np.sum(x.v64, axis=axes, keepdims=keep) / count
                mag = np.sum(x.mag, axis=axes, keepdims=keep) / count
            else:
                acc = NP[sum_acc(x.dtype)]
                s = np.sum(x.v32.astype(acc), axis=axes, keepdims=keep, dtype=acc)
                v32 = (s.astype(np.float32) / np.float32(count)).astype(np.float32)
                v64 = s.astype(np.float64) / count
                mag = np.sum(np.abs(x.v32.astype(np.float64)), axis=axes, keepdims=keep) / count
            return V(v32, v64, mag, False, "float32")
        # var, correction 1: sum((x - mean)^2) / (n - 1)
        m32 = np.mean(x.v32, axis=axes, keepdims=True, dtype=np.float32)
        m64 = np.mean(x.v64, axis=axes, keepdims=True)
        d = max(count - 1, 0)
        with np.errstate(all="ignore"):
            v32 = (np.sum((x.v32 - m32) ** 2, axis=axes, keepdims=keep) / np.float32(d)).astype(np.float32)
            v64 = np.sum((x.v64 - m64) ** 2, axis=axes, keepdims=keep) / d
            mm = np.mean(x.mag, axis=axes, keepdims=True)
            mag = np.sum((x.mag + mm) ** 2, axis=axes, keepdims=keep) / d
        return V(v32, v64, mag, False, "float32")
    if op in ("argmax", "argmin"):
        axis, keep = int(at[0]), int(at[1]) != 0
        f = np.argmax if op == "argmax" else np.argmin
        v = f(x.v32, axis=axis, keepdims=keep).astype(np.int32)
        return V(v, v, None, True, "int32")
    if op == "conv":
        a = [int(t) for t in at]
        stride, pads, dil, groups = a[0:2], a[2:6], a[6:8], a[8]
        w, b = xs[1], (xs[2] if len(xs) > 2 else None)
        conv = lambda p, q: _conv(p, q, stride, pads, dil, groups)
        v32, v64, mag = conv(x.v32, w.v32).astype(np.float32), conv(x.v64, w.v64), conv(x.mag, w.mag)
        if b is not None:
            col = lambda t: t.reshape(1, -1, 1, 1)
            v32, v64, mag = (v32 + col(b.v32)).astype(np.float32), v64 + col(b.v64), mag + col(b.mag)
        return V(v32, v64, mag, False, "float32")
    if op in ("maxpool", "avgpool"):
        a = [int(t) for t in at]
        kernel, stride, pads = a[0:2], a[2:4], a[4:8]
        if op == "maxpool":
            f = lambda t: _pool(t, kernel, stride, pads, a[8:10], "max")
            return V(f(x.v32), f(x.v64), None if x.mag is None else f(x.mag), x.exact, x.dtype)
        f = lambda t: _pool(t, kernel, stride, pads, (1, 1), "avg", a[8] != 0)
        return V(f(x.v32).astype(np.float32), f(x.v64), f(x.mag), False, "float32")
    # movement
    ints = [int(a) for a in at] if op != "slice" else None
    if op == "reshape":
        return _move(lambda a: a.reshape(ints), x)
    if op == "permute":
        return _move(lambda a: np.transpose(a, ints), x)
    if op == "expand":
        return _move(lambda a: np.broadcast_to(a, ints), x)
    if op == "pad":
        pairs = [(ints[i], ints[i + 1]) for i in range(0, len(ints), 2)]
        return _move(lambda a: np.pad(a, pairs), x)
    if op == "shrink":
        sl = tuple(slice(ints[i], ints[i + 1]) for i in range(0, len(ints), 2))
        return _move(lambda a: a[sl], x)
    if op == "flip":
        return _move(lambda a: np.flip(a, axis=tuple(ints)) if ints else a, x)
    if op == "slice":
        sl = _slices(at)
        return _move(lambda a: a[sl], x)
    raise ValueError(f"unknown op {op}")


def format_values(dt, arr):
    arr = np.asarray(arr).reshape(-1)
    if dt == "bool":
        return " ".join("1" if v else "0" for v in arr)
    if _f(dt):
        return " ".join(repr(float(v)) for v in arr.astype(np.float32))
    return " ".join(str(int(v)) for v in arr)


def case_text(name, inputs, e):
    """The diff_eval input for one case. inputs: list of (dtype, array, exact)."""
    lines = [f"case {name}"]
    for dt, arr, _ in inputs:
        lines.append(f"input {dt} {arr.ndim} " + " ".join(str(d) for d in arr.shape))
        lines.append(format_values(dt, arr))
    lines.append("expr " + e.text())
    lines.append("end")
    return "\n".join(lines) + "\n"


def parse_cases(text):
    """Inverse of case_text over a file of several cases: [(name, inputs, tree)] (exact flags recomputed)."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line.startswith("case "):
            continue
        name, inputs, tree = line[5:], [], None
        while i < len(lines):
            line = lines[i].strip()
            i += 1
            if line.startswith("input "):
                f = line.split()
                dt, nd = f[1], int(f[2])
                shape = tuple(int(d) for d in f[3:3 + nd])
                vals = lines[i].split()
                i += 1
                if _f(dt):
                    arr = np.array([float(v) for v in vals], dtype=np.float32).reshape(shape)
                    exact = fits_exactly(arr.astype(np.float64))
                else:
                    arr = np.array([int(v) for v in vals], dtype=np.int64).astype(NP[dt]).reshape(shape)
                    exact = True
                inputs.append((dt, arr, exact))
            elif line.startswith("expr "):
                tree = parse(line[5:])
            elif line == "end":
                break
        out.append((name, inputs, tree))
    return out


# ---- gradients: (vjp Y C K...) ----
#
# d sum(Y * C) / d input K for each listed K (C: a cotangent input of Y's shape), flattened and concatenated, as
# Tensor::Gradient computes it. The reference is reverse mode over the same tree in float64 (g64), with `gm`, the same
# pass over every quantity's magnitude bound (|C|, the operands' `mag`, |local derivative| widened by the operand's
# own rounding), so kiln's gradient may differ from g64 by 1e-4 * (|g64| + gm) and no more. Where the function has no
# derivative the conventions are tinygrad's (and kiln's): relu'(0) = abs'(0) = 0, ties of max/min split the gradient
# evenly; `kinks` rejects cases that come within rounding of such a point without reaching it exactly, where float32
# and float64 could take different sides.

NEAR = 1e-5


def _unbroadcast(g, shape):
    g = np.asarray(g)
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape) if axes else g.reshape(shape)


def _nodes(e):
    """The distinct nodes under e (by identity), children before parents."""
    order, seen = [], set()

    def visit(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        for k in n.kids:
            visit(k)
        order.append(n)

    visit(e)
    return order


def _near_tie(a, b, mag):
    d = np.abs(a - b)
    return bool(np.any((d > 0) & (d <= NEAR * mag)))


def kinks(e, inputs):
    """True when some node sits within rounding of a point where it has no derivative (see above)."""
    ev = evaluator(inputs)
    for n in _nodes(e):
        if n.op in ("relu", "abs"):
            x = ev(n.kids[0])
            if x.mag is not None and _near_tie(x.v64, 0.0, x.mag):
                return True
        elif n.op in ("max2", "min2"):
            a, b = ev(n.kids[0]), ev(n.kids[1])
            if a.mag is not None and _near_tie(a.v64, b.v64, a.mag + b.mag):
                return True
        elif n.op in ("rmax", "rmin", "maxpool"):
            x, out = ev(n.kids[0]), ev(n)
            if x.mag is None:
                continue
            if n.op == "maxpool":
                at = [int(t) for t in n.atoms]
                w = _windows(x.v64, at[0:2], at[2:4], at[4:8], at[8:10], -np.inf)
                wm = _windows(x.mag, at[0:2], at[2:4], at[4:8], at[8:10], 0)
                if _near_tie(w, out.v64[..., None, None], wm + out.mag[..., None, None]):
                    return True
                continue
            keep, axes = int(n.atoms[0]) != 0, tuple(int(a) for a in n.atoms[1:])
            r = np.max(x.v64, axis=axes, keepdims=True) if n.op == "rmax" else np.min(x.v64, axis=axes, keepdims=True)
            if _near_tie(x.v64, r, x.mag + np.max(x.mag, axis=axes, keepdims=True)):
                return True
    return False


def _scatter_windows(gw, x_shape, kernel, stride, pads, dil):
    """Adjoint of _windows: (N, C, OH, OW, KH, KW) back onto (N, C, H, W), summing where windows overlap."""
    n, c, h, w = x_shape
    out = np.zeros((n, c, h + pads[0] + pads[1], w + pads[2] + pads[3]))
    oh, ow = gw.shape[2], gw.shape[3]
    for ky in range(kernel[0]):
        for kx in range(kernel[1]):
            out[:, :, ky * dil[0]:ky * dil[0] + stride[0] * (oh - 1) + 1:stride[0],
                kx * dil[1]:kx * dil[1] + stride[1] * (ow - 1) + 1:stride[1]] += gw[..., ky, kx]
    return out[:, :, pads[0]:pads[0] + h, pads[2]:pads[2] + w]


def _conv_vjp(g, x, w, stride, pads, dil, groups):
    """(dx, dw) of _conv for the output gradient g."""
    kernel = w.shape[2:]
    win = _windows(x, kernel, stride, pads, dil, 0)
    cg, og = w.shape[1], w.shape[0] // groups
    gx, gw = [], []
    for i in range(groups):
        gi, wi = g[:, i * og:(i + 1) * og], w[i * og:(i + 1) * og]
        gw.append(np.einsum("nohw,nchwyx->ocyx", gi, win[:, i * cg:(i + 1) * cg]))
        gx.append(np.einsum("nohw,ocyx->nchwyx", gi, wi))
    return _scatter_windows(np.concatenate(gx, 1), x.shape, kernel, stride, pads, dil), np.concatenate(gw, 0)


def _local_vjp(n, xs, out, g, gm):
    """[(g, gm) per kid] of node n (kid values xs, own value out) for its output gradient g and bound gm; None for a
    kid that takes no gradient."""
    op, at = n.op, n.atoms
    x = xs[0] if xs else None
    with np.errstate(all="ignore"):
        if op in ("floor", "ceil", "trunc", "round"):  # piecewise constant
            return [(np.zeros(x.shape), np.zeros(x.shape))]
        if op in ("contig", "neg"):
            return [(-g, gm) if op == "neg" else (g, gm)]
        if op in ("relu", "abs"):
            d = (x.v64 > 0).astype(np.float64) if op == "relu" else np.sign(x.v64)
            return [(g * d, gm * np.abs(d))]
        a64, am = (x.v64, x.mag) if x is not None and x.mag is not None else (None, None)
        if op == "square":
            return [(2 * a64 * g, 2 * am * gm)]
        if op == "exp":
            return [(g * out.v64, gm * out.mag)]
        if op == "log":
            return [(g / a64, gm / np.abs(a64) * (1 + am / np.abs(a64)))]
        if op == "sqrt":
            return [(g / (2 * out.v64), gm / (2 * out.v64) * (1 + am / np.abs(a64)))]
        if op == "sin":
            return [(g * np.cos(a64), gm * (1 + am))]
        if op == "cos":
            return [(-g * np.sin(a64), gm * (1 + am))]
        if op == "sigmoid":
            s = out.v64
            return [(g * s * (1 - s), gm * (s * (1 - s) + 0.1 * am))]
        if op == "tanh":
            t = out.v64
            return [(g * (1 - t * t), gm * (1 - t * t + am))]
        if op == "recip":
            return [(-g / (a64 * a64), gm / (a64 * a64) * (1 + 2 * am / np.abs(a64)))]
        if op in ("add", "sub"):
            a, b = xs
            sb = -1.0 if op == "sub" else 1.0
            return [(_unbroadcast(g, a.shape), _unbroadcast(gm, a.shape)),
                    (_unbroadcast(sb * g, b.shape), _unbroadcast(gm, b.shape))]
        if op == "mul":
            a, b = xs
            return [(_unbroadcast(g * b.v64, a.shape), _unbroadcast(gm * b.mag, a.shape)),
                    (_unbroadcast(g * a.v64, b.shape), _unbroadcast(gm * a.mag, b.shape))]
        if op == "div":
            a, b = xs
            ab = np.abs(b.v64)
            return [(_unbroadcast(g / b.v64, a.shape), _unbroadcast(gm / ab * (1 + b.mag / ab), a.shape)),
                    (_unbroadcast(-g * a.v64 / (b.v64 * b.v64), b.shape),
                     _unbroadcast(gm * a.mag / (ab * ab) * (1 + 2 * b.mag / ab), b.shape))]
        if op in ("max2", "min2"):
            a, b = xs
            win = (a.v64 > b.v64) if op == "max2" else (a.v64 < b.v64)
            da = np.where(a.v64 == b.v64, 0.5, win.astype(np.float64))
            return [(_unbroadcast(g * da, a.shape), _unbroadcast(gm * da, a.shape)),
                    (_unbroadcast(g * (1 - da), b.shape), _unbroadcast(gm * (1 - da), b.shape))]
        if op == "where":
            c, a, b = xs
            cv = np.broadcast_to(c.v64, np.broadcast(c.v64, a.v64, b.v64).shape).astype(bool)
            return [None, (_unbroadcast(np.where(cv, g, 0), a.shape), _unbroadcast(np.where(cv, gm, 0), a.shape)),
                    (_unbroadcast(np.where(cv, 0, g), b.shape), _unbroadcast(np.where(cv, 0, gm), b.shape))]
        if op == "matmul":
            a, b = xs
            t = lambda m: np.swapaxes(m, -1, -2)
            return [(_unbroadcast(g @ t(b.v64), a.shape), _unbroadcast(gm @ t(b.mag), a.shape)),
                    (_unbroadcast(t(a.v64) @ g, b.shape), _unbroadcast(t(a.mag) @ gm, b.shape))]
        if op == "cast":
            return [(g, gm) if _f(x.dtype) else None]
        if op == "multi":
            res, pos = [], 0
            for k in xs:
                size = int(np.prod(k.shape))
                res.append((g[pos:pos + size].reshape(k.shape), gm[pos:pos + size].reshape(k.shape)))
                pos += size
            return res
        if op in ("sum", "mean", "var", "rmax", "rmin"):
            keep, axes = int(at[0]) != 0, tuple(int(a) for a in at[1:])
            if not keep:
                g, gm = np.expand_dims(g, axes), np.expand_dims(gm, axes)
            count = int(np.prod([x.shape[a] for a in axes]))
            if op in ("sum", "mean"):
                s = 1.0 if op == "sum" else 1.0 / count
                return [(np.broadcast_to(g * s, x.shape), np.broadcast_to(gm * s, x.shape))]
            if op == "var":
                dev = x.v64 - np.mean(x.v64, axis=axes, keepdims=True)
                devm = x.mag + np.mean(x.mag, axis=axes, keepdims=True)
                return [(2 * dev / (count - 1) * g, 2 * devm / (count - 1) * gm)]
            r = np.max(x.v64, axis=axes, keepdims=True) if op == "rmax" else np.min(x.v64, axis=axes, keepdims=True)
            hit = (x.v64 == r).astype(np.float64)
            share = hit / np.sum(hit, axis=axes, keepdims=True)
            return [(share * g, share * gm)]
        if op == "conv":
            a = [int(t) for t in at]
            stride, pads, dil, groups = a[0:2], a[2:6], a[6:8], a[8]
            w = xs[1]
            gx, gw = _conv_vjp(g, x.v64, w.v64, stride, pads, dil, groups)
            mx, mw = _conv_vjp(gm, x.mag, w.mag, stride, pads, dil, groups)
            res = [(gx, mx), (gw, mw)]
            if len(xs) > 2:
                res.append((g.sum(axis=(0, 2, 3)), gm.sum(axis=(0, 2, 3))))
            return res
        if op in ("maxpool", "avgpool"):
            a = [int(t) for t in at]
            kernel, stride, pads = a[0:2], a[2:4], a[4:8]
            if op == "maxpool":
                dil = a[8:10]
                win = _windows(x.v64, kernel, stride, pads, dil, -np.inf)
                hit = (win == out.v64[..., None, None]).astype(np.float64)
                share = hit / hit.sum(axis=(-2, -1), keepdims=True)
                back = lambda t: _scatter_windows(share * t[..., None, None], x.shape, kernel, stride, pads, dil)
                return [(back(g), back(gm))]
            if a[8]:
                count = np.full(out.shape[2:], float(kernel[0] * kernel[1]))
            else:
                ones = np.ones((1, 1) + x.shape[2:])
                count = _windows(ones, kernel, stride, pads, (1, 1), 0).sum(axis=(-2, -1))[0, 0]
            back = lambda t: _scatter_windows(np.broadcast_to((t / count)[..., None, None], t.shape + tuple(kernel)),
                                              x.shape, kernel, stride, pads, (1, 1))
            return [(back(g), back(gm))]
        # movement
        if op == "reshape":
            return [(g.reshape(x.shape), gm.reshape(x.shape))]
        if op == "permute":
            inv = np.argsort([int(t) for t in at])
            return [(np.transpose(g, inv), np.transpose(gm, inv))]
        if op == "expand":
            return [(_unbroadcast(g, x.shape), _unbroadcast(gm, x.shape))]
        if op == "pad":
            ints = [int(t) for t in at]
            sl = tuple(slice(ints[i], ints[i] + x.shape[i // 2]) for i in range(0, len(ints), 2))
            return [(g[sl], gm[sl])]
        if op in ("shrink", "slice"):
            if op == "shrink":
                ints = [int(t) for t in at]
                sl = tuple(slice(ints[i], ints[i + 1]) for i in range(0, len(ints), 2))
            else:
                sl = _slices(at)
            res = []
            for t in (g, gm):
                z = np.zeros(x.shape)
                z[sl] = t
                res.append(z)
            return [tuple(res)]
        if op == "flip":
            ints = tuple(int(t) for t in at)
            return [(np.flip(g, axis=ints), np.flip(gm, axis=ints)) if ints else (g, gm)]
    raise ValueError(f"no gradient for {op}")


def vjp(e, inputs, cot, wrt):
    """[(g64, gm)] of d sum(e * cot) / d inputs[k] for each k in wrt (see the section's comment)."""
    ev = evaluator(inputs)
    order = _nodes(e)
    for n in order:
        ev(n)
    out = ev(e)
    grads = {id(e): (np.broadcast_to(np.asarray(cot, dtype=np.float64), out.shape).copy(),
                     np.abs(np.broadcast_to(np.asarray(cot, dtype=np.float64), out.shape)))}
    acc = {k: (np.zeros(inputs[k][1].shape), np.zeros(inputs[k][1].shape)) for k in wrt}
    for n in reversed(order):
        if id(n) not in grads:
            continue
        g, gm = grads.pop(id(n))
        if n.op == "in":
            k = int(n.atoms[0])
            if k in acc:
                acc[k] = (acc[k][0] + g, acc[k][1] + gm)
            continue
        if n.op == "const" or not _f(ev(n).dtype):
            continue
        parts = _local_vjp(n, [ev(k) for k in n.kids], ev(n), np.asarray(g, np.float64), np.asarray(gm, np.float64))
        for kid, part in zip(n.kids, parts):
            if part is None or not _f(ev(kid).dtype):
                continue
            pg, pm = np.asarray(part[0], np.float64), np.asarray(part[1], np.float64)
            if id(kid) in grads:
                og, om = grads[id(kid)]
                grads[id(kid)] = (og + pg, om + pm)
            else:
                grads[id(kid)] = (pg, pm)
    return [acc[k] for k in wrt]
