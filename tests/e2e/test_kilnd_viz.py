"""The VIZ page (issue #22) in a real browser: a real kilnd started with VIZ=1 compiles the bundled
add_sub and fashion_mnist models; headless Chromium (Debian's `chromium`), driven over its DevTools
protocol, opens /viz, clicks a compile, a rewrite pass, steps through its rewrites and checks what
the DOM shows against kilnd's own JSON documents: the number of passes, the step counter, the nodes
highlighted (red in the input graph, green in the output graph, drawn by Graphviz), the kernel's
source with syntax colouring, the launch timeline, and that the console logged no error.
Screenshots go to <build>/tests/e2e/artifacts/viz_*.png.

Also the JSON routes without a browser: ids that are not positive integers are 400, unknown ones 404;
a kilnd without VIZ records nothing, except the requests that ask (parameters.kiln_viz, gRPC and
REST); with BEAM the kernel view lists the candidates the search tried (in Chromium, and in the
offline `kiln viz` page)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from conftest import Kilnd
from devtools import DevTools, artifacts_dir, open_page, start_chromium


def get(port: int, path: str):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def viz_kilnd(models):
    server = Kilnd(models, env={"VIZ": "1"})
    c = grpcclient.InferenceServerClient(url=server.url)
    # fashion_mnist first: add_sub's compile is then the newest, all of its trace surely held.
    x = grpcclient.InferInput("INPUT", [4, 1, 28, 28], "FP32")
    x.set_data_from_numpy(np.random.default_rng(1).random((4, 1, 28, 28), dtype=np.float32))
    for _ in range(3):
        c.infer("fashion_mnist", [x])
    a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
    b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    for _ in range(3):
        out = c.infer("add_sub", [a, b])
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0")[0], np.arange(16) + 1)
    c.close()
    yield server
    assert server.stop() == 0


def infer_add_sub(grpc_url: str, times: int, delay: float) -> None:
    time.sleep(delay)
    c = grpcclient.InferenceServerClient(url=grpc_url)
    a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.zeros((1, 16), np.float32))
    b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    for _ in range(times):
        c.infer("add_sub", [a, b])
    c.close()


async def browse(http_port: int, devtools_port: int, out: Path, kernels_doc: dict, api, grpc_url: str) -> dict:
    async with open_page(devtools_port, f"http://127.0.0.1:{http_port}/viz") as dt:
        await dt.wait_for("document.querySelectorAll('#kernels tbody tr').length > 0")
        seen = {}
        seen["rows"] = await dt.eval("document.querySelectorAll('#kernels tbody tr').length")
        seen["status"] = await dt.eval("document.getElementById('status').textContent")

        # The add_sub compile: the newest row whose label is add_sub.
        target = max((k for k in kernels_doc["kernels"] if k["label"] == "add_sub"), key=lambda k: k["id"])
        await dt.eval(f"document.querySelector('#kernels tr[data-id=\"{target['id']}\"]').click()")
        await dt.wait_for("document.querySelectorAll('#passes tbody tr').length > 0 && "
                          "document.getElementById('pass-view').dataset.pass")
        seen["passes"] = await dt.eval("document.querySelectorAll('#passes tbody tr').length")
        seen["source"] = await dt.eval("document.getElementById('source').textContent")
        seen["source_coloured"] = await dt.eval(
            "document.querySelectorAll('#source span[class^=\"hljs-\"]').length")
        seen["opts"] = await dt.eval("document.getElementById('opts').textContent")

        # A pass with at least two rewrites: open it, step forward, look at the highlights.
        kernel = api(f"/viz/api/kernel/{target['id']}")
        # A top-level pass with two or more rewrites, at least one of which changed nodes that are in its
        # input or output graph (a rewrite of an intermediate node has nothing to highlight there).
        pass_doc = None
        for stepped in kernel["pass_list"]:
            if stepped["num_matches"] >= 2 and stepped["depth"] == 0:
                pass_doc = api(f"/viz/api/pass/{stepped['id']}")
                if any(m["removed"] or m["added"] for m in pass_doc["matches"]):
                    break
        assert pass_doc is not None
        assert len(pass_doc["matches"]) == stepped["num_matches"], "the trace holds every match of the pass"
        await dt.eval(f"document.querySelector('#passes tr[data-id=\"{stepped['id']}\"]').click()")
        await dt.wait_for(f"document.getElementById('pass-view').dataset.pass === '{stepped['id']}'")
        seen["svg_nodes_in"] = await dt.eval("document.querySelectorAll('#graph-in g.node').length")
        seen["svg_nodes_out"] = await dt.eval("document.querySelectorAll('#graph-out g.node').length")
        seen["pass_doc"] = pass_doc
        steps = []
        for i in range(stepped["num_matches"]):
            steps.append({
                "label": await dt.eval("document.getElementById('step-label').textContent"),
                "rule": await dt.eval("document.getElementById('rule').textContent"),
                "removed": await dt.eval(
                    "[...document.querySelectorAll('#graph-in g.node.hl-removed')].map(g => g.id)"),
                "added": await dt.eval(
                    "[...document.querySelectorAll('#graph-out g.node.hl-added')].map(g => g.id)"),
            })
            if i + 1 < stepped["num_matches"]:
                await dt.eval("document.getElementById('step-next').click()")
        seen["steps"] = steps
        # Back one step, and a node's detail.
        await dt.eval("document.getElementById('step-prev').click()")
        seen["after_back"] = await dt.eval("document.getElementById('step-label').textContent")
        await dt.eval("document.querySelector('#graph-in g.node').dispatchEvent(new MouseEvent('click'))")
        seen["nodeinfo"] = await dt.eval("document.getElementById('nodeinfo').textContent")
        # Screenshot 1: the rewrite view of a pass with highlights (step with the most).
        best = max(range(len(steps)), key=lambda i: len(steps[i]["removed"]) + len(steps[i]["added"]))
        await dt.eval(f"state.step = {best}; showStep(); window.scrollTo(0, 0)")
        await dt.screenshot(out / "viz_rewrite.png")
        # Screenshot 2: the kernel's source, opts and launches.
        await dt.eval("document.getElementById('kernel-detail').scrollIntoView()")
        await dt.screenshot(out / "viz_kernel.png")
        # The launch timeline.
        await dt.eval("document.getElementById('tab-timeline').click()")
        await dt.wait_for("document.querySelectorAll('#timeline rect.launch').length > 0")
        seen["timeline_bars"] = await dt.eval("document.querySelectorAll('#timeline rect.launch').length")
        await dt.screenshot(out / "viz_timeline.png")
        # The profile tab: a 2-second kernel profile of add_sub while 3 requests run.
        await dt.eval("document.getElementById('tab-profile').click()")
        await dt.eval("document.getElementById('profile-model').value = 'add_sub'")
        await dt.eval("document.getElementById('profile-take').click()")
        worker = threading.Thread(target=infer_add_sub, args=(grpc_url, 3, 0.7))
        worker.start()
        await dt.wait_for("document.querySelectorAll('#profile rect.launch').length > 0", timeout=60)
        worker.join(30)
        seen["profile_runs"] = await dt.eval("document.querySelectorAll('#profile rect.run').length")
        seen["profile_launches"] = await dt.eval("document.querySelectorAll('#profile rect.launch').length")
        seen["profile_note"] = await dt.eval("document.getElementById('profile-note').textContent")
        seen["profile_link"] = await dt.eval("document.getElementById('profile-download').href")
        await dt.screenshot(out / "viz_profile.png")
        seen["errors"] = list(dt.errors)
        dt.reader.cancel()
        return seen


def test_viz_page_in_chromium(viz_kilnd, tmp_path):
    port = viz_kilnd.http_port

    def api(path):
        status, ctype, body = get(port, path)
        assert status == 200, (path, body[:300])
        assert ctype.startswith("application/json"), ctype
        return json.loads(body)

    kernels_doc = api("/viz/api/kernels")
    assert kernels_doc["enabled"] is True
    labels = {k["label"] for k in kernels_doc["kernels"]}
    assert {"add_sub", "fashion_mnist"} <= labels, labels
    proc, devtools_port = start_chromium(tmp_path / "profile")
    try:
        out = artifacts_dir()
        seen = asyncio.run(browse(port, devtools_port, out, kernels_doc, api, viz_kilnd.url))
    finally:
        proc.kill()
        proc.wait()
    assert seen["errors"] == [], seen["errors"]
    assert seen["rows"] == len(kernels_doc["kernels"])
    assert seen["status"].startswith("recording (VIZ=1)")
    target = max((k for k in kernels_doc["kernels"] if k["label"] == "add_sub"), key=lambda k: k["id"])
    kernel = api(f"/viz/api/kernel/{target['id']}")
    assert len(kernel["pass_list"]) == target["passes"] > 0
    listed = [p for p in kernel["pass_list"] if p["depth"] == 0 or p["num_matches"] > 0]
    assert seen["passes"] == len(listed) > 0
    assert target["name"] in seen["source"] and seen["source"] == kernel["source"]
    assert seen["source_coloured"] > 0, "highlight.js coloured the source"
    pass_doc = seen["pass_doc"]
    assert seen["svg_nodes_in"] == len(pass_doc["input"]["nodes"])
    assert seen["svg_nodes_out"] == len(pass_doc["output"]["nodes"])
    steps = seen["steps"]
    assert [s["label"] for s in steps] == [f"step {i + 1} of {len(steps)}" for i in range(len(steps))]
    assert [s["rule"] for s in steps] == [m["rule"] for m in pass_doc["matches"]]
    for s, m in zip(steps, pass_doc["matches"]):
        assert sorted(s["removed"]) == sorted(f"n{i}" for i in m["removed"])
        assert sorted(s["added"]) == sorted(f"n{i}" for i in m["added"])
    assert any(s["removed"] or s["added"] for s in steps), "some step highlights changed nodes"
    assert seen["after_back"] == f"step {len(steps) - 1} of {len(steps)}"
    assert re.match(r"#\d+\s+[A-Z_]+\s+\S+", seen["nodeinfo"]), seen["nodeinfo"]
    assert seen["timeline_bars"] > 0
    # add_sub runs two kernels per request (OUTPUT0, OUTPUT1): 3 runs, 6 launches.
    assert seen["profile_runs"] == 3 and seen["profile_launches"] == 6, seen["profile_note"]
    assert seen["profile_note"].startswith("(3 runs, 6 kernel launches")
    assert seen["profile_link"].startswith("blob:")
    for name in ("viz_rewrite.png", "viz_kernel.png", "viz_timeline.png"):
        data = (artifacts_dir() / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000, name


def test_viz_routes_validate_ids(viz_kilnd):
    port = viz_kilnd.http_port
    for path in ("/viz/api/kernel/abc", "/viz/api/kernel/0", "/viz/api/kernel/-3",
                 "/viz/api/pass/1x", "/viz/api/pass/99999999999999999999/input.svg"):
        status, _, body = get(port, path)
        assert status == 400, (path, body)
        assert "id:" in json.loads(body)["error"] and "positive integer" in json.loads(body)["error"]
    for path in ("/viz/api/kernel/999999999", "/viz/api/pass/999999999", "/viz/api/pass/999999999/output.svg"):
        status, _, body = get(port, path)
        assert status == 404, (path, body)
        assert "999999999" in json.loads(body)["error"]
    status, _, _ = get(port, "/viz/api/nothing")
    assert status == 404
    status, ctype, body = get(port, "/viz")
    assert status == 200 and ctype.startswith("text/html") and b"kiln VIZ" in body
    assert not re.search(rb"""(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|fetch\(["']https?:""", body), \
        "the page loads nothing from another host"
    status, ctype, body = get(port, "/viz/highlight.js")
    assert status == 200 and ctype == "application/javascript" and b"hljs" in body
    kernels = json.loads(get(port, "/viz/api/kernels")[2])
    some = kernels["kernels"][0]
    status, ctype, svg = get(port, f"/viz/api/pass/{json.loads(get(port, '/viz/api/kernel/%d' % some['id'])[2])['pass_list'][0]['id']}/input.svg")
    assert status == 200 and ctype == "image/svg+xml" and svg.startswith(b"<svg")


def test_viz_off_by_default(kilnd, client):
    a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.zeros((1, 16), np.float32))
    b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    client.infer("add_sub", [a, b])
    status, _, body = get(kilnd.http_port, "/viz/api/kernels")
    assert status == 200
    doc = json.loads(body)
    assert doc["enabled"] is False and doc["kernels"] == [] and doc["other_passes"] == []


def add_sub_inputs():
    a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
    b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    return [a, b]


def post_json(port: int, path: str, doc: dict):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=json.dumps(doc), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_viz_asked_per_request(models):
    """VIZ off: only requests with parameters.kiln_viz are recorded: their compiles, the launches of
    kernels recorded when compiled, and the kernels they reuse unrecorded (a JIT replay)."""
    server = Kilnd(models)
    try:
        port = server.http_port
        c = grpcclient.InferenceServerClient(url=server.url)
        x = grpcclient.InferInput("INPUT", [2, 1, 28, 28], "FP32")
        x.set_data_from_numpy(np.zeros((2, 1, 28, 28), np.float32))
        c.infer("fashion_mnist", [x])  # not asked
        doc = json.loads(get(port, "/viz/api/kernels")[2])
        assert doc["enabled"] is False and doc["kernels"] == [] and doc["other_passes"] == []

        out = c.infer("add_sub", add_sub_inputs(), parameters={"kiln_viz": True})
        np.testing.assert_array_equal(out.as_numpy("OUTPUT0")[0], np.arange(16) + 1)
        doc = json.loads(get(port, "/viz/api/kernels")[2])
        assert doc["enabled"] is False
        kernels = doc["kernels"]
        assert kernels and {k["label"] for k in kernels} == {"add_sub"}, kernels
        assert all(k["passes"] > 0 and k["launch_count"] == 1 for k in kernels), kernels
        ids = sorted(k["id"] for k in kernels)

        # Asked again: its kernels are compiled already; their launches are logged.
        c.infer("add_sub", add_sub_inputs(), parameters={"kiln_viz": True})
        again = json.loads(get(port, "/viz/api/kernels")[2])["kernels"]
        assert sorted(k["id"] for k in again) == ids and all(k["launch_count"] == 2 for k in again), again
        # Not asked: not logged.
        c.infer("add_sub", add_sub_inputs())
        quiet = json.loads(get(port, "/viz/api/kernels")[2])["kernels"]
        assert all(k["launch_count"] == 2 for k in quiet), quiet
        # The parameter must be a bool.
        with pytest.raises(Exception, match="parameters.kiln_viz: expected a bool_param"):
            c.infer("add_sub", add_sub_inputs(), parameters={"kiln_viz": 1})
        c.close()

        # REST: the same parameter in the JSON request's parameters.
        body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16},
                           {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]}
        status, text = post_json(port, "/v2/models/add_sub/infer", {**body, "parameters": {"kiln_viz": "yes"}})
        assert status == 400 and b"parameters.kiln_viz" in text, text
        status, text = post_json(port, "/v2/models/add_sub/infer", {**body, "parameters": {"kiln_viz": True}})
        assert status == 200, text
        rest = json.loads(get(port, "/viz/api/kernels")[2])["kernels"]
        assert all(k["launch_count"] == 3 for k in rest), rest

        # ModelStreamInfer: the parameter on a streamed request records it; a streamed request without it is not.
        results = queue.Queue()
        s = grpcclient.InferenceServerClient(url=server.url)
        s.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            s.async_stream_infer("add_sub", add_sub_inputs(), parameters={"kiln_viz": True})
            result, error = results.get(timeout=60)
            assert error is None, error
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0")[0], np.arange(16) + 1)
            streamed = json.loads(get(port, "/viz/api/kernels")[2])["kernels"]
            assert sorted(k["id"] for k in streamed) == ids and all(k["launch_count"] == 4 for k in streamed), streamed
            s.async_stream_infer("add_sub", add_sub_inputs())
            result, error = results.get(timeout=60)
            assert error is None, error
            s.async_stream_infer("add_sub", add_sub_inputs(), parameters={"kiln_viz": 1})
            result, error = results.get(timeout=60)
            assert error is not None and "parameters.kiln_viz: expected a bool_param" in str(error), error
        finally:
            s.stop_stream()
            s.close()
        quiet = json.loads(get(port, "/viz/api/kernels")[2])["kernels"]
        assert all(k["launch_count"] == 4 for k in quiet), quiet

        # fashion_mnist's kernels were compiled unrecorded (its first request above); two more unrecorded
        # requests capture and replay its JIT plan. A recorded request then replays kernels that have no record:
        # each gets one, marked reused, with the passes of its lowering and this launch.
        c = grpcclient.InferenceServerClient(url=server.url)
        for _ in range(2):
            c.infer("fashion_mnist", [x])
        before = {k["id"] for k in json.loads(get(port, "/viz/api/kernels")[2])["kernels"]}
        c.infer("fashion_mnist", [x], parameters={"kiln_viz": True})
        c.close()
        fresh = [k for k in json.loads(get(port, "/viz/api/kernels")[2])["kernels"] if k["id"] not in before]
        assert len(fresh) >= 3 and {k["label"] for k in fresh} == {"fashion_mnist"}, fresh
        assert all(k["reused"] and k["passes"] > 0 and k["launch_count"] == 1 for k in fresh), fresh
        assert any(k["name"].startswith("r_") for k in fresh), fresh
        assert not any(k["reused"] for k in quiet), "add_sub's were compiled while recorded"
        detail = json.loads(get(port, f"/viz/api/kernel/{fresh[0]['id']}")[2])
        assert detail["reused"] and detail["pass_list"] and fresh[0]["name"] in detail["source"], detail
    finally:
        assert server.stop() == 0


