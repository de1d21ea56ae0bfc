"""Dynamic batching (issue #20) against a real kilnd, with the stock tritonclient over gRPC and HTTP.

Merge and split: concurrent batch-1 and batch-n requests of a kiln_builtin CNN with a long
max_queue_delay are merged into fewer executions (the statistics' execution_count and the
Prometheus nv_inference_exec_count / kiln_inference_batch_size say so), and each client gets its
own rows, bit-equal to the same rows run by an unbatched copy of the model and close to numpy's
forward pass. Requests whose non-batch shapes differ are never merged (an ONNX model with a
variable dim).

Queue policy: a second kilnd whose every execution is held 400 ms (failpoint infer.execute=
sleep400) so that queues fill on cue: max_queue_size overflow answers UNAVAILABLE (gRPC) / 503
(REST) at once; a higher priority runs first; a queue timeout under REJECT answers UNAVAILABLE
without running, under DELAY the request runs after the one that did not time out; a request whose
client cancelled or whose deadline passed while queued never executes (kiln_inference_dropped_total).
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from builtin_models import mnist_cnn_forward, mnist_cnn_weights, save_safetensors
from kilnd_launcher import Kilnd

MODELS = Path(os.environ.get("KILN_MODELS", Path(__file__).resolve().parents[2] / "models"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = family.name if family.type == "counter" and s.name == family.name + "_total" else s.name
            out[(name, frozenset(s.labels.items()))] = s.value
    return out


def total(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def cnn_model(repo: Path, name: str, weights: dict, batching: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    save_safetensors(repo / name / "1" / "model.safetensors", weights)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "kiln_builtin"\nmax_batch_size: 16\n'
        'input [{ name: "INPUT" data_type: TYPE_FP32 dims: [1, 28, 28] }]\n'
        'output [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [10] }]\n'
        'parameters { key: "architecture" value { string_value: "mnist_cnn" } }\n' + batching)


def add_sub_model(repo: Path, name: str, max_batch: int, batching: str, extra: str = "") -> None:
    """The bundled add_sub graph (elementwise) under a new config."""
    shutil.copytree(MODELS / "add_sub" / "1", repo / name / "1")
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "kiln_graph"\nmax_batch_size: {max_batch}\n'
        'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }]\n'
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }]\n' + batching + extra)


def vardim_model(repo: Path, name: str, batching: str) -> None:
    """An ONNX model (onnx.helper) whose non-batch dim varies: OUTPUT0 = INPUT0 + INPUT1,
    OUTPUT1 = INPUT0 - INPUT1 over [N, W]."""
    from onnx import TensorProto, helper, save

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", "W"]) for n in ("INPUT0", "INPUT1")]
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", "W"]) for n in ("OUTPUT0", "OUTPUT1")]
    g = helper.make_graph([helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                           helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])], "vardim", io, out)
    (repo / name / "1").mkdir(parents=True)
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), repo / name / "1" / "model.onnx")
    dims = "dims: [ -1 ]"
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f'input [{{ name: "INPUT0" data_type: TYPE_FP32 {dims} }}, {{ name: "INPUT1" data_type: TYPE_FP32 {dims} }}]\n'
        f'output [{{ name: "OUTPUT0" data_type: TYPE_FP32 {dims} }}, {{ name: "OUTPUT1" data_type: TYPE_FP32 {dims} }}]\n'
        + batching)


def add_sub_inputs(module, a: np.ndarray, b: np.ndarray):
    x = module.InferInput("INPUT0", list(a.shape), "FP32")
    x.set_data_from_numpy(a)
    y = module.InferInput("INPUT1", list(b.shape), "FP32")
    y.set_data_from_numpy(b)
    return [x, y]


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 1, 28, 28), dtype=np.float32)


def stats(client, model: str) -> tuple[int, int, int]:
    s = client.get_inference_statistics(model, "1").model_stats[0]
    return s.inference_stats.success.count, s.execution_count, s.inference_count


# ---------------------------------------------------------------------------------------------
# merge and split


@pytest.fixture(scope="module")
def weights():
    return mnist_cnn_weights(seed=5)


@pytest.fixture(scope="module")
def server(tmp_path_factory, weights):
    repo = tmp_path_factory.mktemp("batching")
    # A long delay and a preferred size: requests sent together are merged deterministically.
    cnn_model(repo, "cnn_batched", weights,
              "dynamic_batching { max_queue_delay_microseconds: 3000000 preferred_batch_size: [8] }\n")
    cnn_model(repo, "cnn_plain", weights, "")
    vardim_model(repo, "vardim",
                 "dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [4] }\n")
    # Two instances each: their own engine and (kiln_builtin, ONNX) their own copy of the model.
    cnn_model(repo, "cnn_two", weights,
              "instance_group [{ kind: KIND_CPU count: 2 }]\n"
              "dynamic_batching { max_queue_delay_microseconds: 2000 }\n")
    vardim_model(repo, "vardim_two", "instance_group [{ kind: KIND_CPU count: 2 }]\n")
    port = _free_port()
    s = Kilnd(repo, [f"--metrics-port={port}"])
    s.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield s
    assert s.stop() == 0


def concurrent(fn, args_list):
    """Runs fn(*args) for every args on its own thread, started together; results in order."""
    results: list = [None] * len(args_list)
    barrier = threading.Barrier(len(args_list))

    def run(i, args):
        barrier.wait()
        try:
            results[i] = fn(*args)
        except Exception as e:  # noqa: BLE001 - reported by the caller's asserts
            results[i] = e

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_merge_and_split_exact_grpc(server, weights):
    clients = [grpcclient.InferenceServerClient(url=server.url) for _ in range(5)]
    sizes = [1, 1, 2, 3, 1]  # 8 rows: the preferred size, so the batch goes without the delay
    xs = [images(n, seed=10 + i) for i, n in enumerate(sizes)]
    before = stats(clients[0], "cnn_batched")
    m0 = scrape(server.metrics_url)

    def infer(client, x):
        inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return client.infer("cnn_batched", [inp]).as_numpy("OUTPUT")

    got = concurrent(infer, list(zip(clients, xs)))
    after = stats(clients[0], "cnn_batched")
    m1 = scrape(server.metrics_url)
    for g in got:
        assert not isinstance(g, Exception), g
    success, executions, inferences = (a - b for a, b in zip(after, before))
    assert success == 5 and inferences == 8
    assert executions < 5, f"{executions} executions for 5 concurrent requests: nothing merged"
    mv = {"model": "cnn_batched", "version": "1"}
    assert total(m1, "nv_inference_exec_count", **mv) - total(m0, "nv_inference_exec_count", **mv) == executions
    assert total(m1, "nv_inference_request_success", **mv) - total(m0, "nv_inference_request_success", **mv) == 5
    assert total(m1, "kiln_inference_batch_size_count", **mv) - total(m0, "kiln_inference_batch_size_count", **mv) \
        == executions
    assert total(m1, "kiln_inference_batch_size_sum", **mv) - total(m0, "kiln_inference_batch_size_sum", **mv) == 8
    for x, g in zip(xs, got):
        assert g.shape == (x.shape[0], 10)
        # Each client's own rows: bit-equal to an unbatched run of the same rows, and right.
        inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        plain = clients[0].infer("cnn_plain", [inp]).as_numpy("OUTPUT")
        np.testing.assert_array_equal(g, plain)
        np.testing.assert_allclose(g, mnist_cnn_forward(weights, x), rtol=1e-4, atol=1e-4)
    for c in clients:
        c.close()


def test_merge_and_split_exact_http(server, weights):
    clients = [httpclient.InferenceServerClient(url=server.http_url) for _ in range(8)]
    xs = [images(1, seed=40 + i) for i in range(8)]
    before = stats(grpcclient.InferenceServerClient(url=server.url), "cnn_batched")

    def infer(client, x, binary):
        inp = httpclient.InferInput("INPUT", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        return client.infer("cnn_batched", [inp]).as_numpy("OUTPUT")

    # Binary and JSON tensor data in one batch (raw bytes and typed contents are merged alike).
    got = concurrent(infer, [(c, x, i % 2 == 0) for i, (c, x) in enumerate(zip(clients, xs))])
    after = stats(grpcclient.InferenceServerClient(url=server.url), "cnn_batched")
    for g in got:
        assert not isinstance(g, Exception), g
    success, executions, _ = (a - b for a, b in zip(after, before))
    assert success == 8 and executions < 8
    for x, g in zip(xs, got):
        np.testing.assert_allclose(g, mnist_cnn_forward(weights, x), rtol=1e-4, atol=1e-4)


def test_different_shapes_never_merge(server):
    client = grpcclient.InferenceServerClient(url=server.url)
    widths = [16, 4, 16, 4, 16, 4, 16, 4]
    rng = np.random.default_rng(3)
    pairs = [(rng.random((1, w), dtype=np.float32), rng.random((1, w), dtype=np.float32)) for w in widths]
    before = stats(client, "vardim")

    def infer(a, b):
        c = grpcclient.InferenceServerClient(url=server.url)
        r = c.infer("vardim", add_sub_inputs(grpcclient, a, b))
        return r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")

    got = concurrent(infer, pairs)
    after = stats(client, "vardim")
    for (a, b), g in zip(pairs, got):
        assert not isinstance(g, Exception), str(g)
        np.testing.assert_array_equal(g[0], a + b)
        np.testing.assert_array_equal(g[1], a - b)
    success, executions, _ = (x - y for x, y in zip(after, before))
    # Two widths: at least two executions, and fewer than one per request (each width's four
    # requests reach the preferred size 4 together).
    assert success == 8 and 2 <= executions < 8


def test_priority_parameter_validated(server):
    client = grpcclient.InferenceServerClient(url=server.url)
    inp = grpcclient.InferInput("INPUT", [1, 1, 28, 28], "FP32")
    inp.set_data_from_numpy(images(1, 0))
    with pytest.raises(InferenceServerException) as e:
        client.infer("cnn_batched", [inp], priority=2)  # the model has one level
    assert "parameters.priority: 2 exceeds" in e.value.message()
    # The next request succeeds (the batcher's long delay ends after 3 s at most).
    assert client.infer("cnn_batched", [inp]).as_numpy("OUTPUT").shape == (1, 10)


# ---------------------------------------------------------------------------------------------
# queue policy, with every execution held 400 ms

HOLD_S = 0.4


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    repo = tmp_path_factory.mktemp("batching_slow")
    add_sub_model(repo, "bounded", 1, "dynamic_batching { default_queue_policy { max_queue_size: 2 } }\n")
    add_sub_model(repo, "prio", 1, "dynamic_batching { priority_levels: 2 default_priority_level: 2 }\n")
    add_sub_model(repo, "reject", 1, "dynamic_batching { default_queue_policy { timeout_action: REJECT "
                  "default_timeout_microseconds: 100000 } }\n")
    add_sub_model(repo, "delay", 1, "dynamic_batching { default_queue_policy { timeout_action: DELAY "
                  "allow_timeout_override: true } }\n")
    add_sub_model(repo, "drop", 1, "dynamic_batching { }\n")
    two = "instance_group [{ kind: KIND_CPU count: 2 }]\n"
    add_sub_model(repo, "two_plain", 1, "", two)
    add_sub_model(repo, "two_batched", 1, "dynamic_batching { }\n", two)
    add_sub_model(repo, "one_plain", 1, "")
    port = _free_port()
    env = dict(os.environ, KILN_FAILPOINTS="infer.execute=sleep400")
    old = os.environ.get("KILN_FAILPOINTS")
    os.environ["KILN_FAILPOINTS"] = env["KILN_FAILPOINTS"]
    try:
        s = Kilnd(repo, [f"--metrics-port={port}"])
    finally:
        if old is None:
            del os.environ["KILN_FAILPOINTS"]
        else:
            os.environ["KILN_FAILPOINTS"] = old
    s.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield s
    assert s.stop() == 0


def ones(v: float = 1.0):
    return np.full((1, 16), v, dtype=np.float32)


def send_async(client, model: str, v: float, done: queue.Queue, tag: str, **kw):
    return client.async_infer(model, add_sub_inputs(grpcclient, ones(v), ones()),
                              callback=lambda result, error: done.put((tag, result, error, time.monotonic())), **kw)


def test_max_queue_size_overflow_unavailable_at_once(slow):
    client = grpcclient.InferenceServerClient(url=slow.url)
    done: queue.Queue = queue.Queue()
    send_async(client, "bounded", 1, done, "running")
    time.sleep(0.1)  # it holds the device for 400 ms
    send_async(client, "bounded", 2, done, "q1")
    send_async(client, "bounded", 3, done, "q2")
    time.sleep(0.05)
    t0 = time.monotonic()
    with pytest.raises(InferenceServerException) as e:
        client.infer("bounded", add_sub_inputs(grpcclient, ones(4), ones()))
    assert time.monotonic() - t0 < HOLD_S  # refused at once, not after the queue drained
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    assert "max_queue_size 2" in e.value.message()
    # REST: 503 with the same message.
    http = httpclient.InferenceServerClient(url=slow.http_url)
    with pytest.raises(InferenceServerException) as e:
        http.infer("bounded", add_sub_inputs(httpclient, ones(5), ones()))
    assert e.value.status() == "503" and "max_queue_size 2" in e.value.message()
    got = [done.get(timeout=30) for _ in range(3)]
    assert all(err is None for _, _, err, _ in got), got
    for tag, r, _, _ in got:
        v = {"running": 1, "q1": 2, "q2": 3}[tag]
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), ones(v) + ones())


def test_higher_priority_runs_first(slow):
    client = grpcclient.InferenceServerClient(url=slow.url)
    done: queue.Queue = queue.Queue()
    send_async(client, "prio", 0, done, "running")
    time.sleep(0.1)
    send_async(client, "prio", 1, done, "low1", priority=2)
    time.sleep(0.02)
    send_async(client, "prio", 2, done, "low2")  # 0 = the default level, 2
    time.sleep(0.05)
    send_async(client, "prio", 3, done, "high", priority=1)
    got = sorted((done.get(timeout=30) for _ in range(4)), key=lambda g: g[3])
    assert all(err is None for _, _, err, _ in got), got
    assert [tag for tag, *_ in got] == ["running", "high", "low1", "low2"]


def test_queue_timeout_reject_never_runs(slow):
    client = grpcclient.InferenceServerClient(url=slow.url)
    _, executions0, _ = stats(client, "reject")
    done: queue.Queue = queue.Queue()
    send_async(client, "reject", 1, done, "running")
    time.sleep(0.1)
    send_async(client, "reject", 2, done, "waits")  # 100 ms queue timeout < the 300 ms left
    got = {tag: (r, e) for tag, r, e, _ in (done.get(timeout=30) for _ in range(2))}
    assert got["running"][1] is None
    err = got["waits"][1]
    assert err is not None and err.status() == "StatusCode.UNAVAILABLE"
    assert "request timeout expired" in err.message()
    _, executions1, _ = stats(client, "reject")
    assert executions1 - executions0 == 1  # the timed-out request never ran


def test_queue_timeout_delay_runs_later(slow):
    client = grpcclient.InferenceServerClient(url=slow.url)
    done: queue.Queue = queue.Queue()
    send_async(client, "delay", 0, done, "running")
    time.sleep(0.1)
    send_async(client, "delay", 1, done, "hurried", timeout=50000)  # times out while queued ...
    time.sleep(0.05)
    send_async(client, "delay", 2, done, "patient")  # ... so this one, queued later, goes first
    got = sorted((done.get(timeout=30) for _ in range(3)), key=lambda g: g[3])
    assert all(err is None for _, _, err, _ in got), got  # DELAY never refuses
    assert [tag for tag, *_ in got] == ["running", "patient", "hurried"]
    np.testing.assert_array_equal(got[2][1].as_numpy("OUTPUT0"), ones(1) + ones())


def test_cancelled_and_expired_requests_never_execute(slow):
    client = grpcclient.InferenceServerClient(url=slow.url)
    m0 = scrape(slow.metrics_url)
    _, executions0, _ = stats(client, "drop")
    done: queue.Queue = queue.Queue()
    send_async(client, "drop", 1, done, "running")
    time.sleep(0.1)
    ctx = send_async(client, "drop", 2, done, "cancelled")
    send_async(client, "drop", 3, done, "expired", client_timeout=0.1)
    time.sleep(0.05)
    ctx.cancel()
    got = {tag: (r, e) for tag, r, e, _ in (done.get(timeout=30) for _ in range(3))}
    assert got["running"][1] is None
    assert got["cancelled"][1] is not None and got["expired"][1] is not None
    time.sleep(HOLD_S + 0.2)  # the running request finished; the pull dropped the others
    _, executions1, _ = stats(client, "drop")
    assert executions1 - executions0 == 1
    m1 = scrape(slow.metrics_url)
    mv = {"model": "drop", "version": "1"}
    dropped = {k: v for k, v in m1.items() if k[0] == "kiln_inference_dropped"}
    for reason in ("cancelled", "deadline"):
        # prometheus_client names a counter family without its _total suffix
        assert total(m1, "kiln_inference_dropped", reason=reason, **mv) - \
            total(m0, "kiln_inference_dropped", reason=reason, **mv) == 1, (reason, dropped, got)
    # The next request is served normally.
    r = client.infer("drop", add_sub_inputs(grpcclient, ones(7), ones()))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), ones(7) - ones())


def test_stream_requests_are_batched(server, weights):
    """ModelStreamInfer: requests sent back to back on one stream merge, and each answer (by id)
    carries its own rows."""
    client = grpcclient.InferenceServerClient(url=server.url)
    before = stats(client, "cnn_batched")
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    xs = {f"s{i}": images(1, seed=70 + i) for i in range(8)}
    try:
        for rid, x in xs.items():
            inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            client.async_stream_infer("cnn_batched", [inp], request_id=rid)
        got = [answers.get(timeout=60) for _ in xs]
    finally:
        client.stop_stream()
    after = stats(client, "cnn_batched")
    assert all(e is None for _, e in got), [str(e) for _, e in got]
    for r, _ in got:
        rid = r.get_response().id
        np.testing.assert_allclose(r.as_numpy("OUTPUT"), mnist_cnn_forward(weights, xs[rid]), rtol=1e-4, atol=1e-4)
    success, executions, _ = (a - b for a, b in zip(after, before))
    assert success == 8 and executions < 8


# ---------------------------------------------------------------------------------------------
# one trace for every batch size (a symbolic batch dim)


@pytest.fixture(scope="module")
def symbolic(tmp_path_factory, weights):
    repo = tmp_path_factory.mktemp("symbolic")
    for name, extra in (("cnn_symbolic", ""),
                        ("cnn_concrete", 'parameters { key: "symbolic_batch" value { string_value: "false" } }\n')):
        cnn_model(repo, name, weights, extra)
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace("max_batch_size: 16", "max_batch_size: 64"))
    centered_model(repo, "centered")
    batch_scaled_model(repo, "batch_scaled")
    add_sub_model(repo, "add_sub_symbolic", 8, "")
    port = _free_port()
    s = Kilnd(repo, [f"--metrics-port={port}"])
    s.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield s
    assert s.stop() == 0


def x_to_y_model(repo: Path, name: str, nodes: list, initializers: tuple = ()) -> None:
    """An ONNX model X [N, 4] -> Y [N, 4] from `nodes`, max_batch_size 8."""
    from onnx import TensorProto, helper, save

    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])], list(initializers))
    (repo / name / "1").mkdir(parents=True)
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), repo / name / "1" / "model.onnx")
    (repo / name / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')


def centered_model(repo: Path, name: str) -> None:
    """An ONNX model that mixes the batch's rows: Y = X - ReduceMean(X, axis 0)."""
    from onnx import helper

    x_to_y_model(repo, name, [helper.make_node("ReduceMean", ["X"], ["M"], axes=[0], keepdims=1),
                              helper.make_node("Sub", ["X", "M"], ["Y"])])


