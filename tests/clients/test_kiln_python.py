"""The Python package `kiln` against a live kilnd: kiln.Tensor expressions realized through
kiln.v1.Engine/Execute compared with numpy (the independent reference), the Client's KServe
calls, and a check that the committed generated modules match proto/."""

from __future__ import annotations

import filecmp
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import KilnError, Tensor

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def server(kilnd):
    client = kiln.set_server(kilnd.url)
    yield client


RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
C = RNG.standard_normal((4, 5)).astype(np.float32)
V = RNG.standard_normal(4).astype(np.float32)
P = (np.abs(RNG.standard_normal((2, 3))) + 0.5).astype(np.float32)
X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
W3 = RNG.standard_normal((2, 4, 3)).astype(np.float32)
I = np.arange(12, dtype=np.int32).reshape(3, 4)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# (name, kiln expression, numpy reference). Each kiln expression builds a fresh lazy graph.
EXPRESSIONS = [
    ("add", lambda: Tensor(A) + Tensor(B), lambda: A + B),
    ("sub", lambda: Tensor(A) - Tensor(B), lambda: A - B),
    ("mul", lambda: Tensor(A) * Tensor(B), lambda: A * B),
    ("div", lambda: Tensor(A) / Tensor(P[:1, :1]), lambda: A / P[:1, :1]),
    ("scalar ops", lambda: 2.0 * Tensor(A) - 1.5, lambda: 2.0 * A - 1.5),
    ("rsub rdiv", lambda: 1.0 - 3.0 / Tensor(P), lambda: 1.0 - 3.0 / P),
    ("neg", lambda: -Tensor(A), lambda: -A),
    ("broadcast row", lambda: Tensor(A) + Tensor(V), lambda: A + V),
    ("broadcast col", lambda: Tensor(A) * Tensor(A[:, :1]), lambda: A * A[:, :1]),
    ("matmul", lambda: Tensor(A) @ Tensor(C), lambda: A @ C),
    ("matvec", lambda: Tensor(C.T) @ Tensor(V), lambda: C.T @ V),
    ("vecmat", lambda: Tensor(V) @ Tensor(C), lambda: V @ C),
    ("batched matmul", lambda: Tensor(X3) @ Tensor(W3), lambda: X3 @ W3),
    ("sum all", lambda: Tensor(A).sum(), lambda: A.sum()),
    ("sum axis", lambda: Tensor(A).sum(axis=1), lambda: A.sum(axis=1)),
    ("sum keepdim", lambda: Tensor(X3).sum(axis=(0, 2), keepdim=True),
     lambda: X3.sum(axis=(0, 2), keepdims=True)),
    ("max axis", lambda: Tensor(A).max(axis=0), lambda: A.max(axis=0)),
    ("min all", lambda: Tensor(A).min(), lambda: A.min()),
    ("mean", lambda: Tensor(X3).mean(axis=-1), lambda: X3.mean(axis=-1)),
    ("var", lambda: Tensor(A).var(axis=1), lambda: A.var(axis=1)),
    ("reshape", lambda: Tensor(A).reshape(2, -1) * 2, lambda: A.reshape(2, -1) * 2),
    ("permute", lambda: Tensor(X3).permute(2, 0, 1) + 1, lambda: X3.transpose(2, 0, 1) + 1),
    ("transpose T", lambda: Tensor(A).T @ Tensor(B), lambda: A.T @ B),
    ("expand", lambda: Tensor(V).reshape(1, 4).expand(3, 4) * Tensor(A),
     lambda: np.broadcast_to(V.reshape(1, 4), (3, 4)) * A),
    ("pad", lambda: Tensor(A).pad(((1, 0), (2, 1))), lambda: np.pad(A, ((1, 0), (2, 1)))),
    ("shrink", lambda: Tensor(X3).shrink(((0, 1), (1, 3), None)),
     lambda: X3[0:1, 1:3, :]),
    ("getitem", lambda: Tensor(X3)[1, :, 1:3], lambda: X3[1, :, 1:3]),
    ("relu", lambda: Tensor(A).relu(), lambda: np.maximum(A, 0)),
    ("softmax", lambda: Tensor(A).softmax(), lambda: softmax(A)),
    ("softmax axis 0", lambda: Tensor(X3).softmax(axis=0), lambda: softmax(X3, axis=0)),
    ("log_softmax", lambda: Tensor(A).log_softmax(),
     lambda: np.log(softmax(A.astype(np.float64))).astype(np.float32)),
    ("exp log sqrt", lambda: Tensor(P).log().exp() + Tensor(P).sqrt(),
     lambda: np.exp(np.log(P)) + np.sqrt(P)),
    ("sigmoid", lambda: Tensor(A).sigmoid(), lambda: 1 / (1 + np.exp(-A))),
    ("tanh", lambda: Tensor(A).tanh(), lambda: np.tanh(A)),
    ("pow", lambda: Tensor(A) ** 3, lambda: A ** 3),
    ("where", lambda: (Tensor(A) < Tensor(B)).where(Tensor(A), Tensor(B)),
     lambda: np.where(A < B, A, B)),
    ("maximum minimum", lambda: Tensor(A).maximum(Tensor(B)) - Tensor(A).minimum(0.25),
     lambda: np.maximum(A, B) - np.minimum(A, 0.25)),
    ("int arithmetic", lambda: Tensor(I) * 3 + 1, lambda: I * 3 + 1),
    ("int mean", lambda: Tensor(I).mean(), lambda: np.float32(I.mean())),
    ("mlp layer", lambda: (Tensor(A) @ Tensor(C) + Tensor(C[0])).relu().sum(axis=1),
     lambda: np.maximum(A @ C + C[0], 0).sum(axis=1)),
    ("zeros ones full", lambda: Tensor.ones(3, 4) * 2 + Tensor.zeros((3, 4)) + Tensor.full((3, 4), 0.5),
     lambda: np.full((3, 4), 2.5, np.float32)),
]