async def browse_beam(http_port: int, devtools_port: int, kernel_id: int, out: Path) -> dict:
    async with open_page(devtools_port, f"http://127.0.0.1:{http_port}/viz") as dt:
        await dt.wait_for(f"document.querySelector('#kernels tr[data-id=\"{kernel_id}\"]') !== null")
        await dt.eval(f"document.querySelector('#kernels tr[data-id=\"{kernel_id}\"]').click()")
        await dt.wait_for("document.querySelectorAll('#beam-candidates tbody tr').length > 0")
        seen = {
            "shown": await dt.eval("getComputedStyle(document.getElementById('beam')).display !== 'none'"),
            "rows": await dt.eval("[...document.querySelectorAll('#beam-candidates tbody tr')].map("
                                  "tr => [...tr.cells].map(td => td.textContent))"),
            "chosen": await dt.eval("[...document.querySelectorAll('#beam-candidates tbody tr.chosen')].map("
                                    "tr => tr.cells[0].textContent)"),
            "note": await dt.eval("document.getElementById('beam-note').textContent"),
        }
        await dt.eval("document.getElementById('beam').scrollIntoView()")
        await dt.screenshot(out / "viz_beam.png")
        seen["errors"] = list(dt.errors)
        dt.reader.cancel()
        return seen


