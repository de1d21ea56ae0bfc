"""Issue #26 / #17 probes against a real kilnd: bounded work and memory, decided before anything is
allocated or launched, caches bounded by bytes, and the device a kiln.v1 request names.

Each probe was a way for one small unauthenticated request to take the daemon down or starve it:
a 108-byte Execute whose response passed protobuf's 2 GiB (the process aborted), a 102-byte Execute
and a 72-byte RegisterGraph that reached gigabytes of RSS, 150,000 input names checked pairwise,
an expression with 2^39 operations, a run nobody could stop, a kernel compiled per input shape and
kept forever. Memory is measured from /proc (VmHWM: the peak RSS since start)."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from kiln_v1 import EngineStub, GraphBuilder, generate_messages, proc_status_kib, rpc_error
from kilnd_launcher import Kilnd

MIB = 1 << 20
BIG = 1 << 28  # the engine's per-node element limit: a 1 GiB float32 value


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pb():
    graph_pb2, engine_pb2, cleanup = generate_messages()
    yield graph_pb2, engine_pb2
    cleanup()


@pytest.fixture(scope="module")
def server(models):
    port = free_port()
    s = Kilnd(models, [f"--metrics-port={port}", "--prepared-cache-bytes=1048576",
                       "--jit-cache-bytes=1"])
    s.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def small_kernel_caches(models):
    port = free_port()
    s = Kilnd(models, [f"--metrics-port={port}", "--kernel-cache-bytes=65536",
                       "--binary-cache-bytes=32768"])
    s.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def stub(server, pb):
    channel = grpc.insecure_channel(server.url, options=[("grpc.max_receive_message_length", -1)])
    yield EngineStub(channel, pb[1])
    channel.close()


def expand_const(b, shape):
    """CONST 1.0 -> RESHAPE [1]*rank -> EXPAND shape: a big value from a few bytes."""
    c = b.node("CONST", f=1.0)
    r = b.node("RESHAPE", src=(c,), ints=[1] * len(shape))
    return b.node("EXPAND", src=(r,), ints=list(shape))


def alive(stub, pb):
    graph_pb2, engine_pb2 = pb
    b = GraphBuilder(graph_pb2, "alive")
    x = b.input("x", [4])
    b.output("y", b.node("ADD", src=(x, x)))
    a = np.arange(4, dtype=np.float32)
    out = stub.Execute(engine_pb2.ExecuteRequest(
        graph=b.g, inputs=[engine_pb2.Tensor(name="x", dtype="float32", shape=[4], raw=a.tobytes())]))
    np.testing.assert_array_equal(np.frombuffer(out.outputs[0].raw, np.float32), a + a)


def metric(server, name, labels):
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_c2_two_outputs_past_protobuf_limit_are_refused(server, stub, pb):
    """C2: CONST -> RESHAPE [1] -> EXPAND [2^28], two outputs on that node: 2 GiB of response,
    which protobuf cannot serialize (gRPC's serializer asserted and the process aborted)."""
    graph_pb2, engine_pb2 = pb
    b = GraphBuilder(graph_pb2, "c2")
    e = expand_const(b, [BIG])
    b.output("a", e)
    b.output("b", e)
    request = engine_pb2.ExecuteRequest(graph=b.g)
    assert len(request.SerializeToString()) < 128
    hwm = proc_status_kib(server.proc.pid, "VmHWM")
    code, msg = rpc_error(stub.Execute, request, timeout=60)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_output_bytes" in msg and str(2 * BIG * 4) in msg, msg
    assert server.proc.poll() is None
    assert proc_status_kib(server.proc.pid, "VmHWM") - hwm < 64 * 1024
    alive(stub, pb)


def test_tiny_execute_is_refused_before_allocating(server, stub, pb):
    """A ~100-byte Execute with one 1 GiB output: inputs, the device value and two host copies
    (the result and the encoded response) exceed --max-run-memory-bytes (2 GiB)."""
    graph_pb2, engine_pb2 = pb
    b = GraphBuilder(graph_pb2, "tiny")
    b.output("a", expand_const(b, [BIG]))
    request = engine_pb2.ExecuteRequest(graph=b.g)
    assert len(request.SerializeToString()) < 128
    hwm = proc_status_kib(server.proc.pid, "VmHWM")
    code, msg = rpc_error(stub.Execute, request, timeout=60)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_memory_bytes" in msg and str(2 << 30) in msg, msg
    assert proc_status_kib(server.proc.pid, "VmHWM") - hwm < 64 * 1024  # before: +2.1 GB
    alive(stub, pb)


def test_register_graph_warm_up_obeys_the_budget(server, stub, pb):
    """A ~70-byte RegisterGraph whose warm-up allocated its own 1 GiB zero input (4.35 GB peak)."""
    graph_pb2, engine_pb2 = pb
    b = GraphBuilder(graph_pb2, "warm")
    b.output("y", b.input("x", [BIG]))
    request = engine_pb2.RegisterGraphRequest(graph=b.g)
    assert len(request.SerializeToString()) < 96
    hwm = proc_status_kib(server.proc.pid, "VmHWM")
    code, msg = rpc_error(stub.RegisterGraph, request, timeout=60)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_memory_bytes" in msg, msg
    assert proc_status_kib(server.proc.pid, "VmHWM") - hwm < 64 * 1024
    alive(stub, pb)


def test_input_counts_are_capped_and_names_checked_in_one_pass(server, stub, pb):
    """150,000 input names took 171 s of CPU (a pairwise duplicate check)."""
    graph_pb2, engine_pb2 = pb
    b = GraphBuilder(graph_pb2, "names")
    for k in range(150_000):
        b.g.inputs.add(name=f"i{k}", dtype="float32", shape=[])
    b.node("INPUT", i=0)
    b.output("y", 0)
    start = time.monotonic()
    code, msg = rpc_error(stub.Execute, engine_pb2.ExecuteRequest(graph=b.g), timeout=120)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "150000 inputs exceed the limit 4096" in msg
    assert time.monotonic() - start < 10

    # At the cap: 4096 distinct names bind and run; a duplicate as the last name is found.
    b = GraphBuilder(graph_pb2, "names_at_cap")
    for k in range(4096):
        b.g.inputs.add(name=f"i{k}", dtype="float32", shape=[])
    y = b.node("INPUT", i=4095)
    b.output("y", b.node("ADD", src=(y, y)))
    inputs = [engine_pb2.Tensor(name=f"i{k}", dtype="float32", shape=[],
                                raw=np.float32(k).tobytes()) for k in range(4096)]
    start = time.monotonic()
    out = stub.Execute(engine_pb2.ExecuteRequest(graph=b.g, inputs=inputs), timeout=120)
    assert np.frombuffer(out.outputs[0].raw, np.float32)[0] == 2 * 4095
    b.g.inputs[4095].name = "i0"
    code, msg = rpc_error(stub.Execute, engine_pb2.ExecuteRequest(graph=b.g, inputs=inputs))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "inputs[4095].name: duplicate 'i0'" in msg
    assert time.monotonic() - start < 30


def test_work_over_the_flop_budget_is_refused_quickly(server, stub, pb):
    """a[i] + b[j] over 2^14 x 2^14 elements, then 2048 chained multiplies of each element: 2^39
    FLOPs, over --max-run-flops (2^38). Without the estimate it ran for minutes; now it is refused
    before anything compiles. (Each element differs, so no compiler can hoist the chain.)"""
    graph_pb2, engine_pb2 = pb
    n = 1 << 14
    b = GraphBuilder(graph_pb2, "flops")
    a = b.node("EXPAND", src=(b.input("a", [n, 1]),), ints=[n, n])
    c = b.node("EXPAND", src=(b.input("b", [1, n]),), ints=[n, n])
    v = b.node("ADD", src=(a, c))
    for _ in range(2048):
        v = b.node("MUL", src=(v, v))
    b.output("s", b.node("REDUCE_AXIS", src=(v,), reduce=("ADD", [0, 1])))
    inputs = [engine_pb2.Tensor(name="a", dtype="float32", shape=[n, 1], raw=np.ones(n, np.float32).tobytes()),
              engine_pb2.Tensor(name="b", dtype="float32", shape=[1, n], raw=np.ones(n, np.float32).tobytes())]
    start = time.monotonic()
    code, msg = rpc_error(stub.Execute, engine_pb2.ExecuteRequest(graph=b.g, inputs=inputs), timeout=120)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, msg
    assert "max_flops" in msg and str(1 << 38) in msg, msg
    assert time.monotonic() - start < 30
    alive(stub, pb)


def test_a_run_past_its_deadline_stops_between_kernels(server, stub, pb):
    """200 kernels (16 MiB each) take about a second; with a 0.25 s deadline the run stops
    between kernels: the registered graph's counters show fewer launches than a full run."""
    graph_pb2, engine_pb2 = pb
    b = GraphBuilder(graph_pb2, "chain")
    v = b.input("x", [1 << 22])
    one = b.node("CONST", f=1.0)
    for _ in range(200):
        v = b.node("CONTIGUOUS", src=(b.node("ADD", src=(v, one)),))
    b.output("y", v)
    reg = stub.RegisterGraph(engine_pb2.RegisterGraphRequest(graph=b.g), timeout=300)
    assert reg.kernel_count == 200
    x = np.zeros(1 << 22, np.float32)
    request = engine_pb2.ExecuteRegisteredRequest(
        graph_id=reg.graph_id, inputs=[engine_pb2.Tensor(name="x", dtype="float32",
                                                         shape=[1 << 22], raw=x.tobytes())])
    start = time.monotonic()
    full = stub.ExecuteRegistered(request, timeout=120)
    full_s = time.monotonic() - start
    np.testing.assert_array_equal(np.frombuffer(full.outputs[0].raw, np.float32)[:4], [200] * 4)
    deadline = min(0.25, full_s / 4)
    code, _ = rpc_error(stub.ExecuteRegistered, request, timeout=deadline)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(full_s + 1)  # the server side has stopped (or would have finished) by now
    rows = stub.ListKernels(engine_pb2.ListKernelsRequest(graph_id=reg.graph_id)).kernels
    launches = sum(k.launches for k in rows)
    assert all(k.graph_runs == 2 for k in rows)  # the warm-up and the full run completed
    assert 400 <= launches < 600, launches       # the third run stopped early
    alive(stub, pb)


def test_the_longest_accepted_chain_runs_and_matches_numpy(server, stub, pb):
    """Scenario 12: a chain at the node limit (65,536 nodes), one kernel deep. Its first half alternates
    PERMUTE and ADD (views the scheduler follows back through 16,383 transposes), its second half MUL
    and ADD on the input (one 32,766-op expression for codegen and LLVM). No stage may recurse per
    node, and none may cost time quadratic in the chain: LLVM's loop vectorizer and schedulers did, on
    the kernel's one huge block (over 600 s; backends/cpu/cpu_compiler.cc now compiles such a block
    without them: about 14 s on the 2-core machine)."""
    graph_pb2, engine_pb2 = pb
    b = GraphBuilder(graph_pb2, "longest")
    x = b.input("x", [4, 4])
    one, half = b.node("CONST", f=1.0), b.node("CONST", f=0.5)
    a = (np.random.default_rng(12).random((4, 4)) * 0.5).astype(np.float32)
    v, ref = x, a.copy()
    limit = 65536
    while len(b.g.nodes) < limit // 2:
        if len(b.g.nodes) % 2:
            v, ref = b.node("PERMUTE", src=(v,), ints=[1, 0]), ref.T
        else:
            v, ref = b.node("ADD", src=(v, one)), ref + np.float32(1)
    while len(b.g.nodes) < limit:
        if len(b.g.nodes) % 2:
            v, ref = b.node("MUL", src=(v, x)), ref * a
        else:
            v, ref = b.node("ADD", src=(v, half)), ref + np.float32(0.5)
    b.output("y", v)
    assert len(b.g.nodes) == limit
    request = engine_pb2.ExecuteRequest(graph=b.g, inputs=[engine_pb2.Tensor(
        name="x", dtype="float32", shape=[4, 4], raw=a.tobytes())])
    out = stub.Execute(request, timeout=600)
    y = np.frombuffer(out.outputs[0].raw, np.float32).reshape(4, 4)
    # the MUL/ADD half contracts (|x| < 0.5), so float32 rounding does not grow along the chain
    np.testing.assert_allclose(y, ref, rtol=1e-5)
    assert server.proc.poll() is None
    alive(stub, pb)  # c2's "alive" graph, evicted by this one, prepared again (its old trace was run)


def test_prepared_graph_cache_is_bounded_by_bytes(server, stub, pb):
    graph_pb2, engine_pb2 = pb
    for k in range(8):  # ~2000-node graphs of ~0.5 MB each against a 1 MiB bound
        b = GraphBuilder(graph_pb2, f"neg{k}")
        v = b.input(f"x{k}", [4])
        for _ in range(2000):
            v = b.node("NEG", src=(v,))
        b.output("y", v)
        a = np.arange(4, dtype=np.float32) + k
        out = stub.Execute(engine_pb2.ExecuteRequest(graph=b.g, inputs=[
            engine_pb2.Tensor(name=f"x{k}", dtype="float32", shape=[4], raw=a.tobytes())]), timeout=120)
        np.testing.assert_array_equal(np.frombuffer(out.outputs[0].raw, np.float32), a)
    labels = {"cache": "prepared_graphs", "device": "CPU"}
    assert metric(server, "kiln_cache_max_bytes", labels) == 1 << 20
    assert metric(server, "kiln_cache_entries", labels) <= 2
    assert metric(server, "kiln_cache_bytes", labels) <= 2 << 20
    assert metric(server, "kiln_cache_evictions_total", labels) >= 6


def test_kernels_per_input_shape_are_evicted(small_kernel_caches):
    """Each row count of reduce_sum compiles a kernel (1,200 shapes: +90 MB, never freed); the
    loaded-kernel and binary caches keep them within their byte bounds, and answers stay right
    after evictions."""
    server = small_kernel_caches
    client = grpcclient.InferenceServerClient(url=server.url)
    rng = np.random.default_rng(0)
    first = None
    for rows in range(1, 41):
        x = rng.standard_normal((rows, 8)).astype(np.float32)
        inp = grpcclient.InferInput("X", [rows, 8], "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("reduce_sum", [inp]).as_numpy("SUM")
        np.testing.assert_allclose(got[:, 0], x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
        first = first or (x, inp)
    x, inp = first  # its kernel was evicted long ago: compiled again, same answer
    np.testing.assert_allclose(client.infer("reduce_sum", [inp]).as_numpy("SUM")[:, 0],
                               x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    client.close()
    for cache, bound in (("kernels", 65536), ("binaries", 32768)):
        labels = {"cache": cache, "device": "all"}
        assert metric(server, "kiln_cache_max_bytes", labels) == bound
        assert metric(server, "kiln_cache_evictions_total", labels) >= 10, cache
        entries = metric(server, "kiln_cache_entries", labels)
        assert entries >= 1 and (metric(server, "kiln_cache_bytes", labels) <= bound or entries == 1)


def test_jit_traces_are_bounded_by_bytes(server):
    """--jit-cache-bytes=1: every captured fashion_mnist trace outgrows the bound, so only the
    newest is kept; answers for the same images agree across batch sizes."""
    client = grpcclient.InferenceServerClient(url=server.url)
    rng = np.random.default_rng(1)
    images = rng.random((3, 1, 28, 28), dtype=np.float32)
    answers = {}
    for batch in (1, 2, 3):
        inp = grpcclient.InferInput("INPUT", [batch, 1, 28, 28], "FP32")
        inp.set_data_from_numpy(images[:batch])
        for _ in range(3):  # run, capture, replay
            answers[batch] = client.infer("fashion_mnist", [inp]).as_numpy("OUTPUT")
    client.close()
    np.testing.assert_allclose(answers[3][:1], answers[1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(answers[3][:2], answers[2], rtol=1e-4, atol=1e-4)
    labels = {"cache": "jit_traces", "device": "CPU"}
    assert metric(server, "kiln_cache_entries", labels) == 1
    assert metric(server, "kiln_cache_evictions_total", labels) >= 2


def test_execute_honours_the_device(server, stub, pb):
    graph_pb2, engine_pb2 = pb
    b = GraphBuilder(graph_pb2, "dev")
    x = b.input("x", [8])
    b.output("y", b.node("MUL", src=(x, b.node("ADD", src=(x, x)))))
    a = np.linspace(-2, 2, 8, dtype=np.float32)
    t = engine_pb2.Tensor(name="x", dtype="float32", shape=[8], raw=a.tobytes())
    out = stub.Execute(engine_pb2.ExecuteRequest(graph=b.g, inputs=[t], device="INTERP"))
    np.testing.assert_allclose(np.frombuffer(out.outputs[0].raw, np.float32), a * (a + a), rtol=1e-6)
    assert out.kernels and all(k.device == "INTERP" for k in out.kernels)
    reg = stub.RegisterGraph(engine_pb2.RegisterGraphRequest(graph=b.g, device="INTERP"))
    assert reg.graph_id.endswith("@INTERP")
    for device in ("CUDA:7", "no such device!"):
        code, msg = rpc_error(stub.Execute, engine_pb2.ExecuteRequest(graph=b.g, inputs=[t], device=device))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and msg.startswith("device: "), msg


def test_timeout_request_parameter_sets_the_deadline(server):
    """Triton's request parameter `timeout` (microseconds), as tritonclient sends it over REST and
    gRPC, on a model without dynamic batching (reduce_sum): 1 us passes before the request reaches
    the engine (DEADLINE_EXCEEDED / 504, nothing runs); a generous one, or none, answers; a negative
    one is a 400 naming the parameter. (With dynamic batching the queue policy decides what it
    means: tests/e2e/test_kilnd_batching.py.)"""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    want = x.sum(axis=1, keepdims=True)
    for mod, url in ((httpclient, server.http_url), (grpcclient, server.url)):
        c = mod.InferenceServerClient(url=url)
        inputs = [mod.InferInput("X", [2, 8], "FP32")]
        inputs[0].set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as err:
            c.infer("reduce_sum", inputs, timeout=1)
        assert "deadline" in str(err.value).lower(), str(err.value)
        np.testing.assert_allclose(c.infer("reduce_sum", inputs, timeout=30_000_000).as_numpy("SUM"), want)
        np.testing.assert_allclose(c.infer("reduce_sum", inputs).as_numpy("SUM"), want)
    body = ('{"parameters": {"timeout": -5}, "inputs": ['
            '{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [' + ",".join(["1"] * 16) + ']},'
            '{"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [' + ",".join(["1"] * 16) + ']}]}')
    req = urllib.request.Request(f"http://{server.http_url}/v2/models/add_sub/infer", data=body.encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    assert "parameters.timeout" in err.value.read().decode()
