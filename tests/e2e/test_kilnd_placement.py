"""Placement by instance_group (issue #7): a real kilnd serves two models on two devices of this machine.

A temporary repository holds a copy of fashion_mnist with `instance_group [{kind: KIND_CPU}]` and a copy of add_sub
with `instance_group [{kind: KIND_GPU, gpus: [0]}]` (the first accelerator: CL:0 here, PoCL). Both are inferred with
the stock tritonclient.grpc; the scraped metrics (prometheus_client's parser) show each model's kernels counted under
its own device only, kiln_model_memory_bytes for each version (> 0 for the builtin CNN, whose weights live on CPU),
kiln_device_memory_bytes for both devices, and the series of an unloaded version gone. A copy asking for a GPU the
machine lacks fails to load with an error naming instance_group[0].gpus, and one ModelStreamInfer stream mixing both
devices and a refused request answers in request order. Fails where no OpenCL device exists (deploy/install-deps.sh installs PoCL)."""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from conftest import Kilnd, free_port, require_opencl


@pytest.fixture(autouse=True, scope="module")
def _opencl():
    require_opencl()


def _copy_model(models: Path, root: Path, source: str, name: str, instance_group: str) -> None:
    shutil.copytree(models / source / "1", root / name / "1")
    lines = [line for line in (models / source / "config.pbtxt").read_text().splitlines()
             if not line.startswith(("name:", "instance_group"))]
    (root / name / "config.pbtxt").write_text("\n".join(lines) + "\n" + instance_group + "\n")


