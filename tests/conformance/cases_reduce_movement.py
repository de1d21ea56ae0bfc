"""Conformance cases: reductions (axes, keepdim, negative axes, empty axes, rank 0) and movement ops."""
import numpy as np

from common import INT_DTYPES, NONE, RNG, Case, dname, f32, ints

RED_F = {  # op -> numpy reference (float64)
    "sum": lambda x, ax, k: x.sum(axis=ax, keepdims=k),
    "prod": lambda x, ax, k: x.prod(axis=ax, keepdims=k),
    "max": lambda x, ax, k: x.max(axis=ax, keepdims=k),
    "min": lambda x, ax, k: x.min(axis=ax, keepdims=k),
    "mean": lambda x, ax, k: x.mean(axis=ax, keepdims=k),
    "var": lambda x, ax, k: x.var(axis=ax, keepdims=k, ddof=1),
    "std": lambda x, ax, k: x.std(axis=ax, keepdims=k, ddof=1),
    "var0": lambda x, ax, k: x.var(axis=ax, keepdims=k),
    "std0": lambda x, ax, k: x.std(axis=ax, keepdims=k),
}
AXES = [(None, False), ((0,), False), ((-1,), False), ((0, 2), True), ((1,), True), ((-3, -1), False), (None, True)]


def rattr(ax, keep):
    return [int(keep)] + (list(ax) if ax is not None else [])


