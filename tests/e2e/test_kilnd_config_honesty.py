"""Config honesty (issue #25 item 4): a config.pbtxt field kilnd does not implement fails the
load with a message naming it; an unknown platform or a model file the platform cannot parse
fails the load; what kilnd does implement loads. One kilnd, a repository of variants of the
bundled add_sub model, the stock tritonclient."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from kilnd_launcher import Kilnd

MODELS = Path(os.environ.get("KILN_MODELS", Path(__file__).resolve().parents[2] / "models"))

# name -> (config.pbtxt lines added to add_sub's, words the load error must contain)
REFUSED = {
    "seq": ("sequence_batching { max_sequence_idle_microseconds: 1000 }",
            "config sequence_batching: not implemented by kilnd"),
    "reshape": (None, "config input[1].reshape: not implemented by kilnd"),
    "param": ('parameters { key: "execution_mode" value { string_value: "fast" } }',
              'config parameters["execution_mode"]: not a parameter kilnd reads'),
    "decoupled": ("model_transaction_policy { decoupled: true }",
                  "config model_transaction_policy.decoupled: not implemented by kilnd"),
    "priority_default": ("dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
                         "dynamic_batching.default_priority_level: 3 is outside [1, priority_levels 2]"),
    "preferred_big": ("dynamic_batching { preferred_batch_size: [4, 16] }",
                      "dynamic_batching.preferred_batch_size[1]: 16 is outside [1, max_batch_size 8]"),
    "tags": ('metric_tags { key: "team" value: "a" }', "config metric_tags: not implemented by kilnd"),
    "tensorrt": ('platform: "tensorrt_plan"', "unknown platform 'tensorrt_plan'"),
    "cache_on": ("response_cache { enable: true }",  # this kilnd has no --cache-config
                 "config response_cache.enable: kilnd runs without a response cache"),
}
# implemented: these load
ACCEPTED = {
    "hints": "dynamic_batching { max_queue_delay_microseconds: 100 preferred_batch_size: [4, 8] "
             "default_queue_policy { max_queue_size: 16 } }",
    "priority": "dynamic_batching { priority_levels: 2 default_priority_level: 2 "
                "priority_queue_policy { key: 1 value { max_queue_size: 4 } } }",
    "queue_timeout": "dynamic_batching { default_queue_policy { timeout_action: DELAY "
                     "default_timeout_microseconds: 5 allow_timeout_override: true } }",
    "cache_off": "response_cache { enable: false }",
    "not_decoupled": "model_transaction_policy { decoupled: false }",
}


def add_sub_config(extra: str | None) -> str:
    lines = [l for l in (MODELS / "add_sub" / "config.pbtxt").read_text().splitlines()
             if not l.startswith(("#", "name:", "dynamic_batching"))]
    text = "\n".join(lines) + "\n"
    if extra and extra.startswith("platform:"):
        text = text.replace('platform: "kiln_graph"', extra)
    elif extra:
        text += extra + "\n"
    return text


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    repo = tmp_path_factory.mktemp("honesty")
    for name, extra in [*((n, e) for n, (e, _) in REFUSED.items()), *ACCEPTED.items()]:
        shutil.copytree(MODELS / "add_sub" / "1", repo / name / "1")
        (repo / name / "config.pbtxt").write_text(add_sub_config(extra))
    text = (repo / "reshape" / "config.pbtxt").read_text()
    (repo / "reshape" / "config.pbtxt").write_text(text.replace(
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }',
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] reshape: { shape: [ 4, 4 ] } }'))
    # platform kiln_onnx (advertised by kilnd) with a model.onnx that is not ONNX
    (repo / "junk_onnx" / "1").mkdir(parents=True)
    (repo / "junk_onnx" / "1" / "model.onnx").write_bytes(b"this is not a protobuf \xff\xfe" * 40)
    (repo / "junk_onnx" / "config.pbtxt").write_text(
        'platform: "kiln_onnx"\nmax_batch_size: 0\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]\n')
    server = Kilnd(repo, ["--strict-readiness=false", "--metrics-port=-1"])
    yield server
    assert server.stop() == 0


def index(client) -> dict:
    return {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unimplemented_field_fails_the_load_naming_it(setup, name):
    client = grpcclient.InferenceServerClient(setup.url)
    entry = index(client)[name]
    assert entry.get("state") == "UNAVAILABLE", entry
    assert REFUSED[name][1] in entry.get("reason", ""), entry
    assert not client.is_model_ready(name)
    with pytest.raises(Exception) as e:  # an explicit load answers the same message
        client.load_model(name)
    assert REFUSED[name][1] in str(e.value)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_implemented_fields_load(setup, name):
    client = grpcclient.InferenceServerClient(setup.url)
    assert client.is_model_ready(name), index(client)[name]


def test_a_model_file_the_platform_cannot_parse_fails_the_load(setup):
    client = grpcclient.InferenceServerClient(setup.url)
    entry = index(client)["junk_onnx"]
    assert entry.get("state") == "UNAVAILABLE" and "not a valid ONNX model" in entry["reason"], entry
    assert not client.is_model_ready("junk_onnx")
