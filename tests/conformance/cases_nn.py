"""Conformance cases: matmul (batch broadcasting, 1-D operands, integers), convolution (stride, padding, dilation,
groups; numpy reference by explicit loops over the kernel offsets), max/avg pooling, softmax, log_softmax, layer and
batch norm, sparse categorical cross-entropy, one-hot."""
import itertools

import numpy as np

from common import RNG, Case, f32, ints, log_softmax


def pad_pairs(padding, n):
    if len(padding) == 1:
        return [(padding[0], padding[0])] * n
    if len(padding) == n:
        return [(p, p) for p in padding]
    return [(padding[2 * i], padding[2 * i + 1]) for i in range(n)]


def per_dim(v, n):
    return list(v) * n if len(v) == 1 else list(v)


def windows(xp, k, stride, dil):
    """Yields (kernel offset, strided view (N, C, *out)) of a padded input."""
    n = len(k)
    out = [(xp.shape[2 + j] - dil[j] * (k[j] - 1) - 1) // stride[j] + 1 for j in range(n)]
    for kk in itertools.product(*[range(kj) for kj in k]):
        idx = tuple(slice(kk[j] * dil[j], kk[j] * dil[j] + stride[j] * (out[j] - 1) + 1, stride[j]) for j in range(n))
        yield kk, xp[(slice(None), slice(None)) + idx]


def conv_ref(x, w, b, stride=(1,), padding=(0,), dilation=(1,), groups=1):
    x, w = x.astype(np.float64), w.astype(np.float64)
    n = x.ndim - 2
    stride, dilation = per_dim(stride, n), per_dim(dilation, n)
    xp = np.pad(x, [(0, 0), (0, 0)] + pad_pairs(padding, n))
    cout, cg = w.shape[0], w.shape[1]
    og = cout // groups
    out = None
    for kk, xs in windows(xp, w.shape[2:], stride, dilation):
        if out is None:
            out = np.zeros((x.shape[0], cout) + xs.shape[2:])
        for g in range(groups):
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", xs[:, g * cg:(g + 1) * cg],
                                                     w[g * og:(g + 1) * og, :][(slice(None), slice(None)) + kk])
    if b is not None:
        out += b.reshape((1, -1) + (1,) * n)
    return out


def conv_attr(stride, padding, dilation, groups):
    return [groups, len(stride), *stride, len(padding), *padding, len(dilation), *dilation]


def pool_ref(x, k, stride, padding, dilation, kind, count_include_pad=True):
    lead = x.shape[:-len(k)]
    x4 = x.reshape((-1, 1) + x.shape[-len(k):]).astype(np.float64)
    n = len(k)
    pads = [(0, 0), (0, 0)] + pad_pairs(padding, n)
    stride = per_dim(stride or k, n)
    dilation = per_dim(dilation, n)
    if kind == "max":
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        vals = [v for _, v in windows(np.pad(x4, pads, constant_values=fill), k, stride, dilation)]
        out = np.max(vals, axis=0)
    else:
        vals = [v for _, v in windows(np.pad(x4, pads), k, stride, dilation)]
        cnt = [v for _, v in windows(np.pad(np.ones_like(x4), pads), k, stride, dilation)]
        out = np.sum(vals, axis=0) / (len(vals) if count_include_pad else np.sum(cnt, axis=0))
    return out.reshape(lead + out.shape[2:])


def pool_attr(k, stride, padding, dilation, cip=1):
    return [len(k), *k, len(stride), *stride, len(padding), *padding, len(dilation), *dilation, cip]