def reductions():
    f = "reduce"
    x = f32(3, 4, 5, lo=0.5, hi=1.5)  # prod stays well-scaled
    for op, ref in RED_F.items():
        for ax, keep in AXES:
            tag = "all" if ax is None else "_".join(str(a) for a in ax).replace("-", "m")
            yield Case(f"{op}_f32_{tag}{'_keep' if keep else ''}", op, [x], ref(x.astype(np.float64), ax, keep),
                       attr=rattr(ax, keep), family=f)
    big = f32(16, 33)
    yield Case("sum_f32_large", "sum", [big], big.astype(np.float64).sum(axis=1), attr=[0, 1], family=f)
    b = RNG.integers(0, 2, size=(3, 4)).astype(bool)
    b[0] = True
    for op, ref in [("any", np.any), ("all", np.all)]:
        yield Case(f"{op}_bool_all", op, [b], ref(b), family=f)
        yield Case(f"{op}_bool_ax1", op, [b], ref(b, axis=1), attr=[0, 1], family=f)
        yield Case(f"{op}_f32_ax0_keep", op, [x - 1], ref(x - 1, axis=0, keepdims=True), attr=[1, 0], family=f)
    xt = f32(4, 6)
    xt[1, 2] = xt[1, 4] = xt.max() + 1  # ties: the first index wins
    xt[2, 0] = xt[2, 5] = xt.min() - 1
    for op, ref in [("argmax", np.argmax), ("argmin", np.argmin)]:
        yield Case(f"{op}_flat", op, [xt], np.int32(ref(xt)), family=f)
        yield Case(f"{op}_ax1", op, [xt], ref(xt, axis=1).astype(np.int32), attr=[0, 1], family=f)
        yield Case(f"{op}_ax0_keep", op, [xt], ref(xt, axis=0, keepdims=True).astype(np.int32), attr=[1, 0], family=f)
        yield Case(f"{op}_axm1", op, [xt], ref(xt, axis=-1).astype(np.int32), attr=[0, -1], family=f)
        yield Case(f"{op}_rank0", op, [np.float32(3)], np.int32(0), family=f)
    # integers
    for dt in INT_DTYPES:
        info = np.iinfo(dt)
        xi = ints(dt, 3, 4, 5, lo=max(info.min, -100), hi=min(info.max, 100))
        acc = {np.int8: np.int32, np.int16: np.int32, np.uint8: np.uint32}.get(dt, dt)
        note = f"sum of {dname(dt)}: numpy accumulates in (u)int64, kiln in {dname(acc)} (tinygrad sum_acc_dtype)"
        note = note if np.dtype(acc) != xi.sum().dtype else None
        yield Case(f"sum_{dname(dt)}_ax1", "sum", [xi], xi.sum(axis=1), attr=[0, 1], dt=acc, note=note, family=f)
        yield Case(f"sum_{dname(dt)}_all", "sum", [xi], xi.sum(), dt=acc, note=note, family=f)
        yield Case(f"max_{dname(dt)}_ax2", "max", [xi], xi.max(axis=2), attr=[0, 2], family=f)
        yield Case(f"min_{dname(dt)}_ax0_keep", "min", [xi], xi.min(axis=0, keepdims=True), attr=[1, 0], family=f)
        yield Case(f"mean_{dname(dt)}_axm1", "mean", [xi], xi.mean(axis=-1), attr=[0, -1], dt=np.float32,
                   note=f"mean of {dname(dt)}: numpy float64, kiln float32", family=f)
        small = ints(dt, 3, 4, lo=0 if info.min == 0 else -3, hi=3)
        pnote = f"prod of {dname(dt)}: numpy accumulates in (u)int64, kiln keeps {dname(dt)}"
        yield Case(f"prod_{dname(dt)}_ax1", "prod", [small], small.prod(axis=1), attr=[0, 1], dt=dt,
                   note=pnote if small.prod().dtype != np.dtype(dt) else None, family=f)
        yield Case(f"argmax_{dname(dt)}", "argmax", [xi], xi.argmax(axis=1).astype(np.int32), attr=[0, 1], family=f)
        yield Case(f"argmin_{dname(dt)}", "argmin", [xi], xi.argmin(axis=2).astype(np.int32), attr=[0, 2], family=f)
    full = np.array([np.iinfo(np.int8).min, 5, np.iinfo(np.int8).max], np.int8)
    yield Case("min_int8_extremes", "min", [full], full.min(), family=f)
    yield Case("max_int8_extremes", "max", [full], full.max(), family=f)
    yield Case("argmin_uint8_extremes", "argmin", [np.array([3, 255, 0, 0], np.uint8)], np.int32(2), family=f)
    bb = RNG.integers(0, 2, size=(5, 7)).astype(bool)
    yield Case("sum_bool", "sum", [bb], bb.sum(axis=1), attr=[0, 1], dt=np.int32,
               note="sum of bool: numpy int64 (default int), kiln int32 (tinygrad sum_acc_dtype)", family=f)
    yield Case("mean_bool", "mean", [bb], bb.mean(), dt=np.float32, note="mean of bool: numpy float64, kiln float32",
               family=f)
    yield Case("max_bool", "max", [bb], bb.max(axis=0), attr=[0, 0], family=f)
    nn = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    yield Case("max_nan", "max", [nn], nn.max(axis=1), attr=[0, 1], family=f)
    yield Case("sum_nan", "sum", [nn], nn.sum(axis=1), attr=[0, 1], family=f)
    # large reductions (kernel optimizations: upcast/unroll/grouping)
    lg = f32(256, 1024)
    # A float32 sum of n terms may round differently per summation order (lanes, threads, pairwise in numpy): the
    # absolute tolerance of a sum is one float32 ulp of the summed magnitudes (eps32 * sum|x|) along the axis.
    eps32 = float(np.finfo(np.float32).eps)
    for op in ("sum", "max", "mean"):
        for ax in (0, 1):
            mag = np.abs(lg.astype(np.float64)).sum(axis=ax).max() / (lg.shape[ax] if op == "mean" else 1)
            yield Case(f"{op}_large_ax{ax}", op, [lg], RED_F[op](lg.astype(np.float64), ax, False), attr=[0, ax],
                       family=f, atol=None if op == "max" else max(1e-5, eps32 * mag))
    yield Case("sum_large_all", "sum", [lg], lg.astype(np.float64).sum(), family=f,
               atol=eps32 * float(np.abs(lg.astype(np.float64)).sum()))
    li = ints(np.int32, 300, 77, lo=-1000, hi=1000)
    yield Case("sum_large_int32", "sum", [li], li.sum(axis=0).astype(np.int32), attr=[0, 0], family=f)
    yield Case("argmax_large", "argmax", [lg], lg.argmax(axis=1).astype(np.int32), attr=[0, 1], family=f)
    # zero-size dims and rank 0
    e = np.zeros((0, 3), np.float32)
    yield Case("sum_empty_axis", "sum", [e], e.sum(axis=0), attr=[0, 0], family=f)
    yield Case("sum_empty_keep", "sum", [e], e.sum(axis=1), attr=[0, 1], family=f)
    yield Case("sum_empty_all", "sum", [e], e.sum(), family=f)
    yield Case("prod_empty_axis", "prod", [e], e.prod(axis=0), attr=[0, 0], family=f)
    with np.errstate(all="ignore"):
        yield Case("mean_empty_axis", "mean", [e], np.full(3, np.nan, np.float32), attr=[0, 0],
                   note="mean over an empty axis: 0/0 = nan (numpy: nan + RuntimeWarning)", family=f)
    yield Case("max_empty_axis", "max", [e], np.full(3, -np.inf, np.float32), attr=[0, 0],
               note="numpy raises (no identity for maximum); kiln returns MAX's identity -inf (tinygrad)", family=f)
    yield Case("min_empty_axis", "min", [e], np.full(3, np.inf, np.float32), attr=[0, 0],
               note="numpy raises; kiln returns +inf (tinygrad)", family=f)
    ei = np.zeros((0, 2), np.int32)
    yield Case("max_empty_int32", "max", [ei], np.full(2, np.iinfo(np.int32).min, np.int32), attr=[0, 0],
               note="numpy raises; kiln returns the dtype minimum (MAX's identity)", family=f)
    yield Case("sum_empty_int32", "sum", [ei], np.zeros(2, np.int32), attr=[0, 0], family=f)
    yield Case("sum_nonempty_of_empty", "sum", [np.zeros((2, 0, 3), np.float32)], np.zeros((2, 3), np.float32),
               attr=[0, 1], family=f)
    r = np.float32(2.5)
    for op in ("sum", "max", "min", "mean", "prod", "var0"):
        yield Case(f"{op}_rank0", op, [r], RED_F[op](np.float64(r), None, False), family=f)
    yield Case("sum_rank0_int8", "sum", [np.int8(-7)], np.int32(-7), dt=np.int32,
               note="sum of int8: kiln accumulates in int32 (numpy int64)", family=f)


