"""kilnd serving on OpenCL (--device=CL; PoCL in CI): inference through the stock tritonclient matches numpy, and
the kernels ran on CL (kiln_kernel_launches_total{device="CL:0"} counts them: --device=CL is the canonical CL:0).
--device is only the default: add_sub's config says instance_group KIND_CPU, so it stays on CPU.
Fails where no OpenCL device exists (deploy/install-deps.sh installs PoCL)."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from conftest import Kilnd, free_port, require_opencl


@pytest.fixture(autouse=True, scope="module")
def _opencl():
    require_opencl()


@pytest.fixture(scope="module")
def cl_server(models):
    port = free_port()
    server = Kilnd(models, ["--device=CL", f"--metrics-port={port}"])
    server.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield server
    assert server.stop() == 0


def _launches(server, device: str) -> float:
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kiln_kernel_launches_total" and sample.labels.get("device") == device:
                return sample.value
    return 0.0


def test_reduce_sum_on_cl(cl_server):
    """reduce_sum names no instance_group: it runs on the --device default."""
    client = grpcclient.InferenceServerClient(url=cl_server.url)
    x = np.arange(24, dtype=np.float32).reshape(3, 8) * 0.25
    i0 = grpcclient.InferInput("X", [3, 8], "FP32")
    i0.set_data_from_numpy(x)
    before_cl, before_cpu = _launches(cl_server, "CL:0"), _launches(cl_server, "CPU")
    result = client.infer("reduce_sum", [i0])
    np.testing.assert_allclose(result.as_numpy("SUM"), x.sum(axis=1, keepdims=True), rtol=1e-6)
    assert _launches(cl_server, "CL:0") > before_cl, "the kernels did not run on CL"
    assert _launches(cl_server, "CPU") == before_cpu, "reduce_sum's kernels ran on CPU"
    client.close()


def test_add_sub_follows_its_instance_group(cl_server):
    """add_sub says instance_group KIND_CPU: --device=CL does not move it."""
    client = grpcclient.InferenceServerClient(url=cl_server.url)
    a = np.arange(32, dtype=np.float32).reshape(2, 16) * 0.5
    b = np.full((2, 16), 3.25, dtype=np.float32)
    i0 = grpcclient.InferInput("INPUT0", [2, 16], "FP32")
    i0.set_data_from_numpy(a)
    i1 = grpcclient.InferInput("INPUT1", [2, 16], "FP32")
    i1.set_data_from_numpy(b)
    before_cl, before_cpu = _launches(cl_server, "CL:0"), _launches(cl_server, "CPU")
    result = client.infer("add_sub", [i0, i1])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert _launches(cl_server, "CPU") > before_cpu, "add_sub's kernels did not run on CPU"
    assert _launches(cl_server, "CL:0") == before_cl, "add_sub's kernels ran on CL"
    client.close()
