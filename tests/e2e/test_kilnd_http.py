"""kilnd's REST gateway with the stock tritonclient.http: the tritonclient e2e suite again over
HTTP (health, metadata, config, repository, inference with JSON and with binary tensor data,
async inference, exact statistics counts). Reference values come from numpy."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def http(kilnd):
    c = httpclient.InferenceServerClient(url=kilnd.http_url, concurrency=4)
    yield c
    c.close()


def test_live_and_ready(http):
    assert http.is_server_live()
    assert http.is_server_ready()
    assert http.is_model_ready("add_sub")
    assert http.is_model_ready("add_sub", "1")
    assert not http.is_model_ready("add_sub", "2")
    assert http.is_model_ready("reduce_sum")
    assert not http.is_model_ready("no_such_model")


def test_server_metadata(http):
    md = http.get_server_metadata()
    assert md["name"] == "kiln"
    assert md["version"]
    assert set(md["extensions"]) >= {"model_repository", "model_configuration", "statistics"}


def test_model_metadata(http):
    md = http.get_model_metadata("add_sub")
    assert md["name"] == "add_sub"
    assert md["platform"] == "kiln_graph"
    assert md["versions"] == ["1"]
    assert [i["name"] for i in md["inputs"]] == ["INPUT0", "INPUT1"]
    assert [o["name"] for o in md["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    for t in md["inputs"] + md["outputs"]:
        assert t["datatype"] == "FP32"
        assert t["shape"] == [-1, 16]
    assert http.get_model_metadata("add_sub", "1")["name"] == "add_sub"


def test_model_metadata_unknown_model(http):
    with pytest.raises(InferenceServerException) as err:
        http.get_model_metadata("no_such_model")
    assert err.value.status() == "404"
    assert "unknown model 'no_such_model'" in err.value.message()


def test_model_config(http):
    cfg = http.get_model_config("add_sub")
    assert cfg["name"] == "add_sub"
    assert cfg["platform"] == "kiln_graph"
    assert cfg["max_batch_size"] == 8
    assert cfg["input"][0]["dims"] == [16]  # 64-bit integers as JSON numbers, as Triton
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert "dynamic_batching" in cfg
    cfg = http.get_model_config("reduce_sum")
    assert cfg.get("max_batch_size", 0) == 0
    assert cfg["input"][0]["dims"] == [-1, 8]


def test_repository_index(http):
    by_name = {m["name"]: m for m in http.get_model_repository_index()}
    assert by_name["add_sub"]["state"] == "READY"
    assert by_name["add_sub"]["version"] == "1"
    assert by_name["reduce_sum"]["state"] == "READY"


def test_unload_load_reload(http):
    http.unload_model("reduce_sum")
    assert not http.is_model_ready("reduce_sum")
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["reduce_sum"]["state"] == "UNAVAILABLE"
    assert index["reduce_sum"]["reason"] == "unloaded"
    http.load_model("reduce_sum")
    assert http.is_model_ready("reduce_sum")
    http.load_model("reduce_sum")  # reload of a loaded model
    assert http.is_model_ready("reduce_sum")


def test_load_unknown_model_fails(http):
    with pytest.raises(InferenceServerException) as err:
        http.load_model("no_such_model")
    assert "no model 'no_such_model'" in err.value.message()


def _add_sub_inputs(batch: int, binary: bool, dtype=np.float32, datatype="FP32"):
    a = httpclient.InferInput("INPUT0", [batch, 16], datatype)
    a.set_data_from_numpy(np.arange(batch * 16, dtype=dtype).reshape(batch, 16), binary_data=binary)
    b = httpclient.InferInput("INPUT1", [batch, 16], datatype)
    b.set_data_from_numpy(np.full((batch, 16), 0.25, dtype=dtype), binary_data=binary)
    return [a, b]


def _add_sub_expected(batch: int):
    a = np.arange(batch * 16, dtype=np.float32).reshape(batch, 16)
    b = np.full((batch, 16), 0.25, dtype=np.float32)
    return a + b, a - b


@pytest.mark.parametrize("binary_in", [False, True])
@pytest.mark.parametrize("binary_out", [False, True])
@pytest.mark.parametrize("batch", [1, 8])
def test_infer_add_sub(http, batch, binary_in, binary_out):
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_out)]
    result = http.infer("add_sub", _add_sub_inputs(batch, binary_in), outputs=outputs,
                        request_id=f"r{batch}")
    want0, want1 = _add_sub_expected(batch)
    out0 = result.as_numpy("OUTPUT0")
    out1 = result.as_numpy("OUTPUT1")
    assert out0.dtype == np.float32 and out0.shape == (batch, 16)
    np.testing.assert_array_equal(out0, want0)
    np.testing.assert_array_equal(out1, want1)
    response = result.get_response()
    assert response["model_name"] == "add_sub"
    assert response["model_version"] == "1"
    assert response["id"] == f"r{batch}"
    for o in response["outputs"]:
        assert o["datatype"] == "FP32"
        assert ("data" in o) == (not binary_out)
        assert ("binary_data_size" in o.get("parameters", {})) == binary_out


def test_infer_default_outputs_are_binary(http):
    # No outputs named: tritonclient.http asks for binary_data_output (all outputs binary).
    result = http.infer("add_sub", _add_sub_inputs(2, True))
    for o in result.get_response()["outputs"]:
        assert o["parameters"]["binary_data_size"] == 2 * 16 * 4
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), _add_sub_expected(2)[0])


def test_infer_requested_output_only(http):
    result = http.infer("add_sub", _add_sub_inputs(2, True),
                        outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), _add_sub_expected(2)[1])


@pytest.mark.parametrize("binary", [False, True])
def test_infer_reduce_sum(http, binary):
    x = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)
    inp = httpclient.InferInput("X", [3, 8], "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = http.infer("reduce_sum", [inp],
                     outputs=[httpclient.InferRequestedOutput("SUM", binary_data=binary)])
    got = out.as_numpy("SUM")
    assert got.shape == (3, 1)
    np.testing.assert_allclose(got, x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_infer_explicit_version(http):
    result = http.infer("add_sub", _add_sub_inputs(1, True), model_version="1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), _add_sub_expected(1)[1])
    with pytest.raises(InferenceServerException) as err:
        http.infer("add_sub", _add_sub_inputs(1, True), model_version="7")
    assert err.value.status() in ("400", "404")


def test_async_infer(http):
    handles = {b: http.async_infer("add_sub", _add_sub_inputs(b, True)) for b in (1, 3, 8)}
    for batch, handle in handles.items():
        result = handle.get_result(timeout=30)
        want0, want1 = _add_sub_expected(batch)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), want0)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), want1)


def test_infer_wrong_datatype_is_invalid(http):
    with pytest.raises(InferenceServerException) as err:
        http.infer("add_sub", _add_sub_inputs(2, True, np.int32, "INT32"))
    assert err.value.status() == "400"
    assert "expects FP32, got INT32" in err.value.message()


def test_infer_unknown_model_is_404(http):
    with pytest.raises(InferenceServerException) as err:
        http.infer("no_such_model", _add_sub_inputs(1, True))
    assert err.value.status() == "404"


def _stats(http, model):
    (entry,) = http.get_inference_statistics(model)["model_stats"]
    st = entry["inference_stats"]
    return {
        "success": st["success"]["count"], "fail": st["fail"]["count"],
        "compute_infer": st["compute_infer"]["count"],
        "inference_count": entry["inference_count"],
        "execution_count": entry["execution_count"],
        "batch": {b["batch_size"]: b["compute_infer"]["count"] for b in entry["batch_stats"]},
        "entry": entry,
    }


def test_statistics_counts_match_requests(http):
    before = _stats(http, "add_sub")
    batches = [1, 8, 8, 2, 1]
    for i, b in enumerate(batches):
        http.infer("add_sub", _add_sub_inputs(b, binary=i % 2 == 0))
    for _ in range(3):  # validation failures: wrong datatype
        with pytest.raises(InferenceServerException):
            http.infer("add_sub", _add_sub_inputs(2, True, np.int32, "INT32"))
    after = _stats(http, "add_sub")
    assert after["entry"]["name"] == "add_sub"
    assert after["entry"]["version"] == "1"
    assert after["success"] == before["success"] + len(batches)
    assert after["fail"] == before["fail"] + 3
    assert after["compute_infer"] == before["compute_infer"] + len(batches)
    assert after["inference_count"] == before["inference_count"] + sum(batches)
    assert after["execution_count"] == before["execution_count"] + len(batches)
    for size in set(batches):
        assert after["batch"].get(size, 0) == before["batch"].get(size, 0) + batches.count(size)
    everything = http.get_inference_statistics()["model_stats"]
    assert {s["name"] for s in everything} >= {"add_sub", "reduce_sum"}