def matmul():
    f = "matmul"
    a, b = f32(8, 12), f32(12, 5)
    yield Case("matmul", "matmul", [a, b], a.astype(np.float64) @ b, family=f)
    v, u = f32(12), f32(5)
    yield Case("matmul_vec_mat", "matmul", [v, b], v.astype(np.float64) @ b, family=f)
    yield Case("matmul_mat_vec", "matmul", [b, u], b.astype(np.float64) @ u, family=f)
    yield Case("matmul_vec_vec", "matmul", [v, v * 2], np.float64(v.astype(np.float64) @ (v * 2)), family=f)
    x, y = f32(2, 1, 3, 4), f32(5, 4, 6)
    yield Case("matmul_batch_bcast", "matmul", [x, y], x.astype(np.float64) @ y, family=f)
    x, y = f32(3, 2, 7), f32(7, 3)
    yield Case("matmul_batch_2d", "matmul", [x, y], x.astype(np.float64) @ y, family=f)
    y3 = f32(3, 7)
    yield Case("matmul_batched_vec", "matmul", [x, y3[0].copy()], x.astype(np.float64) @ y3[0], family=f)
    big_a, big_b = f32(33, 70), f32(70, 17)
    yield Case("matmul_odd_sizes", "matmul", [big_a, big_b], big_a.astype(np.float64) @ big_b, family=f)
    la, lb = f32(128, 256), f32(256, 64)
    yield Case("matmul_large", "matmul", [la, lb], la.astype(np.float64) @ lb, family=f)
    ba, bb = f32(4, 64, 48), f32(4, 48, 40)
    yield Case("matmul_batched_large", "matmul", [ba, bb], ba.astype(np.float64) @ bb, family=f)
    ia, ib = ints(np.int32, 4, 6, lo=-50, hi=50), ints(np.int32, 6, 3, lo=-50, hi=50)
    yield Case("matmul_int32", "matmul", [ia, ib], ia @ ib, family=f)
    ja, jb = ints(np.int8, 3, 5), ints(np.int8, 5, 2)
    with np.errstate(all="ignore"):
        yield Case("matmul_int8_wrap", "matmul", [ja, jb], (ja.astype(np.int64) @ jb).astype(np.int8), family=f)
    yield Case("matmul_mixed", "matmul", [ia, b[:6, :3].copy()], ia @ b[:6, :3].astype(np.float64), dt=np.float32,
               note="int32 @ float32: numpy float64, kiln float32", family=f)
    yield Case("matmul_zero_rows", "matmul", [np.zeros((0, 3), np.float32), f32(3, 4)],
               np.zeros((0, 4), np.float32), family=f)
    yield Case("matmul_zero_k", "matmul", [np.zeros((2, 0), np.float32), np.zeros((0, 4), np.float32)],
               np.zeros((2, 4), np.float32), family=f)


def conv():
    f = "conv"
    specs = [  # name, x shape, w shape, bias, stride, padding, dilation, groups
        ("conv_basic", (2, 3, 9, 8), (4, 3, 3, 3), True, [1], [0], [1], 1),
        ("conv_stride_pad", (1, 3, 9, 8), (2, 3, 3, 3), True, [2], [1], [1], 1),
        ("conv_dilation", (1, 2, 10, 9), (3, 2, 3, 2), False, [1], [1, 2], [2], 1),
        ("conv_groups", (1, 4, 7, 7), (6, 2, 3, 3), True, [1], [1], [1], 2),
        ("conv_depthwise", (2, 4, 6, 6), (4, 1, 3, 3), True, [1], [0], [1], 4),
        ("conv_asym_pad_stride", (1, 2, 8, 7), (3, 2, 3, 2), True, [2, 1], [1, 0, 2, 1], [1], 1),
        ("conv_1x1", (2, 5, 4, 4), (3, 5, 1, 1), False, [1], [0], [1], 1),
        ("conv_all", (2, 6, 11, 10), (4, 3, 3, 3), True, [2], [2, 1], [2, 1], 2),
        ("conv1d", (2, 3, 10), (5, 3, 4), True, [2], [1], [1], 1),
        ("conv3d", (1, 2, 5, 4, 4), (2, 2, 2, 2, 2), True, [1], [0], [1], 1),
    ]
    for name, xs, ws, bias, s, p, d, g in specs:
        x, w = f32(*xs), f32(*ws)
        ins = [x, w] + ([f32(ws[0])] if bias else [])
        yield Case(name, "conv", ins, conv_ref(x, w, ins[2] if bias else None, s, p, d, g),
                   attr=conv_attr(s, p, d, g), family=f)
    x, w, b = f32(2, 3, 9, 8), f32(4, 3, 3, 3), f32(4)
    yield Case("conv_zero_batch", "conv", [np.zeros((0, 3, 9, 8), np.float32), w, b],
               np.zeros((0, 4, 7, 6), np.float32), attr=conv_attr([1], [0], [1], 1), family=f)


