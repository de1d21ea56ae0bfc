"""Triton's classification extension (issue #25 item 4): a requested output with
`class_count=k` (tritonclient's spelling of the output parameter `classification`) comes back as
BYTES "value:index" strings of the k largest values per batch item, over gRPC and REST. The
expected strings are built from numpy's argsort of the raw output of the same request. An output
with a `label_filename` (a file in the model folder, line i labelling index i) answers
"value:index:label", as Triton does; a label file outside the folder or missing fails the load."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from kilnd_launcher import Kilnd

MODELS = Path(os.environ.get("KILN_MODELS", Path(__file__).resolve().parents[2] / "models"))


@pytest.fixture(scope="module")
def server():
    s = Kilnd(MODELS, ["--metrics-port=-1"])
    yield s
    assert s.stop() == 0


def expected(raw: np.ndarray, k: int, labels: list[str] | None = None) -> list[list[bytes]]:
    """Triton's strings for the k largest per row: "value:index", plus ":label" where `labels` has a non-empty one."""
    labels = labels or []
    rows = []
    for row in raw.reshape(raw.shape[0], -1):
        order = np.argsort(-row, kind="stable")[:k]
        rows.append([(f"{float(row[i]):f}:{i}" + (f":{labels[i]}" if i < len(labels) and labels[i] else ""))
                     .encode() for i in order])
    return rows


def strings(array) -> list[list[bytes]]:
    """BYTES elements as bytes (gRPC gives bytes; REST's JSON gives str)."""
    return [[c if isinstance(c, bytes) else str(c).encode() for c in row] for row in array]


def inputs(module, a, b):
    out = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        t = module.InferInput(name, list(value.shape), "FP32")
        t.set_data_from_numpy(value)
        out.append(t)
    return out


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_class_count_returns_the_top_k_strings(server, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    client = module.InferenceServerClient(server.url if protocol == "grpc" else server.http_url)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 16), dtype=np.float32), rng.standard_normal((3, 16), dtype=np.float32)
    raw = client.infer("add_sub", inputs(module, a, b)).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(raw, a + b)
    kw = {} if protocol == "grpc" else {"binary_data": False}
    requested = [module.InferRequestedOutput("OUTPUT0", class_count=4, **kw),
                 module.InferRequestedOutput("OUTPUT1", **kw)]
    result = client.infer("add_sub", inputs(module, a, b), outputs=requested)
    classes = result.as_numpy("OUTPUT0")
    assert classes.shape == (3, 4)
    assert strings(classes) == expected(raw, 4)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)  # not classified
    # k above the element count: every element, in order
    whole = client.infer("add_sub", inputs(module, a, b),
                         outputs=[module.InferRequestedOutput("OUTPUT0", class_count=100, **kw)])
    assert strings(whole.as_numpy("OUTPUT0")) == expected(raw, 16)


def test_fashion_mnist_top_class_is_the_argmax(server):
    client = grpcclient.InferenceServerClient(server.url)
    x = np.random.default_rng(3).random((2, 1, 28, 28), dtype=np.float32)
    t = grpcclient.InferInput("INPUT", [2, 1, 28, 28], "FP32")
    t.set_data_from_numpy(x)
    logits = client.infer("fashion_mnist", [t]).as_numpy("OUTPUT")
    top = client.infer("fashion_mnist", [t], outputs=[grpcclient.InferRequestedOutput("OUTPUT", class_count=1)])
    got = [bytes(r[0]).decode().split(":") for r in top.as_numpy("OUTPUT")]
    assert [int(i) for _, i in got] == list(np.argmax(logits, axis=1))
    assert [v for v, _ in got] == [f"{float(logits[r].max()):f}" for r in range(2)]


# Labels for add_sub's OUTPUT0 (16 elements): 10 lines, CRLF endings on some, line 3 empty, so
# indices 3 and 10..15 keep the plain "value:index" form.
LABELS = ["zero", "one", "two", "", "four", "five\u00e9", "six seven", "eight", "nine:9", "ten"]


def labeled_config(label_filename: str) -> str:
    text = (MODELS / "add_sub" / "config.pbtxt").read_text()
    old = '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }'
    assert old in text
    return text.replace(old, old[:-1] + f'label_filename: "{label_filename}" }}')


@pytest.fixture(scope="module")
def labeled(tmp_path_factory):
    repo = tmp_path_factory.mktemp("labels")
    outside = tmp_path_factory.mktemp("outside") / "labels.txt"
    outside.write_text("secret\n")
    cases = {"labeled": "labels.txt", "escape": "../escape_labels.txt", "missing": "nope.txt",
             "absolute": str(outside), "link": "linked.txt"}
    for name, file in cases.items():
        shutil.copytree(MODELS / "add_sub" / "1", repo / name / "1")
        (repo / name / "config.pbtxt").write_text(
            labeled_config(file).replace('name: "add_sub"', f'name: "{name}"'))
    text = "\r\n".join(LABELS[:5]) + "\r\n" + "\n".join(LABELS[5:]) + "\n"
    (repo / "labeled" / "labels.txt").write_bytes(text.encode())
    (repo / "escape_labels.txt").write_text("outside the model folder\n")
    (repo / "link" / "linked.txt").symlink_to(outside)
    s = Kilnd(repo, ["--strict-readiness=false", "--metrics-port=-1"])
    yield s
    assert s.stop() == 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_label_filename_adds_the_label(labeled, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    client = module.InferenceServerClient(labeled.url if protocol == "grpc" else labeled.http_url)
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((4, 16), dtype=np.float32), rng.standard_normal((4, 16), dtype=np.float32)
    raw = client.infer("labeled", inputs(module, a, b)).as_numpy("OUTPUT0")
    kw = {} if protocol == "grpc" else {"binary_data": False}
    result = client.infer("labeled", inputs(module, a, b),
                          outputs=[module.InferRequestedOutput("OUTPUT0", class_count=16, **kw),
                                   module.InferRequestedOutput("OUTPUT1", class_count=3, **kw)])
    got = [[c if isinstance(c, bytes) else str(c).encode("utf-8") for c in row]
           for row in result.as_numpy("OUTPUT0")]
    assert got == expected(raw, 16, LABELS)
    # OUTPUT1 has no label file: plain "value:index"
    assert strings(result.as_numpy("OUTPUT1")) == expected(a - b, 3)


@pytest.mark.parametrize("name,words", [
    ("escape", "output[0] ('OUTPUT0').label_filename: must be a path inside the model folder"),
    ("absolute", "output[0] ('OUTPUT0').label_filename: must be a path inside the model folder"),
    ("missing", "output[0] ('OUTPUT0').label_filename: nope.txt is missing"),
    ("link", "output[0] ('OUTPUT0').label_filename: linked.txt is, or is inside, a symbolic link that leads outside"),
])
def test_a_label_file_outside_the_folder_or_missing_fails_the_load(labeled, name, words):
    client = grpcclient.InferenceServerClient(labeled.url)
    entry = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}[name]
    assert entry.get("state") == "UNAVAILABLE", entry
    assert words in entry.get("reason", ""), entry
    assert "secret" not in entry.get("reason", "") and "outside the model folder" not in entry.get("reason", "")
    assert not client.is_model_ready(name)
    assert client.is_model_ready("labeled")