def test_viz_beam_candidates_in_chromium(models, tmp_path):
    """BEAM=1 with VIZ=1 (and no disk cache, so kilnd searches): the kernel view's table lists the
    candidates of kilnd's own kernel document, the chosen one marked."""
    server = Kilnd(models, env={"VIZ": "1", "BEAM": "1", "BEAM_BUDGET": "1", "CACHELEVEL": "0"})
    try:
        port = server.http_port
        c = grpcclient.InferenceServerClient(url=server.url)
        out = c.infer("add_sub", add_sub_inputs())
        np.testing.assert_array_equal(out.as_numpy("OUTPUT0")[0], np.arange(16) + 1)
        c.close()
        kernels = json.loads(get(port, "/viz/api/kernels")[2])["kernels"]
        searched = [k for k in kernels if k["beam_width"] == 1 and k["beam_candidates"] > 0]
        assert searched, kernels
        kernel = json.loads(get(port, f"/viz/api/kernel/{searched[0]['id']}")[2])
        beam = kernel["beam"]
        assert beam["width"] == 1 and beam["from_cache"] is False
        assert len(beam["candidates"]) == searched[0]["beam_candidates"] >= 2
        assert 0 <= beam["chosen"] < len(beam["candidates"])
        assert beam["candidates"][1] == {**beam["candidates"][1], "opts": "no opts", "result": "reference"}
        proc, devtools_port = start_chromium(tmp_path / "profile")
        try:
            seen = asyncio.run(browse_beam(port, devtools_port, kernel["id"], artifacts_dir()))
        finally:
            proc.kill()
            proc.wait()
    finally:
        assert server.stop() == 0
    assert seen["errors"] == [], seen["errors"]
    assert seen["shown"]
    assert [r[2] for r in seen["rows"]] == [cand["opts"] for cand in beam["candidates"]]
    assert [r[1] for r in seen["rows"]] == [str(cand["round"]) for cand in beam["candidates"]]
    assert [r[3].split(" ")[0] for r in seen["rows"]] == [cand["result"].split(" ")[0] for cand in beam["candidates"]]
    assert seen["chosen"] == [str(beam["chosen"])]
    assert seen["note"].startswith(f"(BEAM=1, chose {beam['choice']}: {len(beam['candidates'])} candidates")