@pytest.fixture(scope="module")
def placed(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("placement_repo")
    _copy_model(models, root, "fashion_mnist", "cnn_cpu", "instance_group [{ kind: KIND_CPU }]")
    _copy_model(models, root, "add_sub", "add_gpu", "instance_group [{ kind: KIND_GPU gpus: [ 0 ] }]")
    _copy_model(models, root, "add_sub", "add_missing_gpu", "instance_group [{ kind: KIND_GPU gpus: [ 9 ] }]")
    port = free_port()
    server = Kilnd(root, [f"--metrics-port={port}"])
    server.metrics_url = f"http://127.0.0.1:{port}/metrics"
    server.repository = root
    client = grpcclient.InferenceServerClient(url=server.url)
    yield server, client
    client.close()
    assert server.stop() == 0


def _scrape(server) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _per_device(samples, name: str) -> dict[str, float]:
    """Sum of `name` samples by their device label."""
    out: dict[str, float] = {}
    for (n, labels), v in samples.items():
        if n == name:
            device = dict(labels).get("device", "")
            out[device] = out.get(device, 0.0) + v
    return out


def _kernel_counts(server) -> tuple[dict[str, float], dict[str, float]]:
    samples = _scrape(server)
    return (_per_device(samples, "kiln_kernel_launches_total"),
            _per_device(samples, "kiln_kernel_duration_seconds_count"))


def _infer_add(client, model: str):
    a = np.arange(16, dtype=np.float32).reshape(1, 16) * 0.75
    b = np.full((1, 16), -2.5, dtype=np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def _infer_cnn(client, model: str, seed: int):
    x = np.random.default_rng(seed).random((1, 1, 28, 28), dtype=np.float32)
    inp = grpcclient.InferInput("INPUT", [1, 1, 28, 28], "FP32")
    inp.set_data_from_numpy(x)
    out = client.infer(model, [inp]).as_numpy("OUTPUT")
    assert out.shape == (1, 10) and np.isfinite(out).all()


def test_each_model_runs_on_its_device(placed):
    server, client = placed
    launches0, timed0 = _kernel_counts(server)

    _infer_add(client, "add_gpu")
    launches1, timed1 = _kernel_counts(server)
    assert launches1.get("CL:0", 0) > launches0.get("CL:0", 0), "add_gpu's kernels did not run on CL:0"
    assert timed1.get("CL:0", 0) > timed0.get("CL:0", 0)
    assert launches1.get("CPU", 0) == launches0.get("CPU", 0), "add_gpu ran kernels on CPU"

    for seed in range(3):  # run, capture, replay
        _infer_cnn(client, "cnn_cpu", seed)
    launches2, timed2 = _kernel_counts(server)
    assert launches2.get("CPU", 0) > launches1.get("CPU", 0), "cnn_cpu's kernels did not run on CPU"
    assert timed2.get("CPU", 0) > timed1.get("CPU", 0)
    assert launches2.get("CL:0", 0) == launches1.get("CL:0", 0), "cnn_cpu ran kernels on CL:0"


def test_model_config_echoes_the_placement(placed):
    _, client = placed
    gpu = client.get_model_config("add_gpu", as_json=True)["config"]["instance_group"]
    assert len(gpu) == 1 and gpu[0]["kind"] == "KIND_GPU" and [int(g) for g in gpu[0]["gpus"]] == [0]
    cpu = client.get_model_config("cnn_cpu", as_json=True)["config"]["instance_group"]
    assert len(cpu) == 1 and cpu[0]["kind"] == "KIND_CPU"


def test_missing_gpu_fails_to_load_naming_the_field(placed):
    server, client = placed
    assert not client.is_model_ready("add_missing_gpu")
    with pytest.raises(InferenceServerException) as err:
        client.load_model("add_missing_gpu")
    assert "instance_group[0].gpus: GPU 9 does not exist" in err.value.message()
    assert "CL:0" in err.value.message()
    assert client.is_server_live() and client.is_model_ready("add_gpu")


def test_memory_metrics(placed):
    server, client = placed
    _infer_cnn(client, "cnn_cpu", 7)
    samples = _scrape(server)
    memory = {dict(labels)["model"]: (dict(labels), v)
              for (n, labels), v in samples.items() if n == "kiln_model_memory_bytes"}
    assert set(memory) == {"cnn_cpu", "add_gpu"}
    cnn_labels, cnn_bytes = memory["cnn_cpu"]
    assert cnn_labels["device"] == "CPU" and cnn_labels["version"] == "1"
    weights = (Path(server.repository) / "cnn_cpu" / "1" / "model.safetensors").stat().st_size
    assert cnn_bytes > 0.9 * weights, "the CNN's weights are not counted"
    gpu_labels, gpu_bytes = memory["add_gpu"]
    assert gpu_labels["device"] == "CL:0" and gpu_bytes == 0  # a kiln_graph model holds no buffers
    devices = _per_device(samples, "kiln_device_memory_bytes")
    assert devices.get("CPU", 0) >= cnn_bytes
    assert "CL:0" in devices

    client.unload_model("cnn_cpu")
    after = [dict(labels)["model"] for (n, labels), _ in _scrape(server).items() if n == "kiln_model_memory_bytes"]
    assert after == ["add_gpu"]
    client.load_model("cnn_cpu")  # back, and its series with it
    after = [dict(labels)["model"] for (n, labels), _ in _scrape(server).items() if n == "kiln_model_memory_bytes"]
    assert sorted(after) == ["add_gpu", "cnn_cpu"]


def test_stream_answers_stay_in_request_order_across_devices(placed):
    """A slow CPU request, a fast CL one, a refused one and another CPU one on one stream: the answers come back in
    request order although the CL and the refused answers are ready first."""
    server, _ = placed
    client = grpcclient.InferenceServerClient(url=server.url)
    warm = np.zeros((64, 1, 28, 28), np.float32)
    for _ in range(3):  # compiled and captured: the stream's batch-64 run is a steady replay
        inp = grpcclient.InferInput("INPUT", [64, 1, 28, 28], "FP32")
        inp.set_data_from_numpy(warm)
        client.infer("cnn_cpu", [inp])
    _infer_add(client, "add_gpu")
    answers = []
    done = __import__("threading").Event()

    def callback(result, error):
        answers.append("error" if error is not None else result.get_response().id)
        if len(answers) == 4:
            done.set()

    client.start_stream(callback=callback)
    slow = grpcclient.InferInput("INPUT", [64, 1, 28, 28], "FP32")
    slow.set_data_from_numpy(np.random.default_rng(1).random((64, 1, 28, 28), dtype=np.float32))
    client.async_stream_infer("cnn_cpu", [slow], request_id="0")
    a = np.ones((1, 16), np.float32)
    fast = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    for x in fast:
        x.set_data_from_numpy(a)
    client.async_stream_infer("add_gpu", fast, request_id="1")
    client.async_stream_infer("no_such_model", fast, request_id="2")
    one = grpcclient.InferInput("INPUT", [1, 1, 28, 28], "FP32")
    one.set_data_from_numpy(np.zeros((1, 1, 28, 28), np.float32))
    client.async_stream_infer("cnn_cpu", [one], request_id="3")
    assert done.wait(60), f"answers so far: {answers}"
    client.stop_stream()
    client.close()
    assert answers == ["0", "1", "error", "3"]