@pytest.mark.parametrize("name,expr,ref", EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_expression_matches_numpy(name, expr, ref):
    got_t = expr()
    want = np.asarray(ref())
    assert got_t.shape == want.shape, (got_t.shape, want.shape)
    got = got_t.numpy()
    assert got.shape == want.shape
    if want.dtype.kind in "iub":
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    else:
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_at_least_30_expressions():
    assert len(EXPRESSIONS) >= 30


def test_item_and_reuse_of_realized_tensors():
    t = Tensor(A).sum()
    assert t.item() == pytest.approx(float(A.sum()), rel=1e-5)
    # A realized tensor feeds later graphs as an input.
    u = Tensor(A) @ Tensor(C)
    u.realize()
    np.testing.assert_allclose((u * 2).numpy(), (A @ C) * 2, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        Tensor(A).item()


def test_shape_errors_are_raised_locally():
    with pytest.raises(ValueError):
        Tensor(A) @ Tensor(A)
    with pytest.raises(ValueError):
        Tensor(A).reshape(5, 5)
    with pytest.raises(ValueError):
        Tensor(A) + Tensor(C)


def test_server_errors_raise_kiln_error():
    from kiln.v1 import graph_pb2
    g = graph_pb2.Graph(name="bad")
    g.nodes.add(op="CUSTOM", dtype="float32")  # source-text ops never come from the wire
    g.outputs.add(name="y", node=0)
    with pytest.raises(KilnError) as err:
        kiln.default_client().execute(g)
    assert err.value.code == "INVALID_ARGUMENT"


def test_client_kserve_calls(kilnd):
    with kiln.Client(kilnd.url) as c:
        assert c.live() and c.ready()
        assert {m["name"] for m in c.models()} >= {"add_sub", "reduce_sum"}
        out = c.infer("add_sub", {"INPUT0": A[:, :4].repeat(4, axis=1)[:2],
                                  "INPUT1": np.ones((2, 16), np.float32)})
        np.testing.assert_array_equal(out["OUTPUT0"], A[:, :4].repeat(4, axis=1)[:2] + 1)
        with pytest.raises(KilnError) as err:
            c.infer("no_such_model", {"X": A})
        assert err.value.code == "NOT_FOUND"


def test_committed_generated_code_matches_proto():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(REPO / "clients/python/generate_protos.py"), tmp],
                       check=True)
        pkg = REPO / "clients/python/kiln"
        pairs = [(Path(tmp) / "kiln/v1", pkg / "v1"), (Path(tmp) / "kiln/kserve", pkg / "kserve")]
        for generated, committed in pairs:
            assert sorted(f.name for f in generated.glob("*.py")) == \
                sorted(f.name for f in committed.glob("*.py")), committed
            for f in generated.glob("*.py"):
                assert filecmp.cmp(f, committed / f.name, shallow=False), (
                    f"{committed / f.name} is stale: run clients/python/generate_protos.py")
        # The KServe messages have a package of their own; only the wire names stay KServe's.
        assert not (pkg / "inference").exists()
        stub = (pkg / "kserve" / "grpc_service_pb2_grpc.py").read_text()
        assert "'/inference.GRPCInferenceService/ModelInfer'" in stub
        assert "kiln.kserve.GRPCInferenceService" not in stub
