"""Conformance cases: creation, elementwise unary/binary ops (float and every integer dtype), comparisons, logical
and bitwise ops, where/clip, dtype promotion, Cast and Bitcast."""
import numpy as np

from common import INT_DTYPES, Case, dname, f32, ints, sigmoid

LATTICE_FLOAT = ("kiln (tinygrad lattice) computes float ops on {} in the default float32; numpy 2 gives {}")


def creation():
    f = "creation"
    for dt in [np.float32, np.int8, np.int64, np.uint8, np.bool_]:
        yield Case(f"zeros_{dname(dt)}", "zeros", [], np.zeros((2, 3), dt), family=f)
        yield Case(f"ones_{dname(dt)}", "ones", [], np.ones((3,), dt), family=f)
    yield Case("zeros_rank0", "zeros", [], np.zeros((), np.float32), family=f)
    yield Case("ones_zero_size", "ones", [], np.ones((0, 3), np.float32), family=f)
    yield Case("full_f32", "full", [], np.full((2, 2), 3.5, np.float32), attr=[3.5], family=f)
    yield Case("full_int16", "full", [], np.full((3, 1), -7, np.int16), attr=[-7], family=f)
    yield Case("full_uint32_big", "full", [], np.full((2,), 4000000000, np.uint32), attr=[4000000000], family=f)
    yield Case("full_int64_big", "full", [], np.full((2,), -(2**40) - 3, np.int64), attr=[-(2**40) - 3], family=f)
    yield Case("full_bool", "full", [], np.full((2, 2), True), attr=[1], family=f)
    yield Case("full_rank0", "full", [], np.full((), 2.25, np.float32), attr=[2.25], family=f)
    yield Case("full_si_default", "full_si", [], np.full((2, 3), 5, np.int32), attr=[5], family=f)
    yield Case("full_sf_default", "full_sf", [], np.full((2, 3), -1.5, np.float32), attr=[-1.5], family=f)
    for i, (a, b, s) in enumerate([(0, 10, 1), (10, -3, -3), (5, 5, 1), (-4, 7, 2), (3, 0, 1), (0, 1, 5)]):
        yield Case(f"arange_i{i}", "arange_i", [], np.arange(a, b, s, dtype=np.int32), attr=[a, b, s], family=f)
    for i, (a, b, s) in enumerate([(0.5, 3.0, 0.25), (1.0, 0.0, -0.3), (-1.0, 1.0, 0.7)]):
        yield Case(f"arange_f{i}", "arange_f", [], np.arange(a, b, s).astype(np.float32), attr=[a, b, s],
                   dt=np.float32, note="numpy arange of python floats is float64; kiln's default float is float32",
                   family=f)
    yield Case("arange_stop", "arange_stop", [], np.arange(7, dtype=np.int32), attr=[7], family=f)
    yield Case("arange_long", "arange_i", [], np.arange(-5000, 100000, 7, dtype=np.int32), attr=[-5000, 100000, 7],
               family=f)
    yield Case("arange_long_f", "arange_f", [], np.arange(0.0, 1.0, 0.001).astype(np.float32), attr=[0.0, 1.0, 0.001],
               dt=np.float32, note="numpy arange of python floats is float64; kiln's default float is float32",
               family=f)
    for dt in [np.int8, np.int64, np.uint8, np.float32]:
        yield Case(f"arange_d_{dname(dt)}", "arange_d", [], np.arange(0, 10, 3, dtype=dt), attr=[0, 10, 3], family=f)
    yield Case("eye_3", "eye", [], np.eye(3, dtype=np.float32), attr=[3, 3], family=f)
    yield Case("eye_2x4", "eye", [], np.eye(2, 4, dtype=np.float32), attr=[2, 4], family=f)
    yield Case("eye_4x2_int32", "eye", [], np.eye(4, 2, dtype=np.int32), attr=[4, 2], family=f)
    yield Case("eye_bool", "eye", [], np.eye(3, dtype=np.bool_), attr=[3, 3], family=f)
    yield Case("eye_0", "eye", [], np.eye(0, 3, dtype=np.float32), attr=[0, 3], family=f)
    x = f32(2, 3)
    xi = ints(np.int16, 2, 3)
    yield Case("full_like_f32", "full_like", [x], np.full_like(x, 0.75), attr=[0.75], family=f)
    yield Case("full_like_int8", "full_like", [x], np.full_like(x, -3, np.int8), attr=[-3], family=f)
    yield Case("zeros_like_int16", "zeros_like", [xi], np.zeros_like(xi), family=f)
    yield Case("ones_like_uint8", "ones_like", [x], np.ones_like(x, np.uint8), family=f)
    yield Case("ones_like_rank0", "ones_like", [np.float32(3)], np.ones((), np.float32), family=f)
    yield Case("empty_assign", "empty_assign", [x], x, family=f)
    y = f32(2, 3)
    yield Case("assign", "assign", [x, y], y, family=f)
    yield Case("contiguous", "contiguous", [x.T.copy()], x.T, family=f)
    yield Case("detach", "detach", [x], x, family=f)


