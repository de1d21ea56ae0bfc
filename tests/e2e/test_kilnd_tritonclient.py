"""kilnd with the stock tritonclient.grpc: health, metadata, config, repository, inference
(kiln_graph models run by the engine; outputs compared with numpy), async inference and exact
statistics counts."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


def test_live_and_ready(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert client.is_model_ready("reduce_sum")
    assert not client.is_model_ready("no_such_model")


def test_server_metadata(client):
    md = client.get_server_metadata(as_json=True)
    assert md["name"] == "kiln"
    assert md["version"]
    assert set(md["extensions"]) == {"model_repository", "model_configuration", "statistics", "logging", "trace"}


def test_model_metadata(client):
    md = client.get_model_metadata("add_sub", as_json=True)
    assert md["name"] == "add_sub"
    assert md["platform"] == "kiln_graph"
    assert md["versions"] == ["1"]
    assert [i["name"] for i in md["inputs"]] == ["INPUT0", "INPUT1"]
    assert [o["name"] for o in md["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    for t in md["inputs"] + md["outputs"]:
        assert t["datatype"] == "FP32"
        assert [int(d) for d in t["shape"]] == [-1, 16]


def test_model_metadata_unknown_model(client):
    with pytest.raises(InferenceServerException) as err:
        client.get_model_metadata("no_such_model")
    assert "StatusCode.NOT_FOUND" in str(err.value.status())
    assert "unknown model 'no_such_model'" in err.value.message()


def test_model_config(client):
    cfg = client.get_model_config("add_sub", as_json=True)["config"]
    assert cfg["name"] == "add_sub"
    assert cfg["platform"] == "kiln_graph"
    assert cfg["max_batch_size"] == 8
    assert [int(d) for d in cfg["input"][0]["dims"]] == [16]
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert "dynamic_batching" in cfg
    cfg = client.get_model_config("reduce_sum", as_json=True)["config"]
    assert cfg.get("max_batch_size", 0) == 0
    assert [int(d) for d in cfg["input"][0]["dims"]] == [-1, 8]


def test_repository_index(client):
    index = client.get_model_repository_index(as_json=True)["models"]
    by_name = {m["name"]: m for m in index}
    assert by_name["add_sub"]["state"] == "READY"
    assert by_name["add_sub"]["version"] == "1"
    assert by_name["reduce_sum"]["state"] == "READY"


def test_unload_load_reload(client):
    client.unload_model("reduce_sum")
    assert not client.is_model_ready("reduce_sum")
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["reduce_sum"]["state"] == "UNAVAILABLE"
    assert index["reduce_sum"]["reason"] == "unloaded"
    client.load_model("reduce_sum")
    assert client.is_model_ready("reduce_sum")
    client.load_model("reduce_sum")  # reload of a loaded model
    assert client.is_model_ready("reduce_sum")


def test_load_unknown_model_fails(client):
    with pytest.raises(InferenceServerException) as err:
        client.load_model("no_such_model")
    assert "no model 'no_such_model'" in err.value.message()


def _add_sub_inputs(batch: int, dtype=np.float32, datatype="FP32"):
    a = grpcclient.InferInput("INPUT0", [batch, 16], datatype)
    a.set_data_from_numpy(np.arange(batch * 16, dtype=dtype).reshape(batch, 16))
    b = grpcclient.InferInput("INPUT1", [batch, 16], datatype)
    b.set_data_from_numpy(np.ones((batch, 16), dtype=dtype))
    return [a, b]


def _add_sub_expected(batch: int):
    a = np.arange(batch * 16, dtype=np.float32).reshape(batch, 16)
    b = np.ones((batch, 16), dtype=np.float32)
    return a + b, a - b


@pytest.mark.parametrize("batch", [1, 8])
def test_infer_add_sub(client, batch):
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    result = client.infer("add_sub", _add_sub_inputs(batch), outputs=outputs, request_id=f"r{batch}")
    want0, want1 = _add_sub_expected(batch)
    out0 = result.as_numpy("OUTPUT0")
    out1 = result.as_numpy("OUTPUT1")
    assert out0.dtype == np.float32 and out0.shape == (batch, 16)
    np.testing.assert_array_equal(out0, want0)
    np.testing.assert_array_equal(out1, want1)
    response = result.get_response(as_json=True)
    assert response["model_name"] == "add_sub"
    assert response["model_version"] == "1"
    assert response["id"] == f"r{batch}"
    assert {o["name"]: o["datatype"] for o in response["outputs"]} == {"OUTPUT0": "FP32",
                                                                       "OUTPUT1": "FP32"}


def test_infer_add_sub_requested_output_only(client):
    result = client.infer("add_sub", _add_sub_inputs(2),
                          outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), _add_sub_expected(2)[1])


def test_infer_reduce_sum(client):
    x = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)
    inp = grpcclient.InferInput("X", [3, 8], "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer("reduce_sum", [inp])
    out = result.as_numpy("SUM")
    assert out.shape == (3, 1)
    np.testing.assert_allclose(out, x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_infer_reduce_sum_other_row_count(client):
    x = np.arange(5 * 8, dtype=np.float32).reshape(5, 8)
    inp = grpcclient.InferInput("X", [5, 8], "FP32")
    inp.set_data_from_numpy(x)
    out = client.infer("reduce_sum", [inp]).as_numpy("SUM")
    np.testing.assert_array_equal(out, x.sum(axis=1, keepdims=True))


def test_async_infer(client):
    done: queue.Queue = queue.Queue()
    for batch in (1, 3, 8):
        client.async_infer("add_sub", _add_sub_inputs(batch),
                           callback=lambda result, error, b=batch: done.put((b, result, error)))
    seen = set()
    for _ in range(3):
        batch, result, error = done.get(timeout=30)
        assert error is None, error
        want0, want1 = _add_sub_expected(batch)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), want0)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), want1)
        seen.add(batch)
    assert seen == {1, 3, 8}


def test_infer_wrong_datatype_is_invalid(client):
    with pytest.raises(InferenceServerException) as err:
        client.infer("add_sub", _add_sub_inputs(2, np.int32, "INT32"))
    assert "StatusCode.INVALID_ARGUMENT" in str(err.value.status())
    assert "expects FP32, got INT32" in err.value.message()


def _stats(client, model):
    (entry,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    st = entry["inference_stats"]
    return {
        "success": int(st["success"].get("count", 0)),
        "fail": int(st["fail"].get("count", 0)),
        "queue": int(st["queue"].get("count", 0)),
        "compute_infer": int(st["compute_infer"].get("count", 0)),
        "compute_infer_ns": int(st["compute_infer"].get("ns", 0)),
        "inference_count": int(entry.get("inference_count", 0)),
        "execution_count": int(entry.get("execution_count", 0)),
        "batch": {int(b["batch_size"]): int(b["compute_infer"].get("count", 0))
                  for b in entry.get("batch_stats", [])},
        "entry": entry,
    }


def test_statistics_counts_match_requests(client):
    before = _stats(client, "add_sub")
    batches = [1, 8, 8, 2, 1]
    for b in batches:
        client.infer("add_sub", _add_sub_inputs(b))
    for _ in range(3):  # validation failures: wrong datatype
        with pytest.raises(InferenceServerException):
            client.infer("add_sub", _add_sub_inputs(2, np.int32, "INT32"))
    after = _stats(client, "add_sub")
    assert after["entry"]["name"] == "add_sub"
    assert after["entry"]["version"] == "1"
    assert after["success"] == before["success"] + len(batches)
    assert after["fail"] == before["fail"] + 3
    assert after["queue"] == before["queue"] + len(batches)
    assert after["compute_infer"] == before["compute_infer"] + len(batches)
    assert after["compute_infer_ns"] > before["compute_infer_ns"]
    assert after["inference_count"] == before["inference_count"] + sum(batches)
    assert after["execution_count"] == before["execution_count"] + len(batches)
    for size in set(batches):
        assert after["batch"].get(size, 0) == before["batch"].get(size, 0) + batches.count(size)
    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {s["name"] for s in everything} >= {"add_sub", "reduce_sum"}
