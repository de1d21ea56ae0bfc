"""Triton's server flags with Triton's meaning (issue #25 item 3), against a real kilnd spoken to
with the stock tritonclient: --model-control-mode none/poll/explicit with --load-model,
--strict-readiness, --exit-on-error, --strict-model-config, --http-address, --log-verbose."""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from kilnd_launcher import Kilnd as _Kilnd


def Kilnd(repo: Path, extra: list[str] | None = None) -> _Kilnd:  # noqa: N802
    """A kilnd without a metrics endpoint (never the default port 8002)."""
    return _Kilnd(repo, ["--metrics-port=-1", *(extra or [])])

MODELS = Path(os.environ.get("KILN_MODELS", Path(__file__).resolve().parents[2] / "models"))
BROKEN = 'platform: "kiln_graph"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n' \
         'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n'


def repo_with(tmp_path: Path, *names: str, broken: bool = False) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in names:
        shutil.copytree(MODELS / name, repo / name)
    if broken:  # a config kilnd accepts, a version folder whose model.graph is missing
        (repo / "broken" / "1").mkdir(parents=True)
        (repo / "broken" / "config.pbtxt").write_text(BROKEN)
    return repo


def http_status(host: str, port: int, path: str) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def add_sub_works(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2.0, np.float32)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        t = grpcclient.InferInput(name, list(value.shape), "FP32")
        t.set_data_from_numpy(value)
        inputs.append(t)
    out = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), a + b)