def test_one_trace_for_a_kiln_graph(symbolic):
    """A kiln.v1 graph whose inputs' first dim is a run-time one: batch sizes 1..8 share one trace."""
    client = grpcclient.InferenceServerClient(url=symbolic.url)
    rng = np.random.default_rng(6)
    for n in list(range(1, 9)) + [3, 8, 1]:
        a, b = (rng.standard_normal((n, 16)).astype(np.float32) for _ in range(2))
        r = client.infer("add_sub_symbolic", add_sub_inputs(grpcclient, a, b))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert total(scrape(symbolic.metrics_url), "kiln_jit_traces_created", model="add_sub_symbolic") == 1
    client.close()


def batch_scaled_model(repo: Path, name: str) -> None:
    """An ONNX model that reads its batch size as a value: Y = X * float(Shape(X)[0])."""
    from onnx import TensorProto, helper

    x_to_y_model(repo, name,
                 [helper.make_node("Shape", ["X"], ["S"]), helper.make_node("Gather", ["S", "zero"], ["N"], axis=0),
                  helper.make_node("Cast", ["N"], ["F"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["X", "F"], ["Y"])],
                 (helper.make_tensor("zero", TensorProto.INT64, [], [0]),))


def test_a_model_that_reads_its_batch_size_keeps_a_trace_per_size(symbolic):
    """Shape(X)[0] as a value: under a symbolic batch it would be max_batch_size, so the model is not run symbolic."""
    client = grpcclient.InferenceServerClient(url=symbolic.url)
    rng = np.random.default_rng(5)
    for n in (2, 5, 2):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        inp = grpcclient.InferInput("X", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_allclose(client.infer("batch_scaled", [inp]).as_numpy("Y"), x * n, rtol=1e-6)
    assert total(scrape(symbolic.metrics_url), "kiln_jit_traces_created", model="batch_scaled") == 2
    client.close()


def test_a_model_that_mixes_rows_falls_back_to_a_trace_per_size(symbolic):
    """The batch's rows cannot be bounded when the graph sums over them: the first run finds that (Tensor::Rows
    refuses the graph) and the model runs with a trace per batch size, with right answers at every size."""
    client = grpcclient.InferenceServerClient(url=symbolic.url)
    rng = np.random.default_rng(4)
    for n in (3, 1, 8, 3, 5):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        inp = grpcclient.InferInput("X", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("centered", [inp]).as_numpy("Y")
        np.testing.assert_allclose(got, x - x.mean(axis=0, keepdims=True), rtol=1e-5, atol=1e-6)
    created = total(scrape(symbolic.metrics_url), "kiln_jit_traces_created", model="centered")
    assert created == 4, created  # one per size: 3, 1, 8, 5
    client.close()


def test_one_trace_serves_every_batch_size(symbolic, weights):
    """Batch sizes 1..64 of a max_batch_size 64 model: the first size creates the model's one JIT trace and compiles
    its kernels; every later size replays it (kiln_jit_traces_created_total and kiln_kernels_compiled_total do not
    move). Each answer is bit-equal to the same rows run with symbolic_batch off (a trace per size, every kernel
    specialised to it) and close to numpy's forward pass."""
    client = grpcclient.InferenceServerClient(url=symbolic.url)

    def infer(model, x):
        inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return client.infer(model, [inp]).as_numpy("OUTPUT")

    sym = {"model": "cnn_symbolic"}
    outs = {}
    for n in range(1, 65):
        x = images(n, seed=1000 + n)
        outs[n] = (x, infer("cnn_symbolic", x))
        if n == 1:
            first = scrape(symbolic.metrics_url)
            assert total(first, "kiln_jit_traces_created", **sym) == 1
            assert total(first, "kiln_kernels_compiled", **sym) >= 1
    last = scrape(symbolic.metrics_url)
    for metric in ("kiln_jit_traces_created", "kiln_kernels_compiled"):
        assert total(last, metric, **sym) == total(first, metric, **sym), metric
    for n, (x, got) in outs.items():
        assert got.shape == (n, 10)
        np.testing.assert_allclose(got, mnist_cnn_forward(weights, x), rtol=1e-4, atol=1e-4)
    # The same rows through kernels specialised to each size (one trace per size: the contrast). Not bit-equal at
    # every size: a specialised kernel may split its sums differently (64 rows: up to 1 ulp apart).
    conc = {"model": "cnn_concrete"}
    sizes = (1, 7, 33, 64)
    for n in sizes:
        x, got = outs[n]
        np.testing.assert_allclose(got, infer("cnn_concrete", x), rtol=1e-5, atol=1e-6)
    assert total(scrape(symbolic.metrics_url), "kiln_jit_traces_created", **conc) == len(sizes)
    client.close()


# ---------------------------------------------------------------------------------------------
# instances


def test_instances_config_echo_and_results(server, weights):
    client = grpcclient.InferenceServerClient(url=server.url)
    config = client.get_model_config("cnn_two", as_json=True)["config"]
    assert [(g["kind"], int(g["count"])) for g in config["instance_group"]] == [("KIND_CPU", 2)]
    xs = [images(1 + i % 3, seed=90 + i) for i in range(12)]

    def infer(x):
        c = grpcclient.InferenceServerClient(url=server.url)
        inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return c.infer("cnn_two", [inp]).as_numpy("OUTPUT")

    for x, g in zip(xs, concurrent(infer, [(x,) for x in xs])):
        assert not isinstance(g, Exception), str(g)
        np.testing.assert_allclose(g, mnist_cnn_forward(weights, x), rtol=1e-4, atol=1e-4)

    rng = np.random.default_rng(9)
    pairs = [(rng.random((2, 5), dtype=np.float32), rng.random((2, 5), dtype=np.float32)) for _ in range(8)]

    def infer_onnx(a, b):
        c = grpcclient.InferenceServerClient(url=server.url)
        r = c.infer("vardim_two", add_sub_inputs(grpcclient, a, b))
        return r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")

    for (a, b), g in zip(pairs, concurrent(infer_onnx, pairs)):
        assert not isinstance(g, Exception), str(g)
        np.testing.assert_array_equal(g[0], a + b)
        np.testing.assert_array_equal(g[1], a - b)


@pytest.mark.parametrize("model", ["two_plain", "two_batched"])
def test_two_instances_run_at_once(slow, model):
    """Every execution is held 400 ms: two requests to a model with two instances finish together
    (about 400 ms), where one instance runs them one after the other (about 800 ms)."""
    def elapsed(name):
        clients = [grpcclient.InferenceServerClient(url=slow.url) for _ in range(2)]
        client_results = concurrent(
            lambda c, v: (time.monotonic(), c.infer(name, add_sub_inputs(grpcclient, ones(v), ones())),
                          time.monotonic()),
            [(clients[0], 1), (clients[1], 2)])
        for r in client_results:
            assert not isinstance(r, Exception), str(r)
        for (t0, r, t1), v in zip(client_results, (1, 2)):
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), ones(v) + ones())
        return max(t1 for _, _, t1 in client_results) - min(t0 for t0, _, _ in client_results)

    elapsed(model)  # first runs compile
    elapsed("one_plain")
    two, one = elapsed(model), elapsed("one_plain")
    assert one >= 2 * HOLD_S  # serial on one instance
    assert two < 2 * HOLD_S, (two, one)  # the two instances overlapped
