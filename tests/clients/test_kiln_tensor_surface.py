"""kiln.Tensor's tinygrad surface (issue #25) through a real kilnd: creation (eye, arange,
linspace, rand, randn, randint, uniform, normal), cat / stack, conv2d, argmax / argmin, strided
and negative-step slicing, `device=`; and the package beside tritonclient.grpc in one process,
installed with `pip install ./clients/python`.

References are independent of kiln: numpy for indexing, concatenation, argmax and the random
distributions (a Kolmogorov-Smirnov statistic against the exact CDF), tinygrad 0.14 (CPU) for
conv2d, eye and arange."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import KilnError, Tensor

REPO = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(11)
X = RNG.standard_normal((4, 5, 6)).astype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def server(kilnd):
    yield kiln.set_server(kilnd.url)


def tinygrad():
    os.environ.setdefault("DEV", "CPU")  # the reference runs on the CPU (clang), never a GPU
    from tinygrad import Tensor as TinyTensor
    return TinyTensor


# ** creation **

@pytest.mark.parametrize("n,m", [(1, None), (4, None), (3, 5), (5, 2), (0, None)])
def test_eye_matches_numpy_and_tinygrad(n, m):
    got = Tensor.eye(n, m).numpy()
    np.testing.assert_array_equal(got, np.eye(n, m, dtype=np.float32))
    if n:
        np.testing.assert_array_equal(got, tinygrad().eye(n, m).numpy())


@pytest.mark.parametrize("args", [(5,), (2, 9), (10, 1, -3), (0.5, 3.0, 0.5), (-4, 4, 3)])
def test_arange_matches_tinygrad(args):
    got = Tensor.arange(*args)
    ref = tinygrad().arange(*args).numpy()
    assert got.shape == ref.shape and got.numpy().dtype == ref.dtype, (got, ref.dtype)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose((got * 2 + 1).numpy(), ref * 2 + 1, rtol=1e-6)


def test_linspace_and_likes():
    np.testing.assert_allclose(Tensor.linspace(-1, 2, 7).numpy(),
                               np.linspace(-1, 2, 7, dtype=np.float32), rtol=1e-6)
    t = Tensor(X)
    np.testing.assert_array_equal(t.zeros_like().numpy(), np.zeros_like(X))
    np.testing.assert_array_equal(t.full_like(2.5).numpy(), np.full_like(X, 2.5))
    assert t.rand_like().shape == X.shape


def ks_statistic(samples: np.ndarray, cdf) -> float:
    x = np.sort(samples.astype(np.float64).ravel())
    n = len(x)
    f = np.array([cdf(v) for v in x])
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


N = 20000
KS_LIMIT = 1.95 / math.sqrt(N)  # the 0.001 critical value; the seeds are fixed, so no flakes


def test_rand_is_uniform_and_seeded():
    Tensor.manual_seed(1234)
    a = Tensor.rand(N)
    Tensor.manual_seed(1234)
    b = Tensor.rand(100, 200)
    assert a.dtype == np.float32 and b.shape == (100, 200)
    av, bv = a.numpy(), b.numpy()
    np.testing.assert_array_equal(av, bv.ravel())  # same seed, same values
    assert av.min() >= 0.0 and av.max() < 1.0
    assert ks_statistic(av, lambda v: min(max(v, 0.0), 1.0)) < KS_LIMIT
    Tensor.manual_seed(1235)
    assert not np.array_equal(Tensor.rand(N).numpy(), av)


def test_randn_is_standard_normal():
    Tensor.manual_seed(7)
    v = Tensor.randn(N).numpy()
    assert v.dtype == np.float32
    assert ks_statistic(v, lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))) < KS_LIMIT


def test_uniform_and_normal_are_computed_from_rand_on_kilnd():
    Tensor.manual_seed(5)
    u = Tensor.uniform(64, 3, low=-2.0, high=3.0).numpy()
    Tensor.manual_seed(5)
    r = Tensor.rand(64, 3).numpy()
    np.testing.assert_allclose(u, r * 5.0 - 2.0, rtol=1e-6, atol=1e-6)
    Tensor.manual_seed(6)
    g = Tensor.normal(10, mean=1.5, std=0.25).numpy()
    Tensor.manual_seed(6)
    np.testing.assert_allclose(g, Tensor.randn(10).numpy() * 0.25 + 1.5, rtol=1e-6, atol=1e-6)


def test_randint_range():
    Tensor.manual_seed(2)
    v = Tensor.randint(5000, low=-3, high=4).numpy()
    assert v.dtype == np.int32 and set(np.unique(v)) == set(range(-3, 4))
    with pytest.raises(ValueError):
        Tensor.randint(3, low=2, high=2)


# ** strided slicing **

INDICES = [
    np.s_[::2], np.s_[1::2, ::-1], np.s_[::-1, ::-2, ::-3], np.s_[..., 5:0:-2], np.s_[None, 2],
    np.s_[-1, None, 1:4:2, ...], np.s_[3:0:-1, -2], np.s_[1:3, :, ::4], np.s_[::7],
    np.s_[:, 10:20], np.s_[..., None], np.s_[2, 4, 5], np.s_[-3:, ::-1, 1:-1:2],
]


@pytest.mark.parametrize("index", INDICES, ids=[str(i) for i in range(len(INDICES))])
def test_basic_indexing_matches_numpy(index):
    got = Tensor(X)[index]
    want = X[index]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


def test_bad_indices_raise_locally():
    for index in (np.s_[4], np.s_[0, 0, 0, 0], np.s_[..., ...], np.s_[::0], np.s_[[1, 2]]):
        with pytest.raises((IndexError, ValueError)):
            Tensor(X)[index]


# ** cat / stack **

def test_cat_and_stack_match_numpy():
    a, b = X[:2], RNG.standard_normal((3, 5, 6)).astype(np.float32)
    np.testing.assert_array_equal(Tensor.cat(Tensor(a), Tensor(b)).numpy(), np.concatenate([a, b]))
    c = RNG.standard_normal((4, 2, 6)).astype(np.float32)
    np.testing.assert_array_equal(Tensor(X).cat(Tensor(c), Tensor(X), dim=1).numpy(),
                                  np.concatenate([X, c, X], axis=1))
    np.testing.assert_array_equal(Tensor(X).cat(Tensor(X), dim=-1).numpy(),
                                  np.concatenate([X, X], axis=-1))
    i = np.arange(6, dtype=np.int32).reshape(1, 6)
    mixed = Tensor.cat(Tensor(i), Tensor(X[0, :1]), dim=0).numpy()  # int32 with float32
    np.testing.assert_array_equal(mixed, np.concatenate([i, X[0, :1]]))
    for dim in (0, 1, 3, -1):
        np.testing.assert_array_equal(Tensor.stack(Tensor(X), Tensor(X * 2), dim=dim).numpy(),
                                      np.stack([X, X * 2], axis=dim))
    with pytest.raises(ValueError):
        Tensor.cat(Tensor(X), Tensor(c))


# ** conv2d **

CONVS = [
    dict(),
    dict(padding=1),
    dict(stride=2, padding=(1, 2)),
    dict(dilation=2, padding=2),
    dict(groups=2, stride=(2, 1), dilation=(1, 2), padding=(1, 0)),
    dict(padding=(0, 1, 2, 1), bias=True),
    dict(groups=4, bias=True),
]


@pytest.mark.parametrize("kw", CONVS, ids=[str(i) for i in range(len(CONVS))])
def test_conv2d_matches_tinygrad(kw):
    kw = dict(kw)
    groups = kw.get("groups", 1)
    x = RNG.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w = RNG.standard_normal((8, 4 // groups, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32) if kw.pop("bias", False) else None
    tg = tinygrad()
    ref = tg(x).conv2d(tg(w), None if b is None else tg(b), **kw).numpy()
    got = Tensor(x).conv2d(Tensor(w), None if b is None else Tensor(b), **kw).numpy()
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_conv2d_shape_errors():
    with pytest.raises(ValueError):
        Tensor(X).conv2d(Tensor(np.ones((2, 5, 3, 3), np.float32)))  # 3-d input
    x = Tensor(np.ones((1, 3, 4, 4), np.float32))
    with pytest.raises(ValueError):
        x.conv2d(Tensor(np.ones((2, 2, 3, 3), np.float32)))  # channels
    with pytest.raises(ValueError):
        x.conv2d(Tensor(np.ones((2, 3, 5, 5), np.float32)))  # kernel larger than the input


# ** argmax / argmin **

def test_argmax_argmin_match_numpy_with_ties():
    m = np.round(RNG.standard_normal((6, 7)), 0).astype(np.float32)  # many ties
    for axis in (None, 0, 1, -1):
        got = Tensor(m).argmax(axis).numpy()
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, np.argmax(m, axis=axis))
        np.testing.assert_array_equal(Tensor(m).argmin(axis).numpy(), np.argmin(m, axis=axis))
    np.testing.assert_array_equal(Tensor(m).argmax(1, keepdim=True).numpy(),
                                  np.argmax(m, axis=1)[:, None])
    i = np.array([[3, 9, 9], [1, 0, 2]], np.int32)
    np.testing.assert_array_equal(Tensor(i).argmax(1).numpy(), np.argmax(i, axis=1))


# ** device= **

def test_device():
    cpu = Tensor(X, device="CPU")
    assert cpu.device == "CPU" and (cpu * 2).device == "CPU"
    np.testing.assert_allclose((cpu * 2).sum(1).numpy(), (X * 2).sum(1), rtol=1e-5)
    np.testing.assert_array_equal(Tensor.eye(3, device="CPU").numpy(), np.eye(3))
    Tensor.manual_seed(0)
    assert Tensor.rand(2, 2, device="CPU").device == "CPU"
    # Tensors on different devices do not mix; .to() moves one.
    other = Tensor(X, device="INTERP")
    with pytest.raises(ValueError, match="different devices"):
        cpu + other
    np.testing.assert_allclose((cpu + other.to("CPU")).numpy(), X * 2, rtol=1e-6)
    # kilnd runs the graph where asked (the client checks every kernel's device in the response and
    # raises FAILED_PRECONDITION otherwise); a device kilnd does not have is an error naming it.
    np.testing.assert_allclose((other * 3).numpy(), X * 3, rtol=1e-6)
    with pytest.raises(KilnError) as err:
        (Tensor(X, device="CL:97") * 3).numpy()
    assert "CL:97" in err.value.message, err.value.message


# ** packaging: beside tritonclient, installed with pip **

COEXIST = r"""
import sys
import numpy as np
{first}
{second}
import kiln
import tritonclient.grpc as grpcclient
assert kiln.__file__.startswith(sys.argv[2]), kiln.__file__
url = sys.argv[1]
a = np.arange(16, dtype=np.float32).reshape(1, 16)
out = kiln.Client(url).infer("add_sub", {{"INPUT0": a, "INPUT1": np.ones_like(a)}})
np.testing.assert_array_equal(out["OUTPUT0"], a + 1)
c = grpcclient.InferenceServerClient(url=url)
inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
inputs[0].set_data_from_numpy(a)
inputs[1].set_data_from_numpy(a)
np.testing.assert_array_equal(c.infer("add_sub", inputs).as_numpy("OUTPUT0"), a * 2)
kiln.set_server(url)
np.testing.assert_array_equal((kiln.Tensor(a) @ kiln.Tensor.eye(16)).numpy(), a)
print("ok")
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """`pip install ./clients/python` into a folder of its own (no index: the dependencies are
    the venv's)."""
    target = tmp_path_factory.mktemp("pip_target")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-build-isolation", "--no-index", "--target", str(target),
                        "./clients/python"], cwd=REPO, capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "kiln" / "kserve" / "grpc_service_pb2.py").is_file()
    return target


@pytest.mark.parametrize("order", ["kiln first", "tritonclient first"])
def test_pip_installed_package_works_beside_tritonclient(kilnd, installed, order, tmp_path):
    imports = ["import kiln", "import tritonclient.grpc"]
    if order == "tritonclient first":
        imports.reverse()
    code = COEXIST.format(first=imports[0], second=imports[1])
    env = dict(os.environ, PYTHONPATH=str(installed))
    r = subprocess.run([sys.executable, "-c", code, kilnd.url, str(installed)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
