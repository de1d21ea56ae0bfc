#!/usr/bin/env python3
"""Writes the gradient test cases for gradient_test.cc: inputs (numpy, seed 0) and numpy's analytic
gradients of loss = sum(f(inputs) * w), w a random upstream gradient (the last input).

Format (text, one record per line):
  case <name>
  input <ndim> <dims...> <values...>        (one per input, the upstream w last)
  grad <index> <values...>                  (analytic gradient of input <index>)
  end
"""
import sys

import numpy as np

rng = np.random.default_rng(0)
LN2 = np.log(2.0)


def U(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape)


def P(*shape):
    return U(*shape, lo=0.5, hi=2.0)


CASES = []


def case(name, inputs, out_shape, grads):  # every differentiable op has numpy's analytic gradient (issue #4)
    w = U(*out_shape)
    g = grads(w, *inputs)
    CASES.append((name, list(inputs) + [w], g))


def sig(x):
    return 1 / (1 + np.exp(-x))


# ** unary **
x = U(3, 4); case("neg", [x], x.shape, lambda G, x: [-G])
x = P(3, 4); case("reciprocal", [x], x.shape, lambda G, x: [-G / x**2])
x = U(3, 4); case("exp", [x], x.shape, lambda G, x: [G * np.exp(x)])
x = U(3, 4); case("exp2", [x], x.shape, lambda G, x: [G * np.exp2(x) * LN2])
x = P(3, 4); case("log", [x], x.shape, lambda G, x: [G / x])
x = P(3, 4); case("log2", [x], x.shape, lambda G, x: [G / (x * LN2)])
x = P(3, 4); case("sqrt", [x], x.shape, lambda G, x: [G / (2 * np.sqrt(x))])
x = P(3, 4); case("rsqrt", [x], x.shape, lambda G, x: [-0.5 * G * x**-1.5])
x = U(3, 4); case("sin", [x], x.shape, lambda G, x: [G * np.cos(x)])
x = U(3, 4); case("cos", [x], x.shape, lambda G, x: [-G * np.sin(x)])
x = U(3, 4); case("relu", [x], x.shape, lambda G, x: [G * (x > 0)])
x = U(3, 4); case("sigmoid", [x], x.shape, lambda G, x: [G * sig(x) * (1 - sig(x))])
x = U(3, 4); case("tanh", [x], x.shape, lambda G, x: [G * (1 - np.tanh(x) ** 2)])
x = U(3, 4); case("square", [x], x.shape, lambda G, x: [2 * x * G])
x = U(3, 4); case("abs", [x], x.shape, lambda G, x: [G * np.sign(x)])
x = U(3, 4); case("trunc", [x], x.shape, lambda G, x: [np.zeros_like(x)])
x = U(3, 4); case("cast", [x], x.shape, lambda G, x: [G])
def gelu_grad(G, x):  # tanh approximation
    k = np.sqrt(2 / np.pi)
    t = np.tanh(k * (x + 0.044715 * x**3))
    return [G * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * k * (1 + 3 * 0.044715 * x**2))]


x = U(3, 4); case("gelu", [x], x.shape, lambda G, x: gelu_grad(G, x))
x = U(3, 4); case("silu", [x], x.shape, lambda G, x: [G * (sig(x) + x * sig(x) * (1 - sig(x)))])
# ** binary **
x, y = U(3, 4), U(3, 4); case("add", [x, y], x.shape, lambda G, x, y: [G, G])
x, y = U(3, 4), U(3, 4); case("sub", [x, y], x.shape, lambda G, x, y: [G, -G])
x, y = U(3, 4), U(3, 4); case("mul", [x, y], x.shape, lambda G, x, y: [G * y, G * x])
x, y = U(3, 4), P(3, 4); case("div", [x, y], x.shape, lambda G, x, y: [G / y, -G * x / y**2])
x, y = P(3, 4), U(3, 4); case("pow", [x, y], x.shape, lambda G, x, y: [G * y * x ** (y - 1), G * x**y * np.log(x)])
x, y = U(3, 4), U(3, 4)
y[0, :2] = x[0, :2]  # ties split 0.5 / 0.5
case("maximum_ties", [x, y], x.shape, lambda G, x, y: [G * ((x > y) + 0.5 * (x == y)), G * ((x < y) + 0.5 * (x == y))])
x, y = U(3, 4), U(3, 4); case("maximum", [x, y], x.shape, lambda G, x, y: [G * (x > y), G * (x < y)])
x, y = U(3, 4), U(3, 4); case("minimum", [x, y], x.shape, lambda G, x, y: [G * (x < y), G * (x > y)])
x, y, c = U(3, 4), U(3, 4), U(3, 4)
case("where", [x, y, c], x.shape, lambda G, x, y, c: [G * (c > 0), G * (c <= 0), np.zeros_like(c)])
x, y = U(3, 1), U(1, 4); case("broadcast_add", [x, y], (3, 4), lambda G, x, y: [G.sum(1, keepdims=True), G.sum(0, keepdims=True)])
x, y = U(3, 4), U(4); case("broadcast_mul", [x, y], (3, 4), lambda G, x, y: [G * y, (G * x).sum(0)])
x = U(3, 4); case("reuse", [x], x.shape, lambda G, x: [G * (2 * x + 3 * x**2)])  # x*x + x*x*x: contributions add
# ** reductions **
x = U(3, 4); case("sum_axis", [x], (3,), lambda G, x: [np.broadcast_to(G[:, None], x.shape)])
x = U(3, 4); case("sum_all", [x], (), lambda G, x: [np.full(x.shape, G)])
x = U(3, 4); case("mean", [x], (4,), lambda G, x: [np.broadcast_to(G[None, :] / 3, x.shape)])