def wait_for(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_explicit_mode_loads_only_the_load_model_models(tmp_path):
    repo = repo_with(tmp_path, "add_sub", "reduce_sum", "fashion_mnist")
    server = Kilnd(repo, ["--model-control-mode=explicit", "--load-model=add_sub",
                          "--load-model", "reduce_sum"])  # repeated, both spellings
    try:
        client = grpcclient.InferenceServerClient(server.url)
        assert client.is_model_ready("add_sub") and client.is_model_ready("reduce_sum")
        assert not client.is_model_ready("fashion_mnist")
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert "state" not in index["fashion_mnist"], index  # listed, never loaded
        assert client.is_server_ready()  # a model never asked for does not count
        client.load_model("fashion_mnist")  # explicit mode: the load API is allowed
        assert client.is_model_ready("fashion_mnist")
        add_sub_works(client)
    finally:
        assert server.stop() == 0


def test_explicit_mode_without_load_model_loads_nothing(tmp_path):
    server = Kilnd(repo_with(tmp_path, "add_sub"), ["--model-control-mode=explicit"])
    try:
        client = grpcclient.InferenceServerClient(server.url)
        assert not client.is_model_ready("add_sub")
        client.load_model("add_sub")
        add_sub_works(client)
    finally:
        assert server.stop() == 0


def test_none_mode_loads_all_and_refuses_the_load_api(tmp_path):
    server = Kilnd(repo_with(tmp_path, "add_sub", "reduce_sum"), ["--model-control-mode=none"])
    try:
        client = grpcclient.InferenceServerClient(server.url)
        assert client.is_model_ready("add_sub") and client.is_model_ready("reduce_sum")
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as e:
                call("add_sub")
            assert "UNAVAILABLE" in str(e.value.status()) and "model-control-mode" in str(e.value)
        add_sub_works(client)  # still serving
    finally:
        assert server.stop() == 0


def test_poll_mode_loads_new_reloads_changed_and_unloads_removed(tmp_path):
    repo = repo_with(tmp_path, "add_sub")
    server = Kilnd(repo, ["--model-control-mode=poll", "--repository-poll-secs=1"])
    try:
        client = grpcclient.InferenceServerClient(server.url)
        assert client.is_model_ready("add_sub") and not client.is_model_ready("reduce_sum")
        with pytest.raises(InferenceServerException):
            client.load_model("reduce_sum")  # poll mode refuses the API, as Triton
        shutil.copytree(MODELS / "reduce_sum", repo / "reduce_sum")
        assert wait_for(lambda: client.is_model_ready("reduce_sum")), server.logs()
        # a second version folder appears: the changed model is reloaded, the latest version serves
        shutil.copytree(repo / "add_sub" / "1", repo / "add_sub" / "2")
        assert wait_for(lambda: client.is_model_ready("add_sub", "2")), server.logs()
        assert client.get_model_metadata("add_sub", as_json=True)["versions"] == ["2"]
        shutil.rmtree(repo / "add_sub")
        assert wait_for(lambda: not client.is_model_ready("add_sub")), server.logs()
        assert client.is_server_ready()  # unloaded is not a failure
    finally:
        assert server.stop() == 0


def test_strict_readiness_is_not_ready_with_a_broken_model(tmp_path):
    repo = repo_with(tmp_path, "add_sub", broken=True)
    server = Kilnd(repo)
    try:
        client = grpcclient.InferenceServerClient(server.url)
        assert client.is_model_ready("add_sub") and not client.is_model_ready("broken")
        assert not client.is_server_ready()
        assert http_status("127.0.0.1", server.http_port, "/v2/health/ready") == 400
        assert http_status("127.0.0.1", server.http_port, "/v2/health/live") == 200
        add_sub_works(client)  # not ready, still serving the models that loaded
        client.unload_model("broken")  # no longer asked for: ready again (Triton's rule)
        assert client.is_server_ready()
        assert http_status("127.0.0.1", server.http_port, "/v2/health/ready") == 200
    finally:
        assert server.stop() == 0
    server = Kilnd(repo, ["--strict-readiness=false"])
    try:
        assert grpcclient.InferenceServerClient(server.url).is_server_ready()
    finally:
        assert server.stop() == 0


def test_exit_on_error_stops_start_up_naming_the_model(tmp_path):
    repo = repo_with(tmp_path, "add_sub", broken=True)
    with pytest.raises(RuntimeError) as e:
        Kilnd(repo, ["--exit-on-error"])
    assert "exited early (1)" in str(e.value) and "broken" in str(e.value), str(e.value)[-2000:]
    with pytest.raises(RuntimeError) as e:
        Kilnd(repo, ["--exit-on-error", "--model-control-mode=explicit", "--load-model=broken"])
    assert "exited early (1)" in str(e.value) and "broken" in str(e.value)
    with pytest.raises(RuntimeError) as e:  # a bad combination is a usage error
        Kilnd(repo, ["--model-control-mode=poll", "--load-model=add_sub"])
    assert "exited early (2)" in str(e.value) and "--load-model" in str(e.value)


def test_strict_model_config_needs_a_config_pbtxt(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    repo = tmp_path / "repo"
    (repo / "noconfig" / "1").mkdir(parents=True)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              str(repo / "noconfig" / "1" / "model.onnx"))
    server = Kilnd(repo)  # Triton's default: the config is completed from the graph
    try:
        assert grpcclient.InferenceServerClient(server.url).is_model_ready("noconfig")
    finally:
        assert server.stop() == 0
    server = Kilnd(repo, ["--strict-model-config"])
    try:
        client = grpcclient.InferenceServerClient(server.url)
        assert not client.is_model_ready("noconfig")
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert "config.pbtxt" in index["noconfig"]["reason"], index
    finally:
        assert server.stop() == 0


def test_http_address_and_log_verbose(tmp_path):
    server = Kilnd(repo_with(tmp_path, "add_sub"), ["--http-address=127.0.0.2", "--log-verbose=1"])
    try:
        assert http_status("127.0.0.2", server.http_port, "/v2/health/ready") == 200
        with pytest.raises(OSError):  # REST is not on the --grpc-address host any more
            http_status("127.0.0.1", server.http_port, "/v2/health/ready")
        client = grpcclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException):
            client.get_model_metadata("no_such_model")
        # verbose logging logs every failed call (info level would not)
        assert wait_for(lambda: "no_such_model" in server.logs(), 5), server.logs()
    finally:
        assert server.stop() == 0


def test_help_describes_the_triton_flags():
    out = subprocess.run([os.environ["KILND"], "--help"], capture_output=True, text=True, timeout=30)
    text = out.stdout + out.stderr
    for flag in ("model_control_mode", "load_model", "repository_poll_secs", "strict_model_config",
                 "strict_readiness", "exit_on_error", "log_verbose", "http_address"):
        assert f"--{flag} (" in text, flag
    assert "none" in text and "poll" in text and "explicit" in text