def pools():
    f = "pool"
    x = f32(2, 3, 8, 7)
    for name, k, s, p, d in [("2x2", [2, 2], [], [0], [1]), ("3x3_s2_p1", [3, 3], [2], [1], [1]),
                             ("dil2", [2, 2], [1], [0], [2]), ("3x2_s1", [3, 2], [1, 2], [0], [1]),
                             ("asym_pad", [2, 2], [2], [1, 0, 0, 1], [1])]:
        yield Case(f"maxpool_{name}", "maxpool", [x], pool_ref(x, k, s, p, d, "max"), attr=pool_attr(k, s, p, d),
                   family=f)
    for name, k, s, p, d, cip in [("2x2", [2, 2], [], [0], [1], 1), ("3x3_p1_incl", [3, 3], [1], [1], [1], 1),
                                  ("3x3_p1_excl", [3, 3], [1], [1], [1], 0), ("3x3_s2", [3, 3], [2], [0], [1], 1),
                                  ("dil2", [2, 2], [1], [0], [2], 1)]:
        yield Case(f"avgpool_{name}", "avgpool", [x], pool_ref(x, k, s, p, d, "avg", cip),
                   attr=pool_attr(k, s, p, d, cip), family=f)
    x3 = f32(3, 6, 6)
    yield Case("maxpool_3d_input", "maxpool", [x3], pool_ref(x3, [2, 2], [], [0], [1], "max"),
               attr=pool_attr([2, 2], [], [0], [1]), family=f)
    xi = ints(np.int32, 1, 2, 6, 6, lo=-1000, hi=1000)
    yield Case("maxpool_int32_pad", "maxpool", [xi], pool_ref(xi, [3, 3], [2], [1], [1], "max").astype(np.int32),
               attr=pool_attr([3, 3], [2], [1], [1]), family=f)
    yield Case("maxpool_zero_batch", "maxpool", [np.zeros((0, 2, 4, 4), np.float32)], np.zeros((0, 2, 2, 2), np.float32),
               attr=pool_attr([2, 2], [], [0], [1]), family=f)
    x1 = f32(2, 3, 9)
    yield Case("maxpool_1d", "maxpool", [x1], pool_ref(x1, [3], [2], [0], [1], "max"),
               attr=pool_attr([3], [2], [0], [1]), family=f)


def norms():
    f = "softmax_norm"
    x = f32(3, 4, 5, lo=-5, hi=5)
    for ax in (-1, 0, 1):
        yield Case(f"softmax_ax{ax}".replace("-", "m"), "softmax", [x], np.exp(log_softmax(x, ax)), attr=[ax],
                   family=f)
        yield Case(f"log_softmax_ax{ax}".replace("-", "m"), "log_softmax", [x], log_softmax(x, ax), attr=[ax],
                   family=f)
    big = (f32(4, 6) * 100).astype(np.float32)
    yield Case("softmax_large", "softmax", [big], np.exp(log_softmax(big)), attr=[-1], family=f)
    yield Case("log_softmax_large", "log_softmax", [big], log_softmax(big), attr=[-1], family=f)
    z = np.zeros((0, 4), np.float32)
    yield Case("softmax_zero_rows", "softmax", [z], z, attr=[-1], family=f)
    v = f32(7)
    yield Case("softmax_1d", "softmax", [v], np.exp(log_softmax(v)), attr=[0], family=f)
    x = f32(2, 3, 4)
    for nd in (1, 2):
        axes = tuple(range(-nd, 0))
        xd = x.astype(np.float64)
        ref = (xd - xd.mean(axis=axes, keepdims=True)) / np.sqrt(xd.var(axis=axes, keepdims=True) + 1e-5)
        yield Case(f"layernorm_{nd}", "layernorm", [x], ref, attr=[nd], family=f)
    yield Case("layernorm_zero_rows", "layernorm", [np.zeros((0, 4), np.float32)], np.zeros((0, 4), np.float32),
               attr=[1], family=f)
    w, b = f32(4), f32(4)
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * w + b
    yield Case("layernorm_affine", "layernorm", [x, w, b], ref, attr=[1], family=f)
    xb = f32(2, 3, 4, 4)
    w, b, m, inv = f32(3), f32(3), f32(3), f32(3, lo=0.5, hi=2)
    r = lambda t: t.reshape(1, 3, 1, 1)  # noqa: E731
    yield Case("batchnorm", "batchnorm", [xb, w, b, m, inv], (xb - r(m)) * r(w) * r(inv) + r(b), attr=[1], family=f)
    xl = f32(5, 3)
    yield Case("batchnorm_last", "batchnorm", [xl, w, b, m, inv], (xl - m) * w * inv + b, attr=[-1], family=f)