UNARY_F = [  # name, numpy reference (float64), input range
    ("neg", lambda x: -x, (-3, 3)),
    ("reciprocal", lambda x: 1 / x, (0.2, 3)),
    ("exp", np.exp, (-4, 4)),
    ("exp2", np.exp2, (-4, 4)),
    ("log", np.log, (0.01, 50)),
    ("log2", np.log2, (0.01, 50)),
    ("sqrt", np.sqrt, (0, 50)),
    ("rsqrt", lambda x: 1 / np.sqrt(x), (0.05, 50)),
    ("sin", np.sin, (-7, 7)),
    ("cos", np.cos, (-7, 7)),
    ("tan", np.tan, (-1.3, 1.3)),
    ("abs", np.abs, (-3, 3)),
    ("sign", np.sign, (-3, 3)),
    ("square", np.square, (-3, 3)),
    ("relu", lambda x: np.maximum(x, 0), (-3, 3)),
    ("sigmoid", sigmoid, (-8, 8)),
    ("tanh", np.tanh, (-4, 4)),
    # tanh approximation (tinygrad / torch approximate="tanh")
    ("gelu", lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))), (-4, 4)),
    ("silu", lambda x: x * sigmoid(x), (-6, 6)),
    ("trunc", np.trunc, (-5, 5)),
    ("floor", np.floor, (-5, 5)),
    ("ceil", np.ceil, (-5, 5)),
    ("round", np.round, (-5, 5)),
]