def max_grad(G, x, axis):
    m = x.max(axis, keepdims=True)
    is_max = (x == m).astype(np.float64)
    return [is_max / is_max.sum(axis, keepdims=True) * np.expand_dims(G, axis)]


x = U(3, 4); x[0, 1] = x[0, 3] = 5.0; x[2, :] = 1.0  # ties share the gradient
case("max_axis_ties", [x], (3,), lambda G, x: max_grad(G, x, 1))
x = U(3, 4); case("max_axis", [x], (4,), lambda G, x: max_grad(G, x, 0))
x = U(3, 4); case("min_axis", [x], (3,), lambda G, x: max_grad(G, -x, 1))  # min = -max(-x)


def prod_grad(G, x):
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = np.prod(np.delete(x[i], j)) * G[i]
    return [out]


x = U(3, 4); x[1, 2] = 0.0; x[2, 0] = x[2, 3] = 0.0  # one zero, two zeros
case("prod_axis", [x], (3,), prod_grad)
# ** movement **
x = U(3, 4); case("reshape", [x], (2, 6), lambda G, x: [G.reshape(3, 4)])
x = U(2, 3, 4); case("permute", [x], (4, 2, 3), lambda G, x: [G.transpose(1, 2, 0)])
x = U(3, 1); case("expand", [x], (3, 4), lambda G, x: [G.sum(1, keepdims=True)])
x = U(3, 4); case("pad", [x], (6, 5), lambda G, x: [G[1:4, 0:4]])


def shrink_grad(G, x):
    out = np.zeros_like(x)
    out[1:3, 1:4] = G
    return [out]


x = U(3, 4); case("shrink", [x], (2, 3), shrink_grad)
x = U(3, 4); case("flip", [x], (3, 4), lambda G, x: [G[::-1, :]])
x = U(3, 4); case("contiguous", [x], (3, 4), lambda G, x: [G])
x = U(3, 4); case("detach", [x], (3, 4), lambda G, x: [G * x])  # detach(x) * x
# ** composites **
x, y = U(3, 4), U(4, 5); case("matmul", [x, y], (3, 5), lambda G, x, y: [G @ y.T, x.T @ G])


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


x = U(3, 4); case("softmax", [x], (3, 4), lambda G, x: [softmax(x) * (G - (G * softmax(x)).sum(-1, keepdims=True))])
x = U(3, 4); case("log_softmax", [x], (3, 4), lambda G, x: [G - softmax(x) * G.sum(-1, keepdims=True)])


def conv2d_grad(G, x, w):  # valid cross-correlation, stride 1: out[n,o,i,j] = sum x[n,c,i+p,j+q] w[o,c,p,q]
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    kh, kw = w.shape[2:]
    oh, ow = G.shape[2:]
    for p in range(kh):
        for q in range(kw):
            dx[:, :, p:p + oh, q:q + ow] += np.einsum("noij,oc->ncij", G, w[:, :, p, q])
            dw[:, :, p, q] = np.einsum("noij,ncij->oc", G, x[:, :, p:p + oh, q:q + ow])
    return [dx, dw]


