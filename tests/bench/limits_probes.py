"""The figures of issue #26's closing note, measured against any kilnd binary (before and after):

  c1        config override marking fashion_mnist's INPUT optional, then an infer with no inputs
  c2        108-byte Execute: CONST -> RESHAPE [1] -> EXPAND [2^28], two outputs on that node
  tiny      ~100-byte Execute with one 1 GiB output: kilnd's peak RSS (VmHWM) before and after
  register  ~70-byte RegisterGraph of a [2^28] float32 input: VmHWM before and after
  names     Execute of a graph with 150,000 inputs: seconds until the answer, kilnd's CPU seconds
  prepared  `--graphs` distinct 65,536-node graphs through Execute: VmRSS before and after
  stream    ModelStreamInfer that sends add_sub requests for `--stream-seconds` and never reads:
            VmRSS before, at the end, and 2 s after the client cancels

  KILND=build/release/server/main/kilnd .venv/bin/python tests/bench/limits_probes.py [probe...]

Each probe starts its own kilnd (a crash ends only that probe). Not a test: it prints figures."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))
from kiln_v1 import EngineStub, GraphBuilder, generate_messages, proc_status_kib  # noqa: E402
from kilnd_launcher import Kilnd  # noqa: E402

MODELS = HERE.parents[1] / "models"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


def outcome(server, call):
    try:
        call()
        result = "OK"
    except grpc.RpcError as e:
        result = f"{e.code().name}: {e.details()[:160]}"
    time.sleep(0.5)
    if server.proc.poll() is not None:
        return f"kilnd died (exit {server.proc.returncode}); the call saw: {result}"
    return result


def probe_c1(pb):
    import tritonclient.grpc as grpcclient
    server = Kilnd(MODELS, ["--metrics-port=-1"])
    client = grpcclient.InferenceServerClient(url=server.url)
    config = {"name": "fashion_mnist", "platform": "kiln_builtin", "max_batch_size": 64,
              "input": [{"name": "INPUT", "data_type": "TYPE_FP32", "dims": [1, 28, 28], "optional": True}],
              "output": [{"name": "OUTPUT", "data_type": "TYPE_FP32", "dims": [10]}],
              "parameters": {"architecture": {"string_value": "mnist_cnn"}}}
    try:
        client.load_model("fashion_mnist", config=json.dumps(config))
        load = "OK"
    except Exception as e:  # noqa: BLE001
        load = str(e)[:160]
    try:
        client.infer("fashion_mnist", [])
        infer = "OK"
    except Exception as e:  # noqa: BLE001
        infer = str(e)[:160]
    time.sleep(0.5)
    alive = server.proc.poll() is None
    print(f"c1: load -> {load}\n    infer with no inputs -> {infer}\n    kilnd alive: {alive}"
          + ("" if alive else f" (exit {server.proc.returncode})"))
    server.stop()


def expand_graph(graph_pb2, outputs):
    b = GraphBuilder(graph_pb2)
    c = b.node("CONST", f=1.0)
    e = b.node("EXPAND", src=(b.node("RESHAPE", src=(c,), ints=[1]),), ints=[1 << 28])
    for k in range(outputs):
        b.output("ab"[k], e)
    return b.g


def probe_c2(pb):
    graph_pb2, engine_pb2 = pb
    server = Kilnd(MODELS, ["--metrics-port=-1"])
    stub = EngineStub(grpc.insecure_channel(server.url, options=[("grpc.max_receive_message_length", -1)]),
                      engine_pb2)
    request = engine_pb2.ExecuteRequest(graph=expand_graph(graph_pb2, 2))
    print(f"c2: {len(request.SerializeToString())}-byte Execute -> "
          f"{outcome(server, lambda: stub.Execute(request, timeout=300))}")
    server.stop()


def probe_tiny(pb):
    graph_pb2, engine_pb2 = pb
    server = Kilnd(MODELS, ["--metrics-port=-1"])
    stub = EngineStub(grpc.insecure_channel(server.url, options=[("grpc.max_receive_message_length", -1)]),
                      engine_pb2)
    request = engine_pb2.ExecuteRequest(graph=expand_graph(graph_pb2, 1))
    before = proc_status_kib(server.proc.pid, "VmHWM")
    result = outcome(server, lambda: stub.Execute(request, timeout=300))
    after = proc_status_kib(server.proc.pid, "VmHWM") if server.proc.poll() is None else -1
    print(f"tiny: {len(request.SerializeToString())}-byte Execute -> {result}\n"
          f"    peak RSS {mib(before)} -> {mib(after)}")
    server.stop()


def probe_register(pb):
    graph_pb2, engine_pb2 = pb
    server = Kilnd(MODELS, ["--metrics-port=-1"])
    stub = EngineStub(grpc.insecure_channel(server.url), engine_pb2)
    b = GraphBuilder(graph_pb2)
    b.output("y", b.input("x", [1 << 28]))
    request = engine_pb2.RegisterGraphRequest(graph=b.g)
    before = proc_status_kib(server.proc.pid, "VmHWM")
    result = outcome(server, lambda: stub.RegisterGraph(request, timeout=300))
    after = proc_status_kib(server.proc.pid, "VmHWM") if server.proc.poll() is None else -1
    print(f"register: {len(request.SerializeToString())}-byte RegisterGraph -> {result}\n"
          f"    peak RSS {mib(before)} -> {mib(after)}")
    server.stop()


def probe_names(pb, timeout):
    graph_pb2, engine_pb2 = pb
    server = Kilnd(MODELS, ["--metrics-port=-1"])
    stub = EngineStub(grpc.insecure_channel(server.url), engine_pb2)
    b = GraphBuilder(graph_pb2)
    for k in range(150_000):
        b.g.inputs.add(name=f"i{k}", dtype="float32", shape=[])
    b.node("INPUT", i=0)
    b.output("y", 0)
    request = engine_pb2.ExecuteRequest(graph=b.g)
    cpu = cpu_seconds(server.proc.pid)
    start = time.monotonic()
    result = outcome(server, lambda: stub.Execute(request, timeout=timeout))
    wall = time.monotonic() - start
    used = cpu_seconds(server.proc.pid) - cpu if server.proc.poll() is None else float("nan")
    print(f"names: {len(request.SerializeToString())}-byte Execute with 150,000 inputs -> "
          f"{result}\n    {wall:.2f} s wall, {used:.2f} s of kilnd CPU")
    server.stop()


def probe_prepared(pb, graphs):
    graph_pb2, engine_pb2 = pb
    server = Kilnd(MODELS, ["--metrics-port=-1"])
    stub = EngineStub(grpc.insecure_channel(server.url), engine_pb2)
    x = np.arange(4, dtype=np.float32)
    before = proc_status_kib(server.proc.pid, "VmRSS")
    start = time.monotonic()
    series = []
    for k in range(graphs):
        b = GraphBuilder(graph_pb2)
        v = b.input(f"x{k}", [4])
        for _ in range((1 << 16) - 1):
            v = b.node("NEG", src=(v,))
        b.output("y", v)
        out = stub.Execute(engine_pb2.ExecuteRequest(graph=b.g, inputs=[
            engine_pb2.Tensor(name=f"x{k}", dtype="float32", shape=[4], raw=x.tobytes())]), timeout=600)
        assert np.array_equal(np.frombuffer(out.outputs[0].raw, np.float32), -x)
        series.append(proc_status_kib(server.proc.pid, "VmRSS") >> 10)
    after = proc_status_kib(server.proc.pid, "VmRSS")
    print(f"prepared: {graphs} distinct 65,536-node graphs in {time.monotonic() - start:.1f} s\n"
          f"    RSS {mib(before)} -> {mib(after)} ({(after - before) / 1024 / graphs:.1f} MiB per graph);"
          f" MiB after each: {series}")
    server.stop()


def probe_stream(seconds):
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    server = Kilnd(MODELS, ["--metrics-port=-1"])
    channel = grpc.insecure_channel(server.url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    x = np.ones((8, 16), np.float32).tobytes()

    def request(k):
        r = service_pb2.ModelInferRequest(model_name="add_sub", id=str(k))
        for name in ("INPUT0", "INPUT1"):
            t = r.inputs.add(name=name, datatype="FP32")
            t.shape.extend([8, 16])
            r.raw_input_contents.append(x)
        return r

    list(stub.ModelStreamInfer(iter([request(-1)]), timeout=60))
    before = proc_status_kib(server.proc.pid, "VmRSS")
    stop = threading.Event()

    def requests():
        k = 0
        while not stop.is_set():
            yield request(k)
            k += 1

    call = stub.ModelStreamInfer(requests())
    time.sleep(seconds)
    during = proc_status_kib(server.proc.pid, "VmRSS")
    status = "still open"
    if call.done():
        try:
            next(iter(call))
        except grpc.RpcError as e:
            status = f"{e.code().name}: {e.details()[:120]}"
        except StopIteration:
            status = "finished OK"
    stop.set()
    call.cancel()
    time.sleep(2)
    after = proc_status_kib(server.proc.pid, "VmRSS")
    print(f"stream: unread for {seconds} s ({status})\n"
          f"    RSS {mib(before)} -> {mib(during)} at the end -> {mib(after)} 2 s after cancel")
    channel.close()
    server.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("probes", nargs="*",
                   default=["c1", "c2", "tiny", "register", "names", "prepared", "stream"])
    p.add_argument("--names-timeout", type=float, default=600)
    p.add_argument("--stream-seconds", type=float, default=30)
    p.add_argument("--graphs", type=int, default=12)
    args = p.parse_args()
    if not os.environ.get("KILND"):
        sys.exit("KILND must name the kilnd binary")
    graph_pb2, engine_pb2, cleanup = generate_messages()
    pb = (graph_pb2, engine_pb2)
    try:
        for name in args.probes:
            if name == "names":
                probe_names(pb, args.names_timeout)
            elif name == "prepared":
                probe_prepared(pb, args.graphs)
            elif name == "stream":
                probe_stream(args.stream_seconds)
            else:
                globals()[f"probe_{name}"](pb)
            sys.stdout.flush()
    finally:
        cleanup()


if __name__ == "__main__":
    main()
