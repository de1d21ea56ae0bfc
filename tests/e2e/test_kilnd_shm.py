"""Triton's system shared memory and logging extensions against a real kilnd, with the stock
tritonclient (grpc and http) and tritonclient.utils.shared_memory, and perf_analyzer
--shared-memory system.

Shared memory: regions are POSIX shared memory objects the client creates; kilnd maps them when they
are registered. add_sub's inputs are read from regions (one region per input, and both inputs in one
region at two offsets, and one input in shared memory with the other sent inline) and its outputs
written into regions; the results are read back from the regions and checked against numpy. Status
lists what is registered; unregister drops one region or all. Errors: an unknown region, a window
past the region's end, a byte size that is not what the shape needs, an output region too small,
a key that names no object, a duplicate name -- each answered with a message naming the field, and
kilnd keeps serving. Registration is refused unless kilnd runs with --allow-client-shm.

Logging: get/update_log_settings over both protocols; log_verbose_level decides whether kilnd logs
a failed call (a debug line); unknown settings, wrong types and log_file changes are refused.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from conftest import Kilnd

ROOT = Path(__file__).resolve().parents[2]
PERF_ANALYZER = ROOT / ".venv" / "bin" / "perf_analyzer"
TAG = uuid.uuid4().hex[:8]  # shared memory keys are machine-wide: keep this run's apart
NBYTES = 16 * 4  # one add_sub tensor: [1, 16] FP32


@pytest.fixture(scope="module")
def server(models):
    s = Kilnd(models, ["--allow-client-shm=true"])
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def clients(server):
    g = grpcclient.InferenceServerClient(url=server.url)
    h = httpclient.InferenceServerClient(url=server.http_url)
    yield {"grpc": g, "http": h}
    g.close()
    h.close()


@pytest.fixture
def regions():
    """Creates POSIX shared memory objects; destroys (unlinks) them after the test."""
    made = []

    def make(name: str, size: int):
        handle = shm.create_shared_memory_region(name, f"/kiln_{TAG}_{name}", size)
        made.append(handle)
        return handle

    yield make
    for h in made:
        shm.destroy_shared_memory_region(h)


def lib(protocol):
    return grpcclient if protocol == "grpc" else httpclient


def key_of(name: str) -> str:
    return f"/kiln_{TAG}_{name}"


def data():
    a = np.arange(16, dtype=np.float32).reshape(1, 16) * 0.5 - 3
    b = np.linspace(-2, 7, 16, dtype=np.float32).reshape(1, 16)
    return a, b


def region_names(client, protocol):
    status = client.get_system_shared_memory_status()
    if protocol == "grpc":
        return {name: (r.key, r.offset, r.byte_size) for name, r in status.regions.items()}
    return {r["name"]: (r["key"], int(r.get("offset", 0)), int(r["byte_size"])) for r in status}


def output_meta(result, name, protocol):
    out = result.get_output(name)
    if protocol == "grpc":
        return list(out.shape), out.datatype, out
    return list(out["shape"]), out["datatype"], out


def test_metadata_announces_the_extensions(clients):
    assert {"system_shared_memory", "logging"} <= set(clients["grpc"].get_server_metadata(as_json=True)["extensions"])
    assert {"system_shared_memory", "logging"} <= set(clients["http"].get_server_metadata()["extensions"])


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_inputs_and_outputs_in_shared_memory(clients, regions, protocol):
    c, m = clients[protocol], lib(protocol)
    c.unregister_system_shared_memory()
    a, b = data()
    in0, in1 = regions(f"{protocol}_in0", NBYTES), regions(f"{protocol}_in1", NBYTES)
    out0, out1 = regions(f"{protocol}_out0", NBYTES), regions(f"{protocol}_out1", NBYTES)
    shm.set_shared_memory_region(in0, [a])
    shm.set_shared_memory_region(in1, [b])
    for h, n in ((in0, "in0"), (in1, "in1"), (out0, "out0"), (out1, "out1")):
        c.register_system_shared_memory(f"{protocol}_{n}", key_of(f"{protocol}_{n}"), NBYTES)

    status = region_names(c, protocol)
    assert status[f"{protocol}_in0"] == (key_of(f"{protocol}_in0"), 0, NBYTES)
    assert set(status) == {f"{protocol}_{n}" for n in ("in0", "in1", "out0", "out1")}

    inputs = [m.InferInput("INPUT0", [1, 16], "FP32"), m.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_shared_memory(f"{protocol}_in0", NBYTES)
    inputs[1].set_shared_memory(f"{protocol}_in1", NBYTES)
    outputs = [m.InferRequestedOutput("OUTPUT0"), m.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(f"{protocol}_out0", NBYTES)
    outputs[1].set_shared_memory(f"{protocol}_out1", NBYTES)
    result = c.infer("add_sub", inputs, outputs=outputs)

    for name, handle, want in (("OUTPUT0", out0, a + b), ("OUTPUT1", out1, a - b)):
        shape, datatype, raw = output_meta(result, name, protocol)
        assert (shape, datatype) == ([1, 16], "FP32")
        got = shm.get_contents_as_numpy(handle, np.float32, shape)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        if protocol == "http":
            assert "data" not in raw and "binary_data_size" not in raw.get("parameters", {})
    if protocol == "grpc":  # one (empty) raw_output_contents entry per output, as Triton's
        assert list(result.get_response().raw_output_contents) == [b"", b""]

    # Unregister one, then all.
    c.unregister_system_shared_memory(f"{protocol}_in0")
    assert f"{protocol}_in0" not in region_names(c, protocol)
    c.unregister_system_shared_memory()
    assert region_names(c, protocol) == {}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_offsets_and_mixed_forms(clients, regions, protocol):
    """Both inputs in one region (offsets 0 and 64); then INPUT0 in shared memory with INPUT1 sent
    inline, and one output in a region with the other returned in the response."""
    c, m = clients[protocol], lib(protocol)
    c.unregister_system_shared_memory()
    a, b = data()
    both = regions(f"{protocol}_both", 2 * NBYTES)
    out = regions(f"{protocol}_outs", 2 * NBYTES)
    shm.set_shared_memory_region(both, [a])
    shm.set_shared_memory_region(both, [b], offset=NBYTES)
    c.register_system_shared_memory(f"{protocol}_both", key_of(f"{protocol}_both"), 2 * NBYTES)
    c.register_system_shared_memory(f"{protocol}_outs", key_of(f"{protocol}_outs"), 2 * NBYTES)

    inputs = [m.InferInput("INPUT0", [1, 16], "FP32"), m.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_shared_memory(f"{protocol}_both", NBYTES, offset=0)
    inputs[1].set_shared_memory(f"{protocol}_both", NBYTES, offset=NBYTES)
    outputs = [m.InferRequestedOutput("OUTPUT0"), m.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(f"{protocol}_outs", NBYTES, offset=NBYTES)
    outputs[1].set_shared_memory(f"{protocol}_outs", NBYTES, offset=0)
    c.infer("add_sub", inputs, outputs=outputs)
    np.testing.assert_allclose(shm.get_contents_as_numpy(out, np.float32, [1, 16], offset=NBYTES), a + b, rtol=1e-6)
    np.testing.assert_allclose(shm.get_contents_as_numpy(out, np.float32, [1, 16], offset=0), a - b, rtol=1e-6)

    # Mixed: INPUT0 from the region, INPUT1 inline; OUTPUT0 to the region, OUTPUT1 in the answer.
    b2 = (b * 3).astype(np.float32)
    inputs = [m.InferInput("INPUT0", [1, 16], "FP32"), m.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_shared_memory(f"{protocol}_both", NBYTES)
    inputs[1].set_data_from_numpy(b2)
    outputs = [m.InferRequestedOutput("OUTPUT0"), m.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(f"{protocol}_outs", NBYTES)
    result = c.infer("add_sub", inputs, outputs=outputs)
    np.testing.assert_allclose(shm.get_contents_as_numpy(out, np.float32, [1, 16]), a + b2, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b2, rtol=1e-6)
    c.unregister_system_shared_memory()


def expect_error(fn, *patterns):
    with pytest.raises(InferenceServerException) as e:
        fn()
    text = str(e.value)
    for p in patterns:
        assert re.search(p, text), f"{p!r} not in {text!r}"
    return text


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_errors_name_the_field_and_kilnd_keeps_serving(clients, regions, protocol):
    c, m = clients[protocol], lib(protocol)
    c.unregister_system_shared_memory()
    a, b = data()
    h = regions(f"{protocol}_err", NBYTES)
    small = regions(f"{protocol}_small", NBYTES // 2)
    shm.set_shared_memory_region(h, [a])
    c.register_system_shared_memory(f"{protocol}_err", key_of(f"{protocol}_err"), NBYTES)
    c.register_system_shared_memory(f"{protocol}_small", key_of(f"{protocol}_small"), NBYTES // 2)

    def infer(region, size, offset=0, out=None):
        inputs = [m.InferInput("INPUT0", [1, 16], "FP32"), m.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_shared_memory(region, size, offset=offset)
        inputs[1].set_data_from_numpy(b)
        outputs = None
        if out is not None:
            outputs = [m.InferRequestedOutput("OUTPUT0")]
            outputs[0].set_shared_memory(*out)
        return c.infer("add_sub", inputs, outputs=outputs)

    expect_error(lambda: infer("no_such_region", NBYTES), r"inputs\[0\]\.parameters\.shared_memory_region", "no_such_region")
    expect_error(lambda: infer(f"{protocol}_err", NBYTES, offset=16), r"shared_memory_offset", "past the end")
    expect_error(lambda: infer(f"{protocol}_err", NBYTES - 4), r"inputs\[0\]\.parameters\.shared_memory_byte_size",
                 f"expected {NBYTES} bytes")
    expect_error(lambda: infer(f"{protocol}_err", NBYTES, out=(f"{protocol}_small", NBYTES // 2)),
                 r"shared_memory_byte_size", "cannot hold")
    expect_error(lambda: c.register_system_shared_memory("ghost", f"/kiln_{TAG}_does_not_exist", 64),
                 "cannot open shared memory object", "does_not_exist")
    expect_error(lambda: c.register_system_shared_memory(f"{protocol}_err", key_of(f"{protocol}_err"), NBYTES),
                 "already registered")
    expect_error(lambda: c.register_system_shared_memory("too_big", key_of(f"{protocol}_err"), NBYTES * 2),
                 "past the end of shared memory object")
    expect_error(lambda: c.get_system_shared_memory_status("ghost"), "ghost")

    # A normal request still succeeds, and so does one that reads the region.
    inputs = [m.InferInput("INPUT0", [1, 16], "FP32"), m.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    np.testing.assert_allclose(c.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(infer(f"{protocol}_err", NBYTES).as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    c.unregister_system_shared_memory()


def test_unregister_while_requests_run(clients, regions, server):
    """Requests in flight keep their mapping: unregistering meanwhile makes later requests fail
    with an unknown region, never crashes kilnd."""
    c = clients["grpc"]
    c.unregister_system_shared_memory()
    a, b = data()
    h = regions("race", NBYTES)
    shm.set_shared_memory_region(h, [a])
    results = []
    for round_ in range(5):
        c.register_system_shared_memory("race", key_of("race"), NBYTES)
        for _ in range(20):
            inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
            inputs[0].set_shared_memory("race", NBYTES)
            inputs[1].set_data_from_numpy(b)
            c.async_infer("add_sub", inputs, callback=lambda result, error: results.append((result, error)))
        c.unregister_system_shared_memory("race")
    deadline = time.monotonic() + 30
    while len(results) < 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(results) == 100
    for r, e in results:
        if e is None:
            np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        else:
            # On a loaded 2-core machine 100 requests in flight can overrun add_sub's queue
            # (max_queue_size 64): backpressure is a correct answer too, never a crash.
            assert "no system shared memory region named 'race'" in str(e) or "the queue is full" in str(e), str(e)
    assert c.is_server_live() and server.proc.poll() is None
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    np.testing.assert_allclose(c.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + b, rtol=1e-6)


def test_registration_needs_allow_client_shm(models, regions):
    s = Kilnd(models)
    try:
        c = grpcclient.InferenceServerClient(url=s.url)
        regions("off", NBYTES)
        expect_error(lambda: c.register_system_shared_memory("off", key_of("off"), NBYTES), "--allow-client-shm")
        assert "system_shared_memory" not in c.get_server_metadata(as_json=True)["extensions"]
        h = httpclient.InferenceServerClient(url=s.http_url)
        expect_error(lambda: h.register_system_shared_memory("off", key_of("off"), NBYTES), "--allow-client-shm")
        c.close()
        h.close()
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_shared_memory_system(server, clients, protocol):
    if not os.access(PERF_ANALYZER, os.X_OK):
        pytest.fail(f"{PERF_ANALYZER} is missing: deploy/install-deps.sh installs it")
    c = clients["grpc"]
    before = c.get_inference_statistics("add_sub", "1").model_stats[0].inference_stats
    url = server.http_url if protocol == "http" else server.url
    args = [str(PERF_ANALYZER), "-m", "add_sub", "-u", url, "-i", protocol, "-b", "1",
            "--shared-memory=system", "--output-shared-memory-size=64", "--concurrency-range=2",
            "--measurement-mode=count_windows", "--measurement-request-count=100", "--max-trials=5",
            "--stability-percentage=1000"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=240)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"perf_analyzer --shared-memory=system ({protocol}) exited {proc.returncode}:\n{text}"
    requests = int(re.search(r"Client:\s*\n\s*Request count: (\d+)", text).group(1))
    after = c.get_inference_statistics("add_sub", "1").model_stats[0].inference_stats
    assert after.fail.count == before.fail.count
    assert after.success.count - before.success.count >= requests > 0


# ----- logging extension -----

def log_settings(client, protocol):
    s = client.get_log_settings(as_json=True) if protocol == "grpc" else client.get_log_settings()
    if protocol == "grpc":  # {"settings": {"log_info": {"boolParam": true}, ...}}
        return {k: next(iter(v.values())) for k, v in s["settings"].items()}
    return s


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_log_settings(server, clients, protocol):
    c, m = clients[protocol], lib(protocol)
    s = log_settings(c, protocol)
    assert set(s) == {"log_file", "log_info", "log_warning", "log_error", "log_verbose_level", "log_format"}
    assert s["log_file"] == "" and s["log_format"] == "default"
    assert s["log_info"] is True and s["log_warning"] is True and s["log_error"] is True

    def failing_call(tag):
        x = m.InferInput("X", [1], "FP32")
        x.set_data_from_numpy(np.zeros([1], np.float32))
        with pytest.raises(InferenceServerException, match=f"no_model_{tag}"):
            c.infer(f"no_model_{tag}", [x])

    # Verbose 0: a failed call is not logged; verbose 1: it is (a debug line naming the model).
    c.update_log_settings({"log_verbose_level": 0})
    quiet = f"{protocol}_quiet_{TAG}"
    failing_call(quiet)
    c.update_log_settings({"log_verbose_level": 1})
    loud = f"{protocol}_loud_{TAG}"
    failing_call(loud)
    deadline = time.monotonic() + 5
    while loud not in server.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    logs = server.logs()
    assert loud in logs and quiet not in logs

    updated = c.update_log_settings({"log_info": False, "log_format": "ISO8601"})
    if protocol == "grpc":
        updated = log_settings(c, protocol)
    assert updated["log_verbose_level"] == 1 and updated["log_info"] is False and updated["log_format"] == "ISO8601"
    iso = f"{protocol}_iso_{TAG}"
    failing_call(iso)
    deadline = time.monotonic() + 5
    while iso not in server.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    line = next(l for l in server.logs().splitlines() if iso in l)
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z debug ", line), line
    c.update_log_settings({"log_info": True, "log_format": "default", "log_verbose_level": 0})

    expect_error(lambda: c.update_log_settings({"log_colour": True}), "log_colour", "unknown log setting")
    expect_error(lambda: c.update_log_settings({"log_format": "json"}), "log_format", "json")
    expect_error(lambda: c.update_log_settings({"log_file": "/tmp/kiln_evil.log"}), "log_file", "cannot be changed")
    assert not Path("/tmp/kiln_evil.log").exists()
    # A refused update changed nothing.
    expect_error(lambda: c.update_log_settings({"log_info": False, "bogus": True}), "bogus")
    assert log_settings(c, protocol)["log_info"] is True
    # A wrong type (the stock grpc client types values by key, so the request is built by hand).
    if protocol == "http":
        expect_error(lambda: c.update_log_settings({"log_info": "yes"}), "log_info", "expected a boolean")
    else:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc
        request = service_pb2.LogSettingsRequest()
        request.settings["log_info"].string_param = "yes"
        with grpc.insecure_channel(server.url) as ch:
            with pytest.raises(grpc.RpcError) as e:
                service_pb2_grpc.GRPCInferenceServiceStub(ch).LogSettings(request)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "settings.log_info: expected a boolean" in e.value.details()