def sce_ref(logits, labels, ignore_index=-1, ls=0.0, reduction="mean"):
    lp = log_softmax(logits)
    mask = (labels != ignore_index) if ignore_index != -1 else np.ones(labels.shape, bool)
    y = (labels[..., None] == np.arange(logits.shape[-1])) & mask[..., None]
    unreduced = (1 - ls) * (lp * y).sum(-1) + ls * lp.mean(-1) * mask
    if reduction == "mean":
        return -unreduced.sum() / mask.sum()
    return -unreduced.sum() if reduction == "sum" else -unreduced


def losses():
    f = "loss"
    x = f32(6, 5, lo=-3, hi=3)
    y = RNG.integers(0, 5, size=6).astype(np.int32)
    y[:2] = [2, 2]
    for red, code in [("mean", 0), ("sum", 1), ("none", 2)]:
        yield Case(f"sce_{red}", "sce", [x, y], sce_ref(x, y, reduction=red), attr=[-1, 0.0, code], family=f)
    yield Case("sce_smoothing", "sce", [x, y], sce_ref(x, y, ls=0.1), attr=[-1, 0.1, 0], family=f)
    yield Case("sce_ignore", "sce", [x, y], sce_ref(x, y, ignore_index=2), attr=[2, 0.0, 0], family=f)
    yield Case("sce_ignore_smoothing_none", "sce", [x, y], sce_ref(x, y, 2, 0.2, "none"), attr=[2, 0.2, 2],
               family=f)
    xb = f32(2, 3, 4)
    yb = RNG.integers(0, 4, size=(2, 3)).astype(np.int64)
    yield Case("sce_batched", "sce", [xb, yb], sce_ref(xb, yb), attr=[-1, 0.0, 0], family=f)
    lab = RNG.integers(0, 5, size=(2, 3)).astype(np.int32)
    yield Case("one_hot", "one_hot", [lab], lab[..., None] == np.arange(5), attr=[5], family=f)
    yield Case("one_hot_zero_size", "one_hot", [np.zeros((0,), np.int32)], np.zeros((0, 3), bool), attr=[3],
               family=f)
    yield Case("one_hot_rank0", "one_hot", [np.int32(2)], np.arange(4) == 2, attr=[4], family=f)


def fused():
    """Chains of ops that the scheduler fuses into one kernel (movement + elementwise + reduce)."""
    f = "fused"
    x = f32(6, 5, 4)
    xd = x.astype(np.float64)
    yield Case("fused_permute_sum", "fused_permute_sum", [x], xd.transpose(2, 0, 1).sum(axis=1), family=f)
    yield Case("fused_pad_flip_max", "fused_pad_flip_max", [x],
               np.pad(xd, ((0, 0), (1, 2), (0, 0)), constant_values=0)[:, ::-1].max(axis=1), family=f)
    w = f32(4)
    yield Case("fused_bcast_mul_sum", "fused_bcast_mul_sum", [x, w], (xd * w).sum(axis=-1), family=f)
    yield Case("fused_exp_sum_log", "fused_exp_sum_log", [x], np.log(np.exp(xd).sum(axis=0)), family=f)
    yield Case("fused_double_reduce", "fused_double_reduce", [x], (xd - xd.max(axis=1, keepdims=True)).sum(axis=2),
               family=f)


def cases():
    for gen in (matmul, conv, pools, norms, losses, fused):
        yield from gen()