def sl(*args):
    """Encodes numpy index entries (int, slice, None) as conformance_ops.cc `slice` attributes."""
    out = []
    for a in args:
        if a is None:
            out += [2, 0, 0, 1]
        elif isinstance(a, slice):
            out += [1, NONE if a.start is None else a.start, NONE if a.stop is None else a.stop, a.step or 1]
        else:
            out += [0, a, 0, 1]
    return out


def movement():
    f = "movement"
    a, x3 = f32(4, 5), f32(2, 3, 4)
    ai = ints(np.int8, 4, 5)
    z = np.zeros((0, 3), np.float32)
    for name, x, shape in [("reshape", a, (5, 4)), ("reshape_infer", x3, (4, -1)), ("reshape_int8", ai, (2, 10)),
                           ("reshape_to_rank0", np.ones((1, 1), np.float32) * 3, ()),
                           ("reshape_from_rank0", np.float32(4), (1, 1, 1)), ("reshape_zero_size", z, (3, 0)),
                           ("reshape_split", x3, (2, 3, 2, 2))]:
        yield Case(name, "reshape", [x], x.reshape(shape), attr=list(shape), family=f)
    yield Case("permute", "permute", [x3], x3.transpose(2, 0, 1), attr=[2, 0, 1], family=f)
    yield Case("permute_neg", "permute", [x3], x3.transpose(1, 2, 0), attr=[-2, -1, 0], family=f)
    yield Case("permute_zero_size", "permute", [z], z.T, attr=[1, 0], family=f)
    yield Case("transpose", "transpose", [a], a.T, attr=[1, 0], family=f)
    yield Case("transpose_3d_neg", "transpose", [x3], np.swapaxes(x3, -1, 0), attr=[-1, 0], family=f)
    yield Case("expand", "expand", [a.reshape(1, 4, 5)], np.broadcast_to(a, (3, 4, 5)), attr=[3, 4, 5], family=f)
    c = f32(4, 1)
    yield Case("expand_keep", "expand", [c], np.broadcast_to(c, (4, 6)), attr=[-1, 6], family=f)
    v = f32(5)
    yield Case("expand_new_dims", "expand", [v], np.broadcast_to(v, (2, 3, 5)), attr=[2, 3, 5], family=f)
    yield Case("expand_rank0", "expand", [np.float32(1.5)], np.full((2, 3), 1.5, np.float32), attr=[2, 3], family=f)
    yield Case("expand_to_zero", "expand", [c], np.zeros((4, 0), np.float32), attr=[4, 0], family=f)
    c3 = f32(3, 1)
    yield Case("broadcast_to", "broadcast_to", [c3], np.broadcast_to(c3, (2, 3, 4)), attr=[2, 3, 4], family=f)
    yield Case("pad", "pad", [a], np.pad(a, ((1, 2), (0, 1))), attr=[1, 2, 0, 1], family=f)
    yield Case("pad_negative", "pad", [a], np.pad(a, ((0, 1), (0, 0)))[1:, 2:], attr=[-1, 1, -2, 0], family=f)
    yield Case("pad_value", "pad_v", [a], np.pad(a, ((2, 0), (1, 1)), constant_values=-3.5),
               attr=[2, 0, 1, 1, -3.5], family=f)
    yield Case("pad_int8", "pad_v", [ai], np.pad(ai, ((1, 1), (0, 2)), constant_values=7), attr=[1, 1, 0, 2, 7],
               family=f)
    yield Case("pad_zero_size", "pad", [z], np.pad(z, ((1, 1), (0, 0))), attr=[1, 1, 0, 0], family=f)
    yield Case("pad_3d", "pad", [x3], np.pad(x3, ((0, 0), (2, 1), (1, 3))), attr=[0, 0, 2, 1, 1, 3], family=f)
    yield Case("shrink", "shrink", [a], a[1:3, 2:5], attr=[1, 3, 2, 5], family=f)
    yield Case("shrink_to_empty", "shrink", [a], a[2:2, :], attr=[2, 2, 0, 5], family=f)
    yield Case("flip", "flip", [a], a[:, ::-1], attr=[1], family=f)
    yield Case("flip_multi", "flip", [x3], x3[::-1, :, ::-1], attr=[0, -1], family=f)
    yield Case("flip_int32", "flip", [ai.astype(np.int32)], ai.astype(np.int32)[::-1], attr=[0], family=f)
    for i, idx in enumerate([(slice(1, 3),), (slice(None, None, -1),), (slice(None, None, 2), slice(1, None, -2)),
                             (slice(-3, -1),), (None, 2, slice(None)), (slice(-100, 100, 3),), (slice(5, 1),),
                             (-1,), (slice(None), -2), (slice(3, 0, -2), slice(None, None, 3)),
                             (1, None, slice(4, None, -3))]):
        yield Case(f"slice_{i}", "slice", [a], a[idx], attr=sl(*idx), family=f)
    yield Case("slice_3d_step", "slice", [x3], x3[:, ::-2, 1:4:2], attr=sl(slice(None), slice(None, None, -2),
                                                                         slice(1, 4, 2)), family=f)
    s1 = f32(1, 3, 1)
    yield Case("squeeze_all", "squeeze", [s1], s1.squeeze(), family=f)
    yield Case("squeeze_dim", "squeeze", [s1], s1.squeeze(-1), attr=[-1], family=f)
    # squeezing a dim that is not 1 is a no-op in kiln (tinygrad); numpy raises
    yield Case("squeeze_noop_dim", "squeeze", [s1], s1, attr=[1], family=f)
    yield Case("squeeze_rank0", "squeeze", [np.float32(2)], np.float32(2), family=f)
    yield Case("unsqueeze_0", "unsqueeze", [a], a[None], attr=[0], family=f)
    yield Case("unsqueeze_neg", "unsqueeze", [a], a[..., None], attr=[-1], family=f)
    yield Case("unsqueeze_rank0", "unsqueeze", [np.float32(2)], np.array([2], np.float32), attr=[0], family=f)
    yield Case("flatten", "flatten", [x3], x3.reshape(-1), attr=[0, -1], family=f)
    x4 = f32(2, 3, 4, 5)
    yield Case("flatten_mid", "flatten", [x4], x4.reshape(2, 12, 5), attr=[1, 2], family=f)
    yield Case("flatten_tail", "flatten", [x3], x3.reshape(2, 12), attr=[1, 2], family=f)
    yield Case("flatten_rank0", "flatten", [np.float32(5)], np.array([5], np.float32), attr=[0, -1], family=f)
    p, q, r = f32(2, 3), f32(1, 3), f32(4, 3)
    yield Case("cat_0", "cat", [p, q, r], np.concatenate([p, q, r], 0), attr=[0], family=f)
    yield Case("cat_m1", "cat", [p.T.copy(), r.T.copy()], np.concatenate([p.T, r.T], -1), attr=[-1], family=f)
    yield Case("cat_with_empty", "cat", [p, z[:, :3]], np.concatenate([p, z]), attr=[0], family=f)
    i1, i2 = ints(np.uint8, 2, 2), ints(np.uint8, 2, 3)
    yield Case("cat_uint8", "cat", [i1, i2], np.concatenate([i1, i2], 1), attr=[1], family=f)
    yield Case("cat_single", "cat", [p], p, attr=[0], family=f)
    yield Case("stack_0", "stack", [p, p * 2, p * 3], np.stack([p, p * 2, p * 3]), attr=[0], family=f)
    yield Case("stack_m1", "stack", [p, p + 1], np.stack([p, p + 1], -1), attr=[-1], family=f)
    yield Case("stack_rank0", "stack", [np.float32(1), np.float32(2), np.float32(3)],
               np.array([1, 2, 3], np.float32), attr=[0], family=f)
    yield Case("repeat", "repeat", [p], np.tile(p, (2, 1)), attr=[2, 1], family=f)
    yield Case("repeat_new_dim", "repeat", [p], np.tile(p, (2, 1, 3)), attr=[2, 1, 3], family=f)
    yield Case("repeat_zero", "repeat", [p], np.tile(p, (0, 1)), attr=[0, 1], family=f)
    zz = np.zeros((0, 4), np.float32)
    yield Case("slice_zero_size", "slice", [zz], zz[:, ::-2], attr=sl(slice(None), slice(None, None, -2)), family=f)
    yield Case("flip_zero_size", "flip", [zz], zz[::-1], attr=[0], family=f)
    yield Case("stack_int8", "stack", [ai, ai], np.stack([ai, ai], 1), attr=[1], family=f)
    ri = ints(np.int64, 3)
    yield Case("repeat_int64", "repeat", [ri], np.tile(ri, 2), attr=[2], family=f)
    yield Case("repeat_rank0", "repeat", [np.float32(7)], np.full((2, 3), 7, np.float32), attr=[2, 3], family=f)
    g = f32(3, 4)
    idx0 = RNG.integers(0, 3, size=(2, 4)).astype(np.int32)
    idx1 = RNG.integers(0, 4, size=(3, 6)).astype(np.int64)
    yield Case("gather_0", "gather", [g, idx0], np.take_along_axis(g, idx0, 0), attr=[0], family=f)
    yield Case("gather_1_int64", "gather", [g, idx1], np.take_along_axis(g, idx1, 1), attr=[1], family=f)
    idx2 = RNG.integers(0, 4, size=(2, 2)).astype(np.int32)
    yield Case("gather_smaller", "gather", [g, idx2], np.take_along_axis(g[:2], idx2, -1), attr=[-1], family=f)
    gi = ints(np.int16, 3, 4)
    yield Case("gather_int16", "gather", [gi, idx0], np.take_along_axis(gi, idx0, 0), attr=[0], family=f)


def cases():
    yield from reductions()
    yield from movement()
