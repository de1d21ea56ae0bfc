"""Seeded generator of random Tensor expressions for the differential test (see expr.py for their meaning).

generate(seed) builds one case bottom-up from a few inputs: each step picks an op family (elementwise, reduction,
movement, matmul, cast, and "twice": one view combined with a moved copy of itself, the class of issue #17), picks
operands from the nodes built so far, and keeps the new node only if numpy says it is well defined (no overflow, no
division by values near 0, discrete ops only on exact floats, at most MAX_NUMEL elements). The last node is the
case's expression. The same seed gives the same case.
"""
import numpy as np

from expr import E, V, _eval, fits_exactly, kinks, FLOAT_DTYPES, INT_DTYPES, NP

MAX_NUMEL = 4096
BLOCK_NUMEL = 16384  # model-shaped blocks (Gen.block): an attention head set at sequence 64 needs 8192 scores
DTYPE_WEIGHTS = [("float32", 0.55), ("int32", 0.15), ("int8", 0.06), ("uint8", 0.06), ("int64", 0.06),
                 ("int16", 0.04), ("bool", 0.08)]
INT_RANGES = {"int8": (-10, 10), "uint8": (0, 20), "int16": (-100, 100), "int32": (-1000, 1000),
              "int64": (-1000, 1000), "uint32": (0, 1000)}
INT_LIMITS = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-2 ** 15, 2 ** 15 - 1),
              "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 40, 2 ** 40), "uint32": (0, 2 ** 32 - 1)}