def unary():
    f = "unary"
    for name, ref, (lo, hi) in UNARY_F:
        x = f32(3, 7, lo=lo, hi=hi)
        if name in ("sign", "abs", "relu", "round", "trunc", "floor", "ceil"):
            x.flat[:6] = [0.0, -0.0, 2.5, -2.5, 0.5, -1.5]  # exact zeros and halves
        yield Case(f"{name}_f32", name, [x], ref(x.astype(np.float64)), family=f)
        yield Case(f"{name}_rank0", name, [x.flat[7].copy()], ref(np.float64(x.flat[7])), family=f)
    e = np.zeros((0, 4), np.float32)
    yield Case("exp_zero_size", "exp", [e], np.exp(e), family=f)
    big = np.array([2.5e9, -3.5, 1e20, 8388609.0, -0.0, 4.5, -2.5e9 - 512, 0.49999997], np.float32)
    for name, ref in [("round", np.round), ("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc)]:
        yield Case(f"{name}_large", name, [big], ref(big), family=f)
    for name, ref, lo, hi in [("exp", np.exp, -5, 5), ("log", np.log, 0.1, 9), ("sin", np.sin, -4, 4),
                              ("sqrt", np.sqrt, 0, 9), ("sigmoid", sigmoid, -5, 5)]:
        d = np.random.default_rng(len(name)).uniform(lo, hi, size=(3, 3))
        yield Case(f"{name}_f64", name, [d], ref(d), family=f)
    yield Case("sqrt_nan_inf", "sqrt", [np.array([-1, 0, np.inf, 4], np.float32)],
               np.sqrt(np.array([-1, 0, np.inf, 4], np.float64)), family=f)
    yield Case("log_special", "log", [np.array([0, -1, np.inf, 1], np.float32)],
               np.log(np.array([0, -1, np.inf, 1], np.float64)), family=f)
    yield Case("exp_overflow", "exp", [np.array([100, -100, 0], np.float32)],
               np.exp(np.array([100, -100, 0], np.float32)), family=f)
    yield Case("reciprocal_zero", "reciprocal", [np.array([0.0, -0.0, 2], np.float32)],
               np.array([np.inf, -np.inf, 0.5]), family=f)
    # float ops on integers: cast to float32 first
    for dt in [np.int8, np.int32, np.uint8, np.int64]:
        xi = ints(dt, 2, 5, lo=1 if dt == np.uint8 else -20, hi=40)
        for name, ref in [("sqrt", np.sqrt), ("exp", np.exp), ("sigmoid", sigmoid), ("reciprocal", lambda v: 1 / v)]:
            xx = np.abs(xi) + 1 if name in ("sqrt", "reciprocal") else np.clip(xi, -20, 20)
            xx = xx.astype(dt)
            yield Case(f"{name}_{dname(dt)}", name, [xx], ref(xx.astype(np.float64)), dt=np.float32,
                       note=LATTICE_FLOAT.format(dname(dt), "float16/float64 by input width"), family=f)
    # integer unary: same dtype, wraparound
    for dt in INT_DTYPES:
        xi = ints(dt, 3, 6)
        xi.flat[:2] = [np.iinfo(dt).min, 0]
        with np.errstate(all="ignore"):
            yield Case(f"neg_{dname(dt)}", "neg", [xi], -xi, family=f)
            yield Case(f"square_{dname(dt)}", "square", [xi], np.square(xi), family=f)
            yield Case(f"abs_{dname(dt)}", "abs", [xi], np.abs(xi), family=f)
            yield Case(f"sign_{dname(dt)}", "sign", [xi], np.sign(xi), family=f)
            yield Case(f"relu_{dname(dt)}", "relu", [xi], np.maximum(xi, dt(0)), family=f)
            yield Case(f"bitwise_not_{dname(dt)}", "bitwise_not", [xi], ~xi, family=f)
            yield Case(f"logical_not_{dname(dt)}", "logical_not", [xi], np.logical_not(xi), family=f)
    b = RNG_bool(3, 4)
    yield Case("logical_not_bool", "logical_not", [b], ~b, family=f)
    yield Case("bitwise_not_bool", "bitwise_not", [b], ~b, family=f)
    yield Case("logical_not_f32", "logical_not", [np.array([0.0, 1.5, -0.0, np.nan], np.float32)],
               np.logical_not(np.array([0.0, 1.5, -0.0, np.nan], np.float32)), family=f)


def RNG_bool(*shape):
    from common import RNG
    return RNG.integers(0, 2, size=shape).astype(np.bool_)


BIN_F = [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide),
    ("maximum", np.maximum), ("minimum", np.minimum),
    ("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
    ("eq", np.equal), ("ne", np.not_equal),
]
BIN_I = [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("floordiv", np.floor_divide),
    ("mod", np.mod), ("maximum", np.maximum), ("minimum", np.minimum), ("lt", np.less), ("le", np.less_equal),
    ("gt", np.greater), ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal),
    ("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or), ("bitwise_xor", np.bitwise_xor),
]


def binary():
    f = "binary"
    a, b = f32(4, 5), f32(4, 5)
    b.flat[:4] = a.flat[:4]  # equal elements for the comparisons
    nz = f32(4, 5, lo=0.3, hi=2) * np.where(RNG_bool(4, 5), 1, -1).astype(np.float32)
    for name, ref in BIN_F:
        rhs = nz if name == "div" else b
        yield Case(f"{name}_f32", name, [a, rhs], ref(a.astype(np.float64), rhs.astype(np.float64)).astype(
            ref(a, rhs).dtype), family=f)
    v, col, s0 = f32(5), f32(4, 1), f32()
    yield Case("add_bcast_row", "add", [a, v], a + v, family=f)
    yield Case("mul_bcast_col_row", "mul", [col, v], col * v, family=f)
    yield Case("sub_bcast_rank0", "sub", [s0, a], s0 - a, family=f)
    s1 = f32()
    yield Case("add_rank0_rank0", "add", [s0, s1], s0 + s1, family=f)
    x3, c41 = f32(2, 1, 3), f32(4, 1)
    yield Case("maximum_bcast_3d", "maximum", [x3, c41], np.maximum(x3, c41), family=f)
    z = np.zeros((0, 3), np.float32)
    yield Case("add_zero_size", "add", [z, z], z + z, family=f)
    r3 = f32(3)
    yield Case("add_zero_size_bcast", "add", [z, r3], z + r3, family=f)
    yield Case("lt_zero_size", "lt", [z, np.float32(1)], z < 1, family=f)
    yield Case("floordiv_f32", "floordiv", [a, nz], np.floor_divide(a, nz), family=f)
    yield Case("mod_f32", "mod", [a * 3, nz], np.mod(a * 3, nz), family=f)
    pos = f32(4, 5, lo=0.1, hi=3)
    yield Case("pow_f32", "pow", [pos, a], np.power(pos.astype(np.float64), a), family=f)
    base = np.array([-2, -2, -1.5, 0, 0, 3, -3, 2], np.float32)
    ex = np.array([3, 2, 0.5, 0, 2, -1, 1, 0.5], np.float32)
    with np.errstate(all="ignore"):
        yield Case("pow_special", "pow", [base, ex], np.power(base.astype(np.float64), ex), family=f)
    nan = np.array([np.nan, 1.0, -np.inf, np.nan, 0.0], np.float32)
    oth = np.array([1.0, np.nan, 2.0, np.nan, -0.0], np.float32)
    for name, ref in [("maximum", np.maximum), ("minimum", np.minimum), ("add", np.add), ("lt", np.less),
                      ("eq", np.equal), ("ne", np.not_equal)]:
        yield Case(f"{name}_nan", name, [nan, oth], ref(nan, oth), family=f)
    with np.errstate(all="ignore"):
        p8, e8 = np.array([5, -3, 2, 7], np.int8), np.array([5, 5, 7, 3], np.int8)
        yield Case("pow_int8_wrap", "pow", [p8, e8], np.power(p8, e8), family=f)
    # python scalars (weak): the tensor keeps its dtype
    yield Case("add_sf", "add_sf", [a], a + np.float32(2.5), attr=[2.5], family=f)
    yield Case("mul_si_f32", "mul_si", [a], a * 3, attr=[3], family=f)
    yield Case("rsub_sf", "rsub_sf", [a], 1.5 - a, attr=[1.5], family=f)
    yield Case("rdiv_sf", "rdiv_sf", [nz], 2.0 / nz.astype(np.float64), attr=[2.0], family=f)
    yield Case("pow_sf", "pow_sf", [pos], pos.astype(np.float64) ** 1.7, attr=[1.7], family=f)
    yield Case("pow_si_neg_base", "pow_si", [a], a.astype(np.float64) ** 3, attr=[3], family=f)
    yield Case("rpow_sf", "rpow_sf", [a], 2.0 ** a.astype(np.float64), attr=[2.0], family=f)
    yield Case("maximum_sf", "maximum_sf", [a], np.maximum(a, np.float32(0.25)), attr=[0.25], family=f)
    yield Case("lt_sf", "lt_sf", [a], a < 0.5, attr=[0.5], family=f)
    yield Case("eq_si_f32", "eq_si", [np.array([1, 2, 2.5], np.float32)], np.array([False, True, False]),
               attr=[2], family=f)
    # integers: every dtype, full range (wraparound), numpy floor semantics for // and %
    for dt in INT_DTYPES:
        info = np.iinfo(dt)
        x, y = ints(dt, 4, 6), ints(dt, 4, 6)
        y.flat[:3] = x.flat[:3]
        d = ints(dt, 4, 6, lo=1 if info.min == 0 else -9, hi=9)
        d[d == 0] = 1
        if info.min < 0:
            x[(x == info.min) & (d == -1)] = 0  # INT_MIN // -1 overflows (numpy warns); not a conformance case
            d.flat[:4] = [-1, -3, 3, -7]
            x.flat[:4] = [7, -7, -7, 7]
        with np.errstate(all="ignore"):
            for name, ref in BIN_I:
                rhs = d if name in ("floordiv", "mod") else y
                yield Case(f"{name}_{dname(dt)}", name, [x, rhs], ref(x, rhs), family=f)
            yield Case(f"add_si_{dname(dt)}", "add_si", [x], x + dt(5), attr=[5], family=f)
            yield Case(f"mul_si_{dname(dt)}", "mul_si", [x], x * dt(3), attr=[3], family=f)
            yield Case(f"rsub_si_{dname(dt)}", "rsub_si", [x], dt(7) - x, attr=[7], family=f)
            yield Case(f"lshift_{dname(dt)}", "lshift", [x], x << dt(3), attr=[3], family=f)
            yield Case(f"rshift_{dname(dt)}", "rshift", [x], x >> dt(2), attr=[2], family=f)
            bs, es = ints(dt, 3, 4, lo=0 if info.min == 0 else -3, hi=3), ints(dt, 3, 4, lo=0, hi=4)
            yield Case(f"pow_{dname(dt)}", "pow", [bs, es], np.power(bs, es), family=f)
        yield Case(f"div_{dname(dt)}", "div", [x, d], x.astype(np.float64) / d, dt=np.float32,
                   note=f"true division of {dname(dt)}: kiln float32, numpy float64", family=f)
    i7 = ints(np.int32, 7, lo=-20, hi=20)
    yield Case("floordiv_int32_bcast_rank0", "floordiv", [i7, np.int32(-4)], np.floor_divide(i7, np.int32(-4)),
               family=f)
    z8 = np.zeros((0,), np.int8)
    yield Case("add_zero_size_int8", "add", [z8, z8], z8 + z8, family=f)
    yield Case("mul_rank0_int8", "mul", [np.int8(100), np.int8(3)], np.int8(100) * np.int8(3), family=f)
    # bool
    p, q = RNG_bool(3, 4), RNG_bool(3, 4)
    for name, ref in [("logical_and", np.logical_and), ("logical_or", np.logical_or),
                      ("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                      ("bitwise_xor", np.bitwise_xor), ("eq", np.equal), ("ne", np.not_equal)]:
        yield Case(f"{name}_bool", name, [p, q], ref(p, q), family=f)
    r4 = RNG_bool(4)
    yield Case("logical_and_bcast", "logical_and", [p, r4], np.logical_and(p, r4), family=f)


def where_clip():
    f = "where_clip"
    c, x, y = RNG_bool(4, 5), f32(4, 5), f32(4, 5)
    yield Case("where_f32", "where", [c, x, y], np.where(c, x, y), family=f)
    cb, xb = RNG_bool(4, 1), f32(1, 5)
    yield Case("where_bcast", "where", [cb, xb, np.float32(-1)], np.where(cb, xb, np.float32(-1)), family=f)
    ci = ints(np.int32, 4, 5, lo=-1, hi=1)
    yield Case("where_int_cond", "where", [ci, x, y], np.where(ci, x, y), family=f)
    xi, yi = ints(np.int8, 4, 5), ints(np.int8, 4, 5)
    yield Case("where_int8", "where", [c, xi, yi], np.where(c, xi, yi), family=f)
    yield Case("where_mixed", "where", [c, xi, y], np.where(c, xi, y), dt=np.float32,
               note="where(int8, float32): numpy float32 too (kept for the promotion path)", family=f)
    yield Case("where_sf", "where_sf", [c, x], np.where(c, x, np.float32(0.5)), attr=[0.5], family=f)
    yield Case("where_ss", "where_ss", [c], np.where(c, 1.5, -2.5), attr=[1.5, -2.5], dt=np.float32,
               note="where(cond, python float, python float): numpy float64, kiln default float32", family=f)
    yield Case("where_rank0_cond", "where", [np.bool_(True), x, y], x, family=f)
    z = np.zeros((0, 2), np.float32)
    yield Case("where_zero_size", "where", [np.zeros((0, 2), bool), z, z], z, family=f)
    yield Case("clip_f32", "clip", [x], np.clip(x, -0.5, 0.75), attr=[-0.5, 0.75], family=f)
    yield Case("clip_int8", "clip", [xi], np.clip(xi, -10, 20), attr=[-10, 20], family=f)
    u6 = ints(np.uint32, 6)
    yield Case("clip_uint32", "clip", [u6], np.clip(u6, 5, 3000000000), attr=[5, 3000000000], family=f)


def promotion():
    f = "promotion"
    # (lhs dtype, rhs dtype, kiln result dtype, note when numpy 2 differs)
    pairs = [
        (np.int8, np.uint8, np.int16, None),
        (np.int32, np.uint32, np.int64, None),
        (np.uint8, np.int32, np.int32, None),
        (np.int16, np.uint8, np.int16, None),
        (np.uint32, np.int8, np.int64, None),
        (np.bool_, np.int8, np.int8, None),
        (np.uint8, np.uint32, np.uint32, None),
        (np.int64, np.uint8, np.int64, None),
        (np.int32, np.float32, np.float32, "int32 + float32: numpy 2 float64, tinygrad lattice float32"),
        (np.int64, np.float32, np.float32, "int64 + float32: numpy 2 float64, tinygrad lattice float32"),
        (np.int8, np.float32, np.float32, None),
        (np.uint8, np.float32, np.float32, None),
        (np.bool_, np.float32, np.float32, None),
    ]
    for lt, rt, kt, note in pairs:
        x, y = _mk(lt, (3, 4)), _mk(rt, (4,))
        want = np.add(x, y) if lt != np.bool_ or rt != np.bool_ else x | y
        yield Case(f"promote_add_{dname(lt)}_{dname(rt)}", "add", [x, y], want, dt=kt, note=note, family=f)
        yield Case(f"promote_lt_{dname(lt)}_{dname(rt)}", "lt", [x, y], np.less(x, y), family=f)
    i = _mk(np.int32, (5,))
    yield Case("promote_mul_int32_pyfloat", "mul_sf", [i], i * 2.5, attr=[2.5],
               dt=np.float32, note="int32 tensor * python float: numpy 2 float64, tinygrad float32", family=f)
    i = _mk(np.int8, (5,))
    with np.errstate(all="ignore"):  # weak python int: stays int8 and wraps
        yield Case("promote_add_int8_pyint", "add_si", [i], i + np.int8(100), attr=[100], family=f)
    i = _mk(np.uint8, (5,))
    with np.errstate(all="ignore"):
        yield Case("promote_add_uint8_pyint", "add_si", [i], i + np.uint8(200), attr=[200], family=f)
    i = RNG_bool(5)
    yield Case("promote_add_bool_pyint", "add_si", [i], i.astype(np.int64) + 2, attr=[2],
               dt=np.int32, note="bool tensor + python int: numpy int64 (default int), kiln int32", family=f)
    a, d = f32(3), np.arange(3, dtype=np.float64) / 7
    yield Case("promote_add_f32_f64", "add", [a, d], a.astype(np.float64) + d, family=f)


def _mk(dt, shape):
    if dt == np.bool_:
        return RNG_bool(*shape)
    if dt == np.float32:
        return f32(*shape, lo=-100, hi=100)
    info = np.iinfo(dt)
    return ints(dt, *shape, lo=max(info.min, -100), hi=min(info.max, 100))


def cast_bitcast():
    f = "cast"
    x = f32(4, 6, lo=-100, hi=100)
    x.flat[:4] = [-1.5, -0.5, 0.5, 2.999]
    for dt in INT_DTYPES:
        info = np.iinfo(dt)
        src = np.clip(x, info.min, info.max) if info.min < 0 else np.abs(x)
        yield Case(f"cast_f32_to_{dname(dt)}", "cast", [src], src.astype(dt), family=f)
        xi = ints(dt, 4, 6)
        yield Case(f"cast_{dname(dt)}_to_f32", "cast", [xi], xi.astype(np.float32), family=f)
        yield Case(f"cast_{dname(dt)}_to_bool", "cast", [xi], xi.astype(np.bool_), family=f)
        for dst in INT_DTYPES:
            if dst != dt:
                yield Case(f"cast_{dname(dt)}_to_{dname(dst)}", "cast", [xi], xi.astype(dst), family=f)
    xs = np.array([0.0, -0.0, 1.5, np.nan, -3], np.float32)
    yield Case("cast_f32_to_bool", "cast", [xs], xs.astype(np.bool_), family=f)
    b = RNG_bool(3, 3)
    for dt in [np.float32, np.int8, np.uint32, np.int64]:
        yield Case(f"cast_bool_to_{dname(dt)}", "cast", [b], b.astype(dt), family=f)
    big = np.array([3000000000, 4294967295, 123, 2147483648], np.uint32)
    yield Case("cast_uint32_big_to_f32", "cast", [big], big.astype(np.float32), family=f)
    bigf = np.array([3e9, 4294967040.0, 123, 2147483648.0], np.float32)  # all exactly representable in uint32
    yield Case("cast_f32_big_to_uint32", "cast", [bigf], bigf.astype(np.uint32), family=f)
    i64 = np.array([2**40 + 1, -(2**50), 7], np.int64)
    yield Case("cast_int64_big_to_f32", "cast", [i64], i64.astype(np.float32), family=f)
    yield Case("cast_f32_to_f64", "cast", [x], x.astype(np.float64), family=f)
    i53 = np.array([2**53 - 1, -(2**52) - 3, 5], np.int64)
    yield Case("cast_int64_to_f64", "cast", [i53], i53.astype(np.float64), family=f)
    d = np.array([1e300, -2.5, 3.0000001, 1e-300], np.float64)
    yield Case("cast_f64_to_f32", "cast", [d], d.astype(np.float32), family=f)
    yield Case("cast_rank0", "cast", [np.float32(-7.75)], np.int32(-7), family=f)
    yield Case("cast_zero_size", "cast", [np.zeros((0, 2), np.float32)], np.zeros((0, 2), np.int8), family=f)
    f = "bitcast"
    for src, dst in [(np.float32, np.int32), (np.float32, np.uint32), (np.int32, np.float32), (np.int8, np.uint8),
                     (np.uint8, np.int8), (np.uint32, np.int32)]:
        v = f32(3, 4) if src == np.float32 else ints(src, 3, 4)
        if src == np.int32:
            v = f32(3, 4).view(np.int32)  # finite float bit patterns
        yield Case(f"bitcast_{dname(src)}_to_{dname(dst)}", "bitcast", [v], v.view(dst), family=f)
    v = f32(3, 2)
    yield Case("bitcast_f32_to_uint8", "bitcast", [v], v.view(np.uint8), family=f)
    u = f32(2, 2).view(np.uint8)
    yield Case("bitcast_uint8_to_f32", "bitcast", [u], u.view(np.float32), family=f)
    h = ints(np.int16, 2, 4)
    yield Case("bitcast_int16_to_int32", "bitcast", [h], h.view(np.int32), family=f)
    q = ints(np.int64, 2, 3)
    yield Case("bitcast_int64_to_int32", "bitcast", [q], q.view(np.int32), family=f)
    yield Case("bitcast_int64_to_uint8", "bitcast", [q], q.view(np.uint8), family=f)
    w8 = ints(np.uint8, 3, 16)
    yield Case("bitcast_uint8_to_int64", "bitcast", [w8], w8.view(np.int64), family=f)
    yield Case("bitcast_zero_size", "bitcast", [np.zeros((0, 4), np.uint8)], np.zeros((0, 1), np.float32), family=f)
    yield Case("bitcast_rank0", "bitcast", [np.float32(1.0)], np.float32(1.0).view(np.int32), family=f)


def cases():
    for gen in (creation, unary, binary, where_clip, promotion, cast_bitcast):
        yield from gen()
