"""The `kiln` command line against a live kilnd: every subcommand, human and --json output,
.npy in and out (compared with numpy), and the exit codes scripts rely on (0 ok, 1 server or
request error, 2 usage)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest


def kiln(kilnd, *args, address=None):
    binary = os.environ.get("KILN_CLI")
    if not binary or not Path(binary).is_file():
        raise RuntimeError("KILN_CLI must name the kiln binary (run through ctest)")
    return subprocess.run([binary, f"--address={address or kilnd.url}", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_status(kilnd):
    r = kiln(kilnd, "status")
    assert r.returncode == 0, r.stderr
    assert "live, ready" in r.stdout and "kiln" in r.stdout
    r = kiln(kilnd, "--json", "status")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["live"] is True and doc["ready"] is True and doc["metadata"]["name"] == "kiln"


def test_status_unreachable_server_exits_1(kilnd):
    r = kiln(kilnd, "--timeout-ms=2000", "status", address="127.0.0.1:1")
    assert r.returncode == 1
    assert "UNAVAILABLE" in r.stderr or "DEADLINE_EXCEEDED" in r.stderr


def test_models(kilnd):
    r = kiln(kilnd, "models")
    assert r.returncode == 0
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:]}
    assert rows["add_sub"][1:3] == ["1", "READY"]
    assert rows["reduce_sum"][2] == "READY"
    doc = json.loads(kiln(kilnd, "--json", "models").stdout)
    assert {m["name"] for m in doc["models"]} >= {"add_sub", "reduce_sum"}


def test_unload_load(kilnd):
    r = kiln(kilnd, "unload", "reduce_sum")
    assert (r.returncode, r.stdout.strip()) == (0, "unloaded reduce_sum")
    rows = {m["name"]: m for m in json.loads(kiln(kilnd, "--json", "models").stdout)["models"]}
    assert rows["reduce_sum"]["state"] == "UNAVAILABLE"
    r = kiln(kilnd, "--json", "load", "reduce_sum")
    assert r.returncode == 0 and json.loads(r.stdout) == {"loaded": "reduce_sum"}
    rows = {m["name"]: m for m in json.loads(kiln(kilnd, "--json", "models").stdout)["models"]}
    assert rows["reduce_sum"]["state"] == "READY"


def test_load_unknown_model_exits_1(kilnd):
    r = kiln(kilnd, "load", "no_such_model")
    assert r.returncode == 1
    assert "NOT_FOUND" in r.stderr and "no_such_model" in r.stderr


def test_infer_npy_in_and_out(kilnd, tmp_path):
    a = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    r = kiln(kilnd, "infer", "add_sub", "--input", f"INPUT0={tmp_path / 'a.npy'}",
             "--input", f"INPUT1={tmp_path / 'b.npy'}",
             "--output", f"OUTPUT0={tmp_path / 'sum.npy'}",
             "--output", f"OUTPUT1={tmp_path / 'diff.npy'}")
    assert r.returncode == 0, r.stderr
    assert "OUTPUT0 float32[3, 16]" in r.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "sum.npy"), a + b)
    np.testing.assert_array_equal(np.load(tmp_path / "diff.npy"), a - b)
    r = kiln(kilnd, "--json", "infer", "add_sub", "--input", f"INPUT0={tmp_path / 'a.npy'}",
             "--input", f"INPUT1={tmp_path / 'b.npy'}")
    doc = json.loads(r.stdout)
    assert doc["model"] == "add_sub"
    out = {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"]) for o in doc["outputs"]}
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


def test_infer_single_output_file(kilnd, tmp_path):
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    np.save(tmp_path / "x.npy", x)
    r = kiln(kilnd, "infer", "reduce_sum", "--input", f"X={tmp_path / 'x.npy'}",
             "--output", tmp_path / "s.npy")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), x.sum(axis=1, keepdims=True))


def test_infer_errors(kilnd, tmp_path):
    np.save(tmp_path / "i.npy", np.zeros((1, 16), np.int32))
    np.save(tmp_path / "f.npy", np.zeros((1, 16), np.float32))
    r = kiln(kilnd, "infer", "add_sub", "--input", f"INPUT0={tmp_path / 'i.npy'}",
             "--input", f"INPUT1={tmp_path / 'f.npy'}")
    assert r.returncode == 1 and "INVALID_ARGUMENT" in r.stderr and "INT32" in r.stderr
    r = kiln(kilnd, "infer", "no_such_model", "--input", f"X={tmp_path / 'f.npy'}")
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr
    r = kiln(kilnd, "infer", "add_sub", "--input", f"INPUT0={tmp_path / 'missing.npy'}")
    assert r.returncode == 2 and "missing.npy" in r.stderr
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    r = kiln(kilnd, "infer", "add_sub", "--input", f"INPUT0={tmp_path / 'junk.npy'}")
    assert r.returncode == 2 and "bad magic" in r.stderr
    r = kiln(kilnd, "infer", "add_sub", "--input", "INPUT0")
    assert r.returncode == 2 and "NAME=FILE.npy" in r.stderr
    r = kiln(kilnd, "infer", "add_sub")
    assert r.returncode == 2


def test_stats(kilnd, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 8), np.float32))
    for _ in range(3):
        assert kiln(kilnd, "infer", "reduce_sum", "--input", f"X={tmp_path / 'x.npy'}").returncode == 0
    doc = json.loads(kiln(kilnd, "--json", "stats", "reduce_sum").stdout)
    (entry,) = doc["model_stats"]
    assert int(entry["inference_stats"]["success"]["count"]) >= 3
    r = kiln(kilnd, "stats")
    assert r.returncode == 0
    assert {line.split()[0] for line in r.stdout.splitlines()[1:]} >= {"add_sub", "reduce_sum"}
    r = kiln(kilnd, "stats", "no_such_model")
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr


GRAPH = """
graph {
  name: "scale_sum"
  inputs { name: "x" dtype: "float32" shape: [ 2, 3 ] }
  nodes { op: "INPUT" dtype: "float32" arg { int_value: 0 } }
  nodes { op: "CONST" dtype: "float32" arg { float_value: 3.0 } }
  nodes { op: "MUL" dtype: "float32" src: [ 0, 1 ] }
  nodes { op: "REDUCE_AXIS" dtype: "float32" src: [ 2 ] arg { reduce { op: "ADD" axes: [ 1 ] } } }
  outputs { name: "y" node: 3 }
}
"""


def test_graph_run(kilnd, tmp_path):
    x = np.array([[1, 2, 3], [4, 5, -6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "g.pbtxt").write_text(GRAPH)
    r = kiln(kilnd, "graph", "run", tmp_path / "g.pbtxt", "--input", f"x={tmp_path / 'x.npy'}",
             "--output", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    assert "kernel launches" in r.stdout
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), (x * 3).sum(axis=1, keepdims=True))
    doc = json.loads(kiln(kilnd, "--json", "graph", "run", tmp_path / "g.pbtxt", "--input",
                          f"x={tmp_path / 'x.npy'}").stdout)
    (y,) = doc["outputs"]
    np.testing.assert_allclose(np.array(y["data"], np.float32).reshape(y["shape"]),
                               (x * 3).sum(axis=1, keepdims=True))


def test_graph_run_errors(kilnd, tmp_path):
    (tmp_path / "g.pbtxt").write_text(GRAPH)
    r = kiln(kilnd, "graph", "run", tmp_path / "g.pbtxt")  # input x not given
    assert r.returncode == 1 and "INVALID_ARGUMENT" in r.stderr and "x" in r.stderr
    (tmp_path / "bad.pbtxt").write_text("graph { nodes { op: }")
    r = kiln(kilnd, "graph", "run", tmp_path / "bad.pbtxt")
    assert r.returncode == 2 and "protobuf text format" in r.stderr
    r = kiln(kilnd, "graph", "run", tmp_path / "nope.pbtxt")
    assert r.returncode == 2
    r = kiln(kilnd, "graph", "walk", tmp_path / "g.pbtxt")
    assert r.returncode == 2


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["status", "extra"], ["--bogus", "status"],
                                  ["load"], ["--timeout-ms=abc", "status"]])
def test_usage_errors_exit_2(kilnd, args):
    r = kiln(kilnd, *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert "usage: kiln" in r.stderr or "--timeout-ms" in r.stderr


# ** --help on every command and subcommand **

def help_of(*args):
    binary = os.environ["KILN_CLI"]
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=30)


def listed(text: str, heading: str) -> list[str]:
    """The names in the indented list under `heading` in a help text."""
    lines = text.split(heading + "\n", 1)[1].splitlines()
    names = []
    for line in lines:
        if not line.startswith("  "):
            break
        names.append(line.split()[0])
    return names


def test_help_on_every_command_and_subcommand():
    top = help_of("--help")
    assert top.returncode == 0 and top.stdout.startswith("usage: kiln"), top
    assert help_of("-h").stdout == top.stdout == help_of("help").stdout
    commands = listed(top.stdout, "commands:")
    assert {"status", "models", "load", "unload", "stats", "infer", "graph", "train",
            "jobs"} <= set(commands), commands
    for command in commands:
        for args in ([command, "--help"], ["--help", command], ["help", command]):
            r = help_of(*args)
            assert r.returncode == 0 and r.stdout.startswith("usage: kiln"), (args, r)
            assert not r.stderr
        assert help_of(command, "--help").stdout == help_of("help", command).stdout
    subcommands = listed(help_of("train", "--help").stdout, "subcommands:")
    assert {"start", "watch", "ls", "show", "cancel", "resume", "checkpoint"} <= set(subcommands)
    for group in ("train", "jobs"):
        for sub in subcommands:
            r = help_of(group, sub, "--help")
            assert r.returncode == 0, (group, sub, r)
            assert r.stdout.startswith(f"usage: kiln [global options] {group} {sub}"), r.stdout
    # --help wins over everything else on the line, and never talks to a server.
    r = help_of("--address=127.0.0.1:1", "infer", "add_sub", "--input", "X=nope.npy", "--help")
    assert r.returncode == 0 and "infer MODEL" in r.stdout
    for args in (["frobnicate", "--help"], ["train", "frob", "--help"], ["help", "nope"]):
        r = help_of(*args)
        assert r.returncode == 2 and "usage: kiln" in r.stderr, (args, r)


def test_cmake_install_puts_kiln_on_the_prefix_path(tmp_path):
    """`cmake --install` (the CLI's component here, to skip copying kilnd) gives a working kiln."""
    build = Path(os.environ["KILN_CLI"]).resolve().parents[2]
    r = subprocess.run(["cmake", "--install", str(build), "--prefix", str(tmp_path),
                        "--component", "kiln_cli"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    installed = tmp_path / "bin" / "kiln"
    env = dict(os.environ, PATH=f"{installed.parent}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run(["kiln", "--help"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith("usage: kiln"), r


# ** kiln train: kiln.v1.Training on a kilnd with --data-dir **

FASHION_ROOT = Path("/usr/share/datasets")


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    from kilnd_launcher import Kilnd

    if not (FASHION_ROOT / "fashion-mnist").is_dir():
        pytest.fail(f"{FASHION_ROOT / 'fashion-mnist'} is required for the training tests")
    root = tmp_path_factory.mktemp("train")
    (root / "repo").mkdir()
    (root / "data").mkdir()
    server = Kilnd(root / "repo", ["--metrics-port=-1", f"--data-dir={root / 'data'}",
                                   f"--dataset-roots={FASHION_ROOT}"])
    server.repo = root / "repo"
    server.data = root / "data"
    yield server
    assert server.stop() == 0


MLP_START = ["train", "start", "--arch", "mlp", "--mlp-sizes", "784,32,10", "--dataset-dir",
             "fashion-mnist", "--steps", "20", "--batch", "32", "--lr", "0.003",
             "--optimizer", "adam", "--eval-images", "500", "--seed", "7"]


def test_train_start_watch_ls(trainer):
    r = kiln(trainer, *MLP_START, "--output-model", "cli_mlp")
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    assert len(job_id) == 16 and job_id.isalnum(), r.stdout

    r = kiln(trainer, "train", "watch", job_id)
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert any("step 20/20" in line and "loss" in line and "ex/s" in line and "ETA" in line
               for line in lines), r.stdout
    assert lines[-1].startswith(f"job {job_id} SUCCEEDED"), r.stdout
    assert "published cli_mlp version 1" in lines[-1]
    assert (trainer.repo / "cli_mlp" / "1" / "model.safetensors").is_file()

    # Watching a finished job returns at once with the same verdict; --json gives the Job.
    r = kiln(trainer, "--json", "train", "watch", job_id)
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)
    assert job["id"] == job_id and job["state"] == "SUCCEEDED"
    assert int(job["step"]) == 20 and int(job["published_version"]) == 1
    assert 0.0 < job["eval_accuracy"] <= 1.0

    r = kiln(trainer, "train", "ls")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:]}
    assert rows[job_id][1:4] == ["SUCCEEDED", "mlp", "20/20"], r.stdout
    assert "cli_mlp:1" in rows[job_id]
    doc = json.loads(kiln(trainer, "--json", "train", "ls").stdout)
    assert job_id in {j["id"] for j in doc["jobs"]}

    r = kiln(trainer, "--json", "train", "show", job_id)
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "SUCCEEDED"
    # The published model serves through the ordinary CLI.
    rows = {line.split()[0]: line.split() for line in kiln(trainer, "models").stdout.splitlines()[1:]}
    assert rows["cli_mlp"][1:3] == ["1", "READY"]


def test_train_checkpoint_downloads_the_newest_checkpoint(trainer, tmp_path):
    r = kiln(trainer, *MLP_START, "--steps", "8", "--output-model", "cli_ckpt")
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    assert kiln(trainer, "train", "watch", job_id).returncode == 0
    out = tmp_path / "ckpt.safetensors"
    r = kiln(trainer, "train", "checkpoint", job_id, "-o", out)
    assert r.returncode == 0, r.stderr
    on_disk = trainer.data / "jobs" / job_id / "ckpt-0000000008.safetensors"
    assert out.read_bytes() == on_disk.read_bytes()
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert r.stdout.strip() == (f"wrote {out}: job {job_id} checkpoint at step 8, "
                                f"{on_disk.stat().st_size} bytes, sha256 {digest}")
    # `kiln jobs` is `kiln train`; --output and --json work too.
    out2 = tmp_path / "again.safetensors"
    r = kiln(trainer, "--json", "jobs", "checkpoint", job_id, "--output", out2)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == {"id": job_id, "file": str(out2), "step": 8,
                   "bytes": on_disk.stat().st_size, "sha256": digest}
    assert out2.read_bytes() == out.read_bytes()
    assert not list(tmp_path.glob("*.tmp"))
    r = kiln(trainer, "train", "checkpoint", "0123456789abcdef", "-o", tmp_path / "x")
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr, r.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.tmp").exists()
    r = kiln(trainer, "train", "checkpoint", job_id)
    assert r.returncode == 2 and "-o FILE" in r.stderr, r.stderr


def test_train_refuses_to_publish_into_another_model(trainer):
    """The issue's overwrite: `--output-model add_sub` on a repository holding the kiln_graph
    model add_sub. Refused before any job exists; add_sub's files stay as they were."""
    shutil.copytree(Path(os.environ["KILN_MODELS"]) / "add_sub", trainer.repo / "add_sub")
    before = {p: p.read_bytes() for p in (trainer.repo / "add_sub").rglob("*") if p.is_file()}
    jobs_before = json.loads(kiln(trainer, "--json", "train", "ls").stdout).get("jobs", [])
    r = kiln(trainer, *MLP_START, "--output-model", "add_sub")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "ALREADY_EXISTS" in r.stderr and "'add_sub'" in r.stderr, r.stderr
    after = {p: p.read_bytes() for p in (trainer.repo / "add_sub").rglob("*") if p.is_file()}
    assert after == before
    assert json.loads(kiln(trainer, "--json", "train", "ls").stdout).get("jobs", []) == jobs_before


def test_train_start_json_then_cancel_watch_exits_1(trainer):
    r = kiln(trainer, "--json", *[a if a != "20" else "100000" for a in MLP_START],
             "--output-model", "cli_cancelled")
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)
    assert job["state"] in ("QUEUED", "RUNNING") and job["spec"]["output_model"] == "cli_cancelled"
    r = kiln(trainer, "train", "cancel", job["id"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"cancelled {job['id']}")
    r = kiln(trainer, "train", "watch", job["id"])
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout.splitlines()[-1].startswith(f"job {job['id']} CANCELLED")
    # The README's lifecycle: a cancelled job resumes; cancelling it again stops it again.
    r = kiln(trainer, "train", "resume", job["id"])
    assert r.returncode == 0 and r.stdout.startswith(f"resumed {job['id']}"), r
    assert "QUEUED" in r.stdout
    r = kiln(trainer, "--json", "train", "cancel", job["id"])
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "CANCELLED", r


@pytest.mark.parametrize("sub", ["watch", "cancel", "resume", "show"])
def test_train_unknown_job_exits_1(trainer, sub):
    r = kiln(trainer, "train", sub, "0123456789abcdef")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "NOT_FOUND" in r.stderr, r.stderr


def test_train_server_rejects_bad_spec_exits_1(trainer):
    r = kiln(trainer, "train", "start", "--arch", "mlp", "--dataset-dir", "../etc", "--steps", "5",
             "--batch", "8", "--output-model", "x")
    assert r.returncode == 1 and "INVALID_ARGUMENT" in r.stderr, r.stderr


def test_train_without_data_dir_exits_1(kilnd):
    r = kiln(kilnd, "train", "ls")
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr and "--data-dir" in r.stderr, r.stderr


@pytest.mark.parametrize("args", [
    ["train"], ["train", "frob", "x"], ["train", "watch"], ["train", "ls", "extra"],
    ["train", "start", "--dataset-dir", "fashion-mnist", "--output-model", "m"],  # no --arch
    ["train", "start", "--arch", "mlp", "--output-model", "m"],                 # no dataset
    ["train", "start", "--arch", "mlp", "--dataset-dir", "d", "--output-model", "m",
     "--steps", "ten"],
    ["train", "start", "--arch", "mlp", "--dataset-dir", "d", "--output-model", "m",
     "--mlp-sizes", "784,x"],
    ["train", "ls", "--steps", "3"], ["status", "--steps", "3"], ["train", "start", "--steps"],
])
def test_train_usage_errors_exit_2(trainer, args):
    r = kiln(trainer, *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert "usage: kiln" in r.stderr
