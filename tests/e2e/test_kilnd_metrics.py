"""kilnd's Prometheus endpoint (--metrics-port): scraped over HTTP and parsed with
prometheus_client's text parser; Triton's nv_inference_* counters and kiln's request histogram
match the requests sent exactly; kernel histograms are non-empty."""

from __future__ import annotations

import socket
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from conftest import Kilnd


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def metrics_server(models):
    port = _free_port()
    server = Kilnd(models, [f"--metrics-port={port}"])
    server.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def mclient(metrics_server):
    c = grpcclient.InferenceServerClient(url=metrics_server.url)
    yield c
    c.close()


def scrape(url: str) -> dict:
    """{(sample name, frozenset(labels)): value} over every family. prometheus_client names
    counter samples <family>_total whatever the exposition says; they are keyed by the family
    name here (nv_inference_request_success, kiln_kernel_launches)."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = family.name if family.type == "counter" and s.name == family.name + "_total" \
                else s.name
            samples[(name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: dict, name: str, **labels) -> float:
    """Sum of `name` over every series whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def add_sub_inputs(batch: int, dtype=np.float32, datatype="FP32"):
    a = grpcclient.InferInput("INPUT0", [batch, 16], datatype)
    a.set_data_from_numpy(np.zeros((batch, 16), dtype=dtype))
    b = grpcclient.InferInput("INPUT1", [batch, 16], datatype)
    b.set_data_from_numpy(np.ones((batch, 16), dtype=dtype))
    return [a, b]


def test_counters_match_requests(metrics_server, mclient):
    before = scrape(metrics_server.metrics_url)
    batches = [1, 8, 4, 8, 1, 2]
    for b in batches:
        mclient.infer("add_sub", add_sub_inputs(b))
    for _ in range(4):  # rejected by validation
        with pytest.raises(InferenceServerException):
            mclient.infer("add_sub", add_sub_inputs(1, np.int32, "INT32"))
    for _ in range(2):  # no such model: not a model-version failure
        with pytest.raises(InferenceServerException):
            mclient.infer("no_such_model", add_sub_inputs(1))
    after = scrape(metrics_server.metrics_url)

    def delta(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    mv = {"model": "add_sub", "version": "1"}
    assert delta("nv_inference_request_success", **mv) == len(batches)
    assert delta("nv_inference_request_failure", **mv) == 4
    assert delta("nv_inference_request_failure", reason="OTHER", **mv) == 4
    assert delta("nv_inference_count", **mv) == sum(batches)
    assert delta("nv_inference_exec_count", **mv) == len(batches)
    assert delta("nv_inference_request_duration_us", **mv) > 0
    assert delta("nv_inference_compute_infer_duration_us", **mv) > 0
    assert total(after, "nv_inference_request_failure", model="no_such_model") == 0

    grpc_ok = {"model": "add_sub", "protocol": "grpc", "code": "OK"}
    assert delta("kiln_request_duration_seconds_count", **grpc_ok) == len(batches)
    assert delta("kiln_request_duration_seconds_count", model="add_sub", protocol="grpc",
                 code="INVALID_ARGUMENT") == 4
    assert delta("kiln_request_duration_seconds_count", model="", protocol="grpc",
                 code="NOT_FOUND") == 2
    assert value(after, "kiln_request_duration_seconds_bucket", le="+Inf", **grpc_ok) == \
        value(after, "kiln_request_duration_seconds_count", **grpc_ok)

    # Kernel histograms: non-empty, one observation per launch.
    kernel_count = total(after, "kiln_kernel_duration_seconds_count")
    assert kernel_count >= len(batches)
    assert kernel_count == total(after, "kiln_kernel_launches")
    kernels = {dict(ls)["kernel"] for (n, ls) in after if n == "kiln_kernel_duration_seconds_count"}
    assert kernels and all(k for k in kernels)


def test_compute_phase_counters_host_families_and_bounded_kernel_labels(metrics_server, mclient):
    """Triton's compute input/output counters and nv_cpu_* host families are exported; the kernel
    histogram's series of a model do not grow with the batch sizes it is sent."""
    mv = {"model": "add_sub", "version": "1"}

    def kernel_labels(samples):
        return {dict(ls)["kernel"] for (n, ls) in samples
                if n == "kiln_kernel_duration_seconds_count" and dict(ls).get("model") == "add_sub"}

    mclient.infer("add_sub", add_sub_inputs(3))
    first = scrape(metrics_server.metrics_url)
    for b in [1, 2, 5, 7, 8]:
        mclient.infer("add_sub", add_sub_inputs(b))
    after = scrape(metrics_server.metrics_url)
    for family in ("nv_inference_compute_input_duration_us", "nv_inference_compute_output_duration_us"):
        assert (family, frozenset(mv.items())) in after, family
        assert value(after, family, **mv) >= value(first, family, **mv)
    assert kernel_labels(first), "no kernel series for add_sub"
    assert kernel_labels(after) == kernel_labels(first), \
        f"kernel series grew with the batch size: {sorted(kernel_labels(after) - kernel_labels(first))}"

    with open("/proc/meminfo") as f:
        meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    total_bytes = value(after, "nv_cpu_memory_total_bytes")
    assert total_bytes == meminfo["MemTotal"]
    assert 0 < value(after, "nv_cpu_memory_used_bytes") <= total_bytes
    assert 0.0 <= value(after, "nv_cpu_utilization") <= 1.0
