"""kilnd with the stock tritonclient.grpc: health, metadata, config, repository, statistics,
and the honest UNAVAILABLE answer to inference while no execution platform is built in."""

from __future__ import annotations

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
    assert set(md["extensions"]) == {"model_repository", "model_configuration", "statistics"}


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


def test_infer_is_honestly_unavailable(client):
    with pytest.raises(InferenceServerException) as err:
        client.infer("add_sub", _add_sub_inputs(1))
    assert "StatusCode.UNAVAILABLE" in str(err.value.status())
    assert err.value.message() == (
        "platform kiln_graph for model add_sub is not available in this build")


def test_infer_wrong_datatype_is_invalid(client):
    with pytest.raises(InferenceServerException) as err:
        client.infer("add_sub", _add_sub_inputs(2, np.int32, "INT32"))
    assert "StatusCode.INVALID_ARGUMENT" in str(err.value.status())
    assert "expects FP32, got INT32" in err.value.message()


def test_statistics_count_failures(client):
    before = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    failed_before = int(before["inference_stats"]["fail"].get("count", 0))
    for _ in range(3):
        with pytest.raises(InferenceServerException):
            client.infer("add_sub", _add_sub_inputs(1))
    after = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    assert after["name"] == "add_sub"
    assert after["version"] == "1"
    assert int(after["inference_stats"]["fail"]["count"]) == failed_before + 3
    assert int(after["inference_stats"]["success"].get("count", 0)) == 0
    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {s["name"] for s in everything} >= {"add_sub", "reduce_sum"}