async def browse_file(devtools_port: int, url: str, out: Path) -> dict:
    async with open_page(devtools_port, url) as dt:
        await dt.wait_for("document.querySelectorAll('#kernels tbody tr').length > 0")
        seen = {"rows": await dt.eval("document.querySelectorAll('#kernels tbody tr').length")}
        await dt.eval("document.querySelector('#kernels tbody tr').click()")
        await dt.wait_for("document.getElementById('pass-view').dataset.pass")
        seen["svg_nodes"] = await dt.eval("document.querySelectorAll('#graph-in g.node').length")
        seen["source"] = await dt.eval("document.getElementById('source').textContent")
        seen["coloured"] = await dt.eval("document.querySelectorAll('#source span[class^=\"hljs-\"]').length")
        seen["beam_rows"] = await dt.eval("document.querySelectorAll('#beam-candidates tbody tr').length")
        await dt.screenshot(out / "viz_offline.png")
        seen["errors"] = list(dt.errors)
        dt.reader.cancel()
        return seen


def test_kiln_viz_writes_an_offline_page(tmp_path):
    """`kiln viz MODEL.onnx`: one local run with VIZ on, one HTML file that works from disk in a
    browser that can reach no network (every host unresolvable). Run with BEAM=1 (and no disk cache),
    so the kernel's search candidates are in the file too."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])
    w = helper.make_tensor("W", TensorProto.FLOAT, [8, 4], np.arange(32, dtype=np.float32).tolist())
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["H"]),
                               helper.make_node("Relu", ["H"], ["Y"])], "tiny", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "tiny.onnx")
    kiln = Path(os.environ["KILND"]).resolve().parents[2] / "clients" / "cpp" / "kiln"
    out = tmp_path / "tiny.viz.html"
    r = subprocess.run([str(kiln), "viz", str(tmp_path / "tiny.onnx"), "--output", str(out)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "BEAM": "1", "BEAM_BUDGET": "1", "CACHELEVEL": "0"})
    assert r.returncode == 0, r.stderr
    m = re.search(r"wrote .* \((\d+) bytes, (\d+) kernels\)", r.stdout)
    assert m and int(m.group(2)) >= 1, r.stdout
    html = out.read_text()
    assert "/viz/api" not in html and "<script src=" not in html, "self-contained: nothing fetched"
    profile = tmp_path / "profile"
    chromium = shutil.which("chromium")
    proc = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1500,1000",
         f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = 0
        deadline = time.monotonic() + 60
        while not port and time.monotonic() < deadline:
            line = proc.stderr.readline()
            found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            port = int(found.group(1)) if found else 0
        assert port, "chromium did not print its DevTools port"
        seen = asyncio.run(browse_file(port, out.as_uri(), artifacts_dir()))
    finally:
        proc.kill()
        proc.wait()
    assert seen["errors"] == [], seen["errors"]
    assert seen["rows"] == int(m.group(2))
    assert seen["svg_nodes"] > 0 and seen["source"] and seen["coloured"] > 0
    assert seen["beam_rows"] >= 2, "the BEAM candidates of the first kernel"