def conv2d_strided_grad(stride, pad):  # out[n,o,i,j] = sum xp[n,c,i*sh+p,j*sw+q] w[o,c,p,q], xp = x zero-padded
    sh, sw = stride

    def grad(G, x, w):
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        dxp, dw = np.zeros_like(xp), np.zeros_like(w)
        kh, kw = w.shape[2:]
        oh, ow = G.shape[2:]
        for p in range(kh):
            for q in range(kw):
                rows, cols = slice(p, p + sh * (oh - 1) + 1, sh), slice(q, q + sw * (ow - 1) + 1, sw)
                dxp[:, :, rows, cols] += np.einsum("noij,oc->ncij", G, w[:, :, p, q])
                dw[:, :, p, q] = np.einsum("noij,ncij->oc", G, xp[:, :, rows, cols])
        return [dxp[:, :, pad:pad + x.shape[2], pad:pad + x.shape[3]], dw]
    return grad


def windows(x):  # (N, C, H, W) -> (N, C, H/2, W/2, 4): the 2x2 stride-2 windows
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)


def unwindows(y, shape):
    n, c, h, w = shape
    return y.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(shape)


def max_pool_grad(G, x):  # random inputs: no ties inside a window
    win = windows(x)
    hot = (win == win.max(-1, keepdims=True)).astype(np.float64)
    return [unwindows(hot * G[..., None], x.shape)]


def layernorm_grad(G, x, eps=1e-5):  # over the last dim, no affine
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)
    return [rstd * (G - G.mean(-1, keepdims=True) - xhat * (G * xhat).mean(-1, keepdims=True))]


LABELS = np.array([1, 0, 4, 2])  # as gradient_test.cc's cross_entropy


def cross_entropy_grad(G, x):  # mean over rows of -log_softmax(x)[label]
    onehot = np.eye(x.shape[1])[LABELS]
    return [G * (softmax(x) - onehot) / x.shape[0]]


x, w_ = U(2, 2, 5, 5), U(3, 2, 3, 3); case("conv2d", [x, w_], (2, 3, 3, 3), conv2d_grad)
# Strided convs (their own gradient path in engine/tensor/nn_ops.cc): padded (also with Ci * KH * KW >= 64, whose
# weight gradient is the channels-last matmul), a row and column no window reaches ((6 - 3) % 2 = 1), 1x1
# downsampling, and strides (2, 3) with a remainder along one dim only.
x, w_ = U(2, 2, 7, 7), U(3, 2, 3, 3); case("conv2d_s2p1", [x, w_], (2, 3, 4, 4), conv2d_strided_grad((2, 2), 1))
x, w_ = U(1, 8, 7, 7), U(4, 8, 3, 3); case("conv2d_s2p1_wide", [x, w_], (1, 4, 4, 4), conv2d_strided_grad((2, 2), 1))
x, w_ = U(1, 2, 6, 6), U(3, 2, 3, 3); case("conv2d_s2_rem", [x, w_], (1, 3, 2, 2), conv2d_strided_grad((2, 2), 0))
x, w_ = U(1, 4, 5, 5), U(3, 4, 1, 1); case("conv2d_1x1s2", [x, w_], (1, 3, 3, 3), conv2d_strided_grad((2, 2), 0))
x, w_ = U(1, 2, 7, 8), U(2, 2, 3, 3); case("conv2d_s23p1", [x, w_], (1, 2, 4, 3), conv2d_strided_grad((2, 3), 1))
x = U(1, 2, 4, 4); case("max_pool2d", [x], (1, 2, 2, 2), max_pool_grad)
x = U(1, 2, 4, 4); case("avg_pool2d", [x], (1, 2, 2, 2), lambda G, x: [unwindows(np.repeat(G[..., None] / 4, 4, -1), x.shape)])
x = U(3, 5); case("layernorm", [x], (3, 5), layernorm_grad)
x = U(4, 5); case("cross_entropy", [x], (), cross_entropy_grad)
x, y = U(2, 4), U(3, 4); case("cat", [x, y], (5, 4), lambda G, x, y: [G[:2], G[2:]])
x, y = U(3, 4), U(3, 4); case("stack", [x, y], (3, 2, 4), lambda G, x, y: [G[:, 0], G[:, 1]])
x = U(3, 4); case("var", [x], (3,), lambda G, x: [G[:, None] * 2 * (x - x.mean(1, keepdims=True)) / 3])


def fmt(a):
    return " ".join(repr(float(v)) for v in np.asarray(a, dtype=np.float64).ravel())


with open(sys.argv[1], "w") as f:
    for name, inputs, grads in CASES:
        f.write(f"case {name}\n")
        for a in inputs:
            a = np.asarray(a)
            f.write(f"input {a.ndim} {' '.join(str(d) for d in a.shape)} {fmt(a)}\n")
        for i, g in enumerate(grads or []):
            f.write(f"grad {i} {fmt(g)}\n")
        f.write("end\n")