class Gen:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.inputs = []   # (dtype, array, exact)
        self.pool = []     # (E, V)
        self.vals = {}     # id(E) -> (E, V); holding E keeps its id from being reused by a later node
        self.grad = False  # a gradient case (generate_grad): float32 inputs, drawn from a continuous distribution

    # ---- helpers ----
    def r(self, n):
        return int(self.rng.integers(n))

    def chance(self, p):
        return float(self.rng.random()) < p

    def choice(self, seq):
        return seq[self.r(len(seq))]

    def dtype(self):
        if self.grad:
            return "float32"
        names, w = zip(*DTYPE_WEIGHTS)
        return names[int(self.rng.choice(len(names), p=np.array(w) / sum(w)))]

    def shape(self, big=False):
        if self.chance(0.2):  # medium 2-D/3-D: large enough for the codegen heuristics' tiles, lanes and threads
            dims = [self.choice([16, 24, 31, 32, 33, 48, 64, 65]) for _ in range(2)]
            if self.chance(0.4):
                dims.insert(self.r(3), self.choice([2, 3, 4]))
            nd = len(dims)
        else:
            nd = self.choice([0, 1, 1, 2, 2, 2, 3, 3, 4])
            dims = [self.choice([1, 2, 3, 4, 5, 6, 7, 8]) for _ in range(nd)]
        if big and nd > 0:
            dims[self.r(nd)] = self.choice([16, 33, 64, 100, 257, 1000, 1024])
        while int(np.prod(dims)) > MAX_NUMEL:
            dims[int(np.argmax(dims))] //= 2
        return tuple(dims)

    def add_input(self, shape, dt=None):
        dt = dt or self.dtype()
        if dt in FLOAT_DTYPES:
            if self.chance(0.5) and not self.grad:
                arr = (self.rng.integers(-40, 41, size=shape) / 8.0).astype(np.float32)
            else:
                arr = self.rng.normal(0, 2, size=shape).astype(np.float32)
            exact = fits_exactly(arr.astype(np.float64))
        elif dt == "bool":
            arr = self.rng.random(size=shape) < 0.5
            exact = True
        else:
            lo, hi = INT_RANGES[dt]
            arr = self.rng.integers(lo, hi + 1, size=shape).astype(NP[dt])
            exact = True
        self.inputs.append((dt, np.asarray(arr), exact))
        e = E("in", (), (len(self.inputs) - 1,))
        return self.keep(e)

    def value(self, e):
        if id(e) not in self.vals:
            self.vals[id(e)] = (e, _eval(e, self.value, self.inputs))
        return self.vals[id(e)][1]

    def keep(self, e):
        v = self.value(e)
        self.pool.append((e, v))
        return e, v

    def ok(self, e):
        """Builds e's value; None if the node is not well defined (see module doc)."""
        try:
            with np.errstate(all="raise"):
                v = self.value(e)
        except (FloatingPointError, ValueError, ZeroDivisionError, OverflowError, IndexError):
            self.vals.pop(id(e), None)
            return None
        if v.v32.size == 0 or v.v32.size > MAX_NUMEL:
            return None
        if v.dtype in FLOAT_DTYPES:
            if not (np.all(np.isfinite(v.v64)) and np.all(np.isfinite(v.v32)) and np.all(np.isfinite(v.mag))):
                return None
            if np.max(np.abs(v.v64), initial=0) > 1e6 or np.max(v.mag, initial=0) > 1e8:
                return None
        elif v.dtype in INT_LIMITS:
            return v if self.int_in_range(e, v) else None
        return v

    def int_in_range(self, e, v):
        """Integer results must not wrap: the op recomputed in float64 (exact for these magnitudes) stays within the
        dtype's range."""
        lo, hi = INT_LIMITS[v.dtype]
        kids = [self.value(k).v32.astype(np.float64) for k in e.kids]
        op = e.op
        if op in ("add", "sub", "mul"):
            w = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](kids[0], kids[1])
        elif op in ("neg", "abs", "square"):
            w = {"neg": np.negative, "abs": np.abs, "square": np.square}[op](kids[0])
        elif op == "sum":
            w = np.sum(kids[0], axis=tuple(int(a) for a in e.atoms[1:]))
        elif op == "idiv":  # INT_MIN // -1
            w = np.floor_divide(kids[0], kids[1])
        else:
            return True
        return bool(np.all(w >= lo) and np.all(w <= hi))

    def pick(self, pred=lambda e, v: True, recent=True):
        cands = [(e, v) for e, v in self.pool if pred(e, v)]
        if not cands:
            return None
        if recent and self.chance(0.6):
            return cands[-1]
        return self.choice(cands)

    def const(self, dt, value):
        return E("const", (), (dt, value))

    # ---- families ----
    def unary(self):
        p = self.pick()
        e, v = p
        dt = v.dtype
        if dt in FLOAT_DTYPES:
            choices = ["neg", "abs", "relu", "square", "exp", "sin", "cos", "tanh", "sigmoid", "log", "sqrt", "recip"]
            if v.exact:
                choices += ["floor", "ceil", "trunc", "round"]
            op = self.choice(choices)
            one = self.const("float32", 1.0)
            if op in ("log", "sqrt"):  # well conditioned: of |x| + 1
                return E(op, (E("add", (E("abs", (e,)), one)),))
            if op == "recip" and np.min(np.abs(v.v64), initial=1) < 0.25:
                return E(op, (E("add", (E("abs", (e,)), one)),))
            if op == "exp" and np.max(v.v64, initial=0) > 20:
                return None
            if op in ("sin", "cos") and np.max(np.abs(v.v64), initial=0) > 100:
                return None
            return E(op, (e,))
        if dt == "bool":
            return E(self.choice(["lnot", "bnot"]), (e,))
        op = self.choice(["neg", "abs", "bnot", "square", "relu"])
        if dt.startswith("uint") and op in ("neg", "abs"):
            return None
        return E(op, (e,))

    def partner(self, e, v, same_dtype=True):
        """An operand for a binary op with e: another pool node broadcastable with it, cast to e's dtype."""
        def fits(e2, v2):
            try:
                np.broadcast_shapes(v.shape, v2.shape)
                return True
            except ValueError:
                return False
        if self.chance(0.3):
            # broadcast: a new input of e's shape with some dims 1 (or a scalar)
            shape = tuple(d if self.chance(0.6) else 1 for d in v.shape)
            e2, v2 = self.add_input(shape, v.dtype if self.chance(0.7) else None)
        else:
            got = self.pick(fits, recent=False)
            e2, v2 = got
        if same_dtype and v2.dtype != v.dtype:
            e2 = self.cast_to(e2, v2, v.dtype)
            if e2 is None:
                return None
        return e2

    def cast_to(self, e, v, dt):
        if dt == v.dtype:
            return e
        if v.dtype in FLOAT_DTYPES and dt not in FLOAT_DTYPES and not v.exact:
            return None  # a cast of an inexact float to int could round either way
        if dt in INT_LIMITS:
            lo, hi = INT_LIMITS[dt]
            x = v.v64.astype(np.float64)
            if np.any(x < lo) or np.any(x > hi):
                return None
        return E("cast", (e,), (dt,))

    def binary(self):
        e, v = self.pick()
        e2 = self.partner(e, v)
        if e2 is None:
            return None
        return self.combine(e, v, e2)

    def combine(self, e, v, e2):
        dt = v.dtype
        v2 = self.value(e2)
        if dt in FLOAT_DTYPES:
            ops = ["add", "sub", "mul", "max2", "min2", "div", "where"]
            if v.exact and v2.exact:
                ops += ["lt", "le", "gt", "ge", "eq", "ne"]
            op = self.choice(ops)
            if op == "div" and np.min(np.abs(v2.v64), initial=1) < 0.25:
                e2 = E("add", (E("abs", (e2,)), self.const("float32", 1.0)))
        elif dt == "bool":
            op = self.choice(["band", "bor", "bxor", "land", "lor", "eq", "ne", "where"])
        else:
            op = self.choice(["add", "sub", "mul", "max2", "min2", "band", "bor", "bxor", "lt", "eq", "ne", "idiv",
                              "mod", "where"])
            if op in ("idiv", "mod") and np.any(v2.v64 == 0):  # divisor y, with 1 where y is 0
                e2 = E("where", (E("eq", (e2, self.const(dt, 0))), self.const(dt, 1), e2))
        if op == "where":
            got = self.pick(lambda c, cv: cv.dtype == "bool" and self.broadcastable(cv, v, v2), recent=False)
            if got is not None:
                cond = got[0]
            elif dt == "bool":
                cond = E("ne", (e, e2))
            elif dt not in FLOAT_DTYPES or (v.exact and v2.exact):
                cond = E("gt", (e, e2))
            else:
                return None
            return E("where", (cond, e, e2))
        return E(op, (e, e2))

    @staticmethod
    def broadcastable(*vs):
        try:
            np.broadcast_shapes(*[x.shape for x in vs])
            return True
        except ValueError:
            return False

    def reduce(self):
        got = self.pick(lambda e, v: v.v32.ndim > 0)
        if got is None:
            return None
        e, v = got
        nd = v.v32.ndim
        axes = sorted(int(a) for a in self.rng.choice(nd, size=1 + self.r(nd), replace=False))
        keep = int(self.chance(0.4))
        dt = v.dtype
        if dt == "bool":
            op = self.choice(["any", "all", "sum"])
        elif dt in FLOAT_DTYPES:
            op = self.choice(["sum", "sum", "rmax", "rmin", "mean", "var"] + (["argmax", "argmin"] if v.exact else []))
        else:
            op = self.choice(["sum", "rmax", "rmin", "mean", "argmax", "argmin"])
        if op in ("argmax", "argmin"):
            return E(op, (e,), (self.r(nd), keep))
        if op == "var" and int(np.prod([v.shape[a] for a in axes])) < 2:
            return None
        return E(op, (e,), (keep, *axes))

    def reshape_dims(self, shape):
        n = int(np.prod(shape))
        factors, k, f = [], n, 2
        while k > 1 and f * f <= k:
            while k % f == 0:
                factors.append(f)
                k //= f
            f += 1
        if k > 1:
            factors.append(k)
        self.rng.shuffle(factors)
        dims, cur = [], 1
        for p in factors:
            cur *= p
            if self.chance(0.5):
                dims.append(cur)
                cur = 1
        if cur > 1 or not dims:
            dims.append(cur)
        for _ in range(self.r(2)):
            dims.insert(self.r(len(dims) + 1), 1)
        return dims[:6]

    def movement(self, e=None, v=None, op=None):
        if e is None:
            e, v = self.pick()
        shape, nd = v.shape, v.v32.ndim
        op = op or self.choice(["reshape", "permute", "expand", "pad", "shrink", "flip", "slice"])
        if op == "reshape":
            dims = self.reshape_dims(shape)
            if int(np.prod(dims)) != int(np.prod(shape)):
                return None
            return E("reshape", (e,), dims)
        if nd == 0:
            return E("reshape", (e,), (1,))
        if op == "permute":
            return E("permute", (e,), [int(x) for x in self.rng.permutation(nd)])
        if op == "expand":
            if 1 not in shape:
                ax = self.r(nd + 1)
                e = E("reshape", (e,), list(shape[:ax]) + [1] + list(shape[ax:]))
                shape = shape[:ax] + (1,) + shape[ax:]
            dims = [d if d != 1 or self.chance(0.3) else 2 + self.r(3) for d in shape]
            return E("expand", (e,), dims)
        if op == "pad":
            p = []
            for _ in range(nd):
                p += [self.r(3), self.r(3)] if self.chance(0.6) else [0, 0]
            return E("pad", (e,), p)
        if op == "shrink":
            p = []
            for d in shape:
                s = self.r(d)
                p += [s, s + 1 + self.r(d - s)]
            return E("shrink", (e,), p)
        if op == "flip":
            axes = sorted(int(a) for a in self.rng.choice(nd, size=1 + self.r(nd), replace=False))
            return E("flip", (e,), axes)
        # slice: per dim (start, stop, step), python semantics, never empty
        atoms = []
        for d in shape:
            step = self.choice([1, 1, 2, 3, -1, -2])
            start = self.choice(["n", self.r(d), -1 - self.r(d)])
            stop = self.choice(["n", self.r(d + 1), -1 - self.r(d)])
            idx = range(d)[slice(None if start == "n" else start, None if stop == "n" else stop, step)]
            if len(idx) == 0:
                start, stop = "n", "n"
            atoms += [start, stop, step]
        return E("slice", (e,), atoms)

    def twice(self):
        """One view used at two different indices: x op moved(x), or x broadcast against itself."""
        got = self.pick(lambda e, v: v.v32.ndim > 0)
        if got is None:
            return None
        e, v = got
        if self.chance(0.5):  # start from a view: flip or slice
            m = self.movement(e, v, self.choice(["flip", "slice", "shrink", "permute"]))
            if m is None or self.ok(m) is None:
                return None
            e, v = m, self.value(m)
        shape, nd = v.shape, v.v32.ndim
        mode = self.r(4)
        if mode == 0 and nd >= 1:  # (n, ...) against itself: x[:, None] op x[None]
            n, rest = shape[0], list(shape[1:])
            if n * n * int(np.prod(rest)) > MAX_NUMEL:
                return None
            a = E("reshape", (e,), [n, 1] + rest)
            b = E("reshape", (e,), [1, n] + rest)
            return self.combine(a, self.value(a), b)
        if mode == 1 and nd == 2 and v.dtype in FLOAT_DTYPES:  # x @ x.T
            return E("matmul", (e, E("permute", (e,), (1, 0))))
        if mode == 2:  # x op flip(x)
            return self.combine(e, v, E("flip", (e,), [self.r(nd)]))
        # x op roll(x) along one axis: shrink the first element off, pad one at the end
        ax = self.r(nd)
        if shape[ax] < 2:
            return None
        sh, pd = [], []
        for i, d in enumerate(shape):
            sh += [1, d] if i == ax else [0, d]
            pd += [0, 1] if i == ax else [0, 0]
        return self.combine(e, v, E("pad", (E("shrink", (e,), sh),), pd))

    def matmul(self):
        got = self.pick(lambda e, v: v.dtype in FLOAT_DTYPES and v.v32.ndim in (2, 3))
        if got is None:
            return None
        e, v = got
        k = v.shape[-1]
        m = self.choice([1, 2, 3, 4, 5, 8, 16])
        if self.chance(0.5):
            e2, _ = self.add_input((k, m), "float32")
        else:
            e2, _ = self.add_input((v.shape[0], k, m) if v.v32.ndim == 3 else (k, m), "float32")
        return E("matmul", (e, e2))

    def cast(self):
        e, v = self.pick()
        dt = self.choice(["float32", "int32", "int8", "uint8", "int64", "bool", "int16"])
        return self.cast_to(e, v, dt)

    def multi(self):
        """Two or three nodes of one dtype realized in one schedule (usually sharing subexpressions: the pool builds on
        itself), so shared and sibling reduces merge into multi-output kernels."""
        e, v = self.pick()
        others = [(e2, v2) for e2, v2 in self.pool if v2.dtype == v.dtype and e2 is not e and e2.op != "in"]
        if not others:
            return None
        picked = [e] + [self.choice(others)[0] for _ in range(1 + self.r(2))]
        if sum(self.value(x).v32.size for x in picked) > MAX_NUMEL:
            return None
        return E("multi", picked)

    def contig(self):
        e, v = self.pick()
        return E("contig", (e,))

    def block(self):
        """A model-shaped block at a realistic size, as the whole case: the kernels a transformer or an MLP produces
        (big upcasted reduces, head-split views, fused epilogues) rarely come out of small random steps. Issue #17: the
        fused "softmax @ (V + b)" kernel of MiniLM's attention was miscompiled by LLVM's SLP vectorizer at 512-bit
        width, which 16000 random small cases never hit and this family finds at once."""
        f32 = "float32"

        def inp(shape, lo=-2.0, hi=2.0):
            arr = self.rng.uniform(lo, hi, size=shape).astype(np.float32)
            self.inputs.append((f32, arr, fits_exactly(arr.astype(np.float64))))
            return E("in", (), (len(self.inputs) - 1,))

        kind = self.choice(["attention", "attention", "layernorm", "linear"])
        if kind == "attention":  # softmax(scores [+ mask]) @ (V + b) split into heads, as the ONNX import lays it out
            b, h, s, d = self.choice([1, 2]), self.choice([1, 2, 4, 12]), self.choice([8, 16, 32, 64]), \
                self.choice([16, 32, 64])
            while b * h * s * max(s, d) > BLOCK_NUMEL:
                h = max(1, h // 2) if h > 1 else h
                if b * h * s * max(s, d) > BLOCK_NUMEL:
                    s //= 2
            scores = inp((b, h, s, s), -4.0, 4.0)
            if self.chance(0.5):  # an additive padding mask per key
                scores = E("add", (scores, inp((b, 1, 1, s), -3.0, 0.0)))
            ex = E("exp", (E("sub", (scores, E("rmax", (scores,), (1, 3)))),))
            probs = E("div", (ex, E("sum", (ex,), (1, 3))))
            vals = E("add", (inp((b, s, h * d)), inp((h * d,), -1.0, 1.0)))
            heads = E("permute", (E("reshape", (vals,), (b, s, h, d)),), (0, 2, 1, 3))
            out = E("matmul", (probs, heads))
            if self.chance(0.5):  # merge the heads back
                out = E("reshape", (E("permute", (out,), (0, 2, 1, 3)),), (b, s, h * d))
            return out
        if kind == "layernorm":  # (x - mean) / sqrt(mean((x - mean)^2) + eps) * g + b over the hidden size
            n, c = self.choice([1, 2, 8, 16, 32]), self.choice([64, 128, 384])
            x = inp((n, c))
            xc = E("sub", (x, E("mean", (x,), (1, 1))))
            var = E("mean", (E("square", (xc,)),), (1, 1))
            inv = E("recip", (E("sqrt", (E("add", (var, self.const(f32, 1e-5))),)),))
            return E("add", (E("mul", (E("mul", (xc, inv)), inp((c,), 0.5, 1.5))), inp((c,), -1.0, 1.0)))
        n, k, m = self.choice([1, 2, 8, 16, 32]), self.choice([64, 128, 384]), self.choice([32, 64, 128, 384])
        while n * max(k, m) > BLOCK_NUMEL or k * m > BLOCK_NUMEL * 4:
            m //= 2
        y = E("add", (E("matmul", (inp((n, k), -1.0, 1.0), inp((k, m), -0.2, 0.2))), inp((m,), -1.0, 1.0)))
        return E(self.choice(["tanh", "relu", "sigmoid"]), (y,))

    def conv_block(self):
        """A convolutional block as the whole case: conv2d (any kernel, stride, padding, dilation, groups, bias) and
        pooling at shapes that reach the CPU's conv paths (winograd.cc: stride-1 3x3 and 5x5 convs with >= 16 input
        channels and enough work take a Winograd form whose output is stored channels-last; nn_ops.cc: a pointwise conv
        over that output takes channel lanes, a strided pointwise conv reads a stored copy, the ResNet stem's 7x7 / 2
        and its 3x3 / 2 max pool), with ReLU and a residual add between, as ONNX models chain them."""
        f32 = "float32"

        def inp(shape, lo=-2.0, hi=2.0):
            arr = self.rng.uniform(lo, hi, size=shape).astype(np.float32)
            self.inputs.append((f32, arr, fits_exactly(arr.astype(np.float64))))
            return E("in", (), (len(self.inputs) - 1,))

        def conv(x, shape, co, k, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), groups=1, bias=None):
            """x of `shape` (N, Ci, H, W) -> (E, output shape), or None when the window does not fit."""
            n, ci, h, w = shape
            oh = (h + pads[0] + pads[1] - dil[0] * (k[0] - 1) - 1) // stride[0] + 1
            ow = (w + pads[2] + pads[3] - dil[1] * (k[1] - 1) - 1) // stride[1] + 1
            if oh < 1 or ow < 1 or ci % groups or co % groups:
                return None
            scale = 1.0 / np.sqrt(ci // groups * k[0] * k[1])
            kids = [x, inp((co, ci // groups, k[0], k[1]), -scale, scale)]
            if bias if bias is not None else self.chance(0.5):
                kids.append(inp((co,), -0.5, 0.5))
            return E("conv", kids, list(stride) + list(pads) + list(dil) + [groups]), (n, co, oh, ow)

        def pads_for(k, same):
            """`same`: k // 2 on every side (ONNX's SAME for odd kernels); else each side 0..k-1 on its own."""
            if same:
                return (k[0] // 2, k[0] // 2, k[1] // 2, k[1] // 2)
            return tuple(self.r(kk) for kk in (k[0], k[0], k[1], k[1]))

        def pool(x, shape):
            kind = self.choice(["maxpool", "avgpool"])
            k = (self.choice([1, 2, 3, 4]), self.choice([1, 2, 3, 4])) if self.chance(0.5) else (self.choice([2, 3]),) * 2
            st = (self.choice([1, 2, 3]), self.choice([1, 2, 3])) if self.chance(0.3) else (self.choice([1, 2]),) * 2
            pd = tuple(self.r(kk // 2 + 1) for kk in (k[0], k[0], k[1], k[1]))
            dl = (self.choice([1, 1, 2]), self.choice([1, 1, 2])) if kind == "maxpool" else ()
            d = dl or (1, 1)
            oh = (shape[2] + pd[0] + pd[1] - d[0] * (k[0] - 1) - 1) // st[0] + 1
            ow = (shape[3] + pd[2] + pd[3] - d[1] * (k[1] - 1) - 1) // st[1] + 1
            if oh < 1 or ow < 1:
                return None
            last = list(dl) if kind == "maxpool" else [int(self.chance(0.5))]
            return E(kind, (x,), list(k) + list(st) + list(pd) + last), shape[:2] + (oh, ow)

        relu = lambda e: E("relu", (e,))
        kind = self.choice(["winograd", "winograd", "direct", "direct", "grouped", "stem", "pointwise", "pool"])
        if kind == "winograd":  # 3x3 / 5x5 stride 1, >= 16 channels, >= 2^20 multiply-adds: a Winograd form
            n, ci, co = self.choice([1, 1, 2]), self.choice([16, 17, 24, 32, 48]), self.choice([16, 32, 48])
            r = self.choice([3, 3, 5])
            h, w = self.choice([6, 8, 11, 14, 16, 20]), self.choice([6, 8, 12, 14, 16, 21])
            while n * co * h * w * ci * r * r < 2 ** 20 and n * ci * h * w < 8192:
                h, w = h + 2, w + 2
            if n * ci * h * w > 16384 or n * co * h * w > 16384:
                return None
            same = self.chance(0.7)
            x = inp((n, ci, h, w))
            got = conv(x, (n, ci, h, w), co, (r, r), pads=pads_for((r, r), same))
            if got is None:
                return None
            e, shape = got
            if self.chance(0.6):
                e = relu(e)
            nxt = self.r(4)
            if nxt == 0:  # the bottleneck's 1x1 over the channels-last output
                co2 = self.choice([16, 32, 64])
                if shape[0] * co2 * shape[2] * shape[3] <= 16384:
                    e, shape = conv(e, shape, co2, (1, 1))
            elif nxt == 1 and shape[0] * shape[1] * shape[2] * shape[3] <= 8192:  # a second Winograd conv
                got = conv(e, shape, shape[1], (3, 3), pads=(1, 1, 1, 1))
                if got is not None:
                    e, shape = got
            elif nxt == 2:  # a residual add, then ReLU
                e = relu(E("add", (e, inp(shape))))
            if self.chance(0.25):
                got = pool(e, shape)
                if got is not None:
                    e, shape = got
            return e
        if kind in ("direct", "grouped"):
            n, ci = self.choice([1, 2]), self.choice([1, 2, 3, 4, 6, 8, 16])
            k = self.choice([(1, 1), (2, 2), (3, 3), (3, 3), (5, 5), (1, 3), (3, 1), (7, 7)])
            stride = self.choice([(1, 1), (1, 1), (2, 2), (1, 2), (3, 3)])
            dil = (1, 1) if self.chance(0.8) else self.choice([(2, 2), (1, 2)])
            groups, co = 1, self.choice([1, 3, 4, 8, 16, 24])
            if kind == "grouped":
                groups = self.choice([g for g in (ci, 2, ci // 2) if g >= 1 and ci % g == 0])
                co = groups * self.choice([1, 2, 3])
            h, w = self.choice([3, 5, 8, 13, 16, 24, 28]), self.choice([4, 5, 9, 16, 17, 28])
            if n * ci * h * w > 16384:
                return None
            x = inp((n, ci, h, w))
            got = conv(x, (n, ci, h, w), co, k, stride, pads_for(k, self.chance(0.5)), dil, groups)
            if got is None or int(np.prod(got[1])) > 16384:
                return None
            e, shape = got
            if self.chance(0.5):
                e = relu(e)
            if self.chance(0.3):
                got = pool(e, shape)
                if got is not None:
                    e = got[0]
            return e
        if kind == "stem":  # ResNet's 7x7 / 2 (pad 3) conv, ReLU, 3x3 / 2 (pad 1) max pool
            n, h = self.choice([1, 2]), self.choice([16, 24, 32, 40])
            x = inp((n, 3, h, h))
            e, shape = conv(x, (n, 3, h, h), self.choice([8, 16, 32]), (7, 7), (2, 2), (3, 3, 3, 3))
            return E("maxpool", (relu(e),), [3, 3, 2, 2, 1, 1, 1, 1, 1, 1])
        if kind == "pointwise":  # 1x1 convs: stride 1 over a computed input, stride 2 over a stored copy
            n, ci, co = self.choice([1, 2]), self.choice([8, 16, 32, 64]), self.choice([8, 16, 32, 64])
            h = self.choice([8, 14, 16, 28])
            if n * ci * h * h > 65536 or n * co * h * h > 16384 * 4:
                return None
            x = inp((n, ci, h, h))
            if self.chance(0.5):
                x = relu(E("add", (x, inp((1, ci, 1, 1)))))
            e, shape = conv(x, (n, ci, h, h), co, (1, 1), stride=self.choice([(1, 1), (2, 2)]))
            return e if int(np.prod(shape)) <= 16384 else None
        n, c, h, w = self.choice([1, 2]), self.choice([1, 3, 16]), self.choice([4, 7, 12, 28]), self.choice([4, 9, 12])
        if self.chance(0.3):  # max pooling of integers: the padding is the dtype's lowest value, not -inf
            x, _ = self.add_input((n, c, h, w), self.choice(["int32", "int8", "uint8"]))
            got = pool(x, (n, c, h, w))
            return None if got is None or got[0].op != "maxpool" else got[0]
        got = pool(inp((n, c, h, w)), (n, c, h, w))
        return None if got is None else got[0]

    FAMILIES = [("unary", 3), ("binary", 4), ("reduce", 3), ("movement", 4), ("twice", 3), ("matmul", 1),
                ("cast", 1), ("contig", 1), ("multi", 1)]

    def random_steps(self):
        """A few inputs, then 2-9 steps drawn from the families; the last node built."""
        for _ in range(1 + self.r(3)):
            self.add_input(self.shape(big=self.chance(0.2)))
        want, done, tries = 2 + self.r(8), 0, 0
        while done < want and tries < 200:
            tries += 1
            done += self.step()
        return self.pool[-1][0]

    def step(self):
        names, w = zip(*self.FAMILIES)
        fam = names[int(self.rng.choice(len(names), p=np.array(w) / sum(w)))]
        if self.grad and fam == "multi":  # realized results are leaves: no gradient flows through them
            return False
        e = getattr(self, fam)()
        if e is None:
            return False
        v = self.ok(e)
        if v is None:
            return False
        self.pool.append((e, v))
        return True


def generate_grad(g):
    """A gradient case: (vjp Y C K...) over an expression Y of float32 inputs (any family, a conv block at times), a
    random cotangent C, every input of Y as K; None when Y comes within rounding of a kink (expr.kinks)."""
    g.grad = True
    if g.chance(0.25):
        root = g.conv_block()
        if root is None:
            return None
    else:
        root = g.random_steps()
    v = g.ok(root)
    if v is None or v.dtype not in FLOAT_DTYPES:
        return None
    wrt = sorted({int(n.atoms[0]) for n in root.subtrees() if n.op == "in"})
    if kinks(root, g.inputs):
        return None
    cot, _ = g.add_input(v.shape, "float32")
    return E("vjp", (root, cot), wrt)


def generate(seed):
    """One case: (inputs, expression tree)."""
    g = Gen(seed)
    if g.chance(0.12):
        root = None
        while root is None:
            g = Gen(int(g.rng.integers(2 ** 62)))
            root = generate_grad(g)
        return list(g.inputs), root
    if g.chance(0.08):
        root = g.block()
        return list(g.inputs), root
    if g.chance(0.1):
        root = None
        while root is None:
            g.inputs = []
            root = g.conv_block()
        return list(g.inputs), root
    root = g.random_steps()
    used = sorted({int(n.atoms[0]) for n in root.subtrees() if n.op == "in"})
    remap = {old: new for new, old in enumerate(used)}
    inputs = [g.inputs[i] for i in used]

    def renumber(n):
        if n.op == "in":
            return E("in", (), (remap[int(n.atoms[0])],))
        return E(n.op, tuple(renumber(k) for k in n.kids), n.atoms)

    return inputs, renumber(root)
