"""Headless Chromium for the browser tests (test_kilnd_viz.py, test_kilnd_profile.py): Debian's
`chromium` started with a fresh profile and driven over its DevTools protocol (JSON messages on a
websocket, through aiohttp, which tritonclient[http] brings)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest


def artifacts_dir() -> Path:
    # KILND = <build>/server/main/kilnd
    d = Path(os.environ["KILND"]).resolve().parents[2] / "tests" / "e2e" / "artifacts"
    d.mkdir(parents=True, exist_ok=True)
    return d


class DevTools:
    """One page of a headless Chromium over the DevTools protocol (JSON messages on a websocket)."""

    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.errors: list[str] = []
        self.pending: dict[int, asyncio.Future] = {}
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self):
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":
                self.errors.append(json.dumps(data["params"]["exceptionDetails"])[:500])
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"]["type"] in ("error", "assert"):
                self.errors.append(json.dumps(data["params"]["args"])[:500])
            elif data.get("method") == "Log.entryAdded" and data["params"]["entry"]["level"] == "error":
                self.errors.append(data["params"]["entry"].get("text", "")[:500])

    async def send(self, method: str, **params):
        i = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
        reply = await asyncio.wait_for(fut, 60)
        assert "error" not in reply, reply
        return reply["result"]

    async def eval(self, expression: str):
        r = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.eval(expression):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {expression}")

    async def screenshot(self, path: Path):
        r = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(r["data"]))


def start_chromium(profile: Path, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, int]:
    """Headless Chromium with a fresh profile and `extra` flags; (process, DevTools port)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("no chromium: deploy/install-deps.sh installs Debian's chromium")
    proc = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--window-size=1500,1000",
         f"--user-data-dir={profile}", "--remote-debugging-port=0", *extra, "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    port = 0
    while time.monotonic() < deadline and not port:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise RuntimeError(f"chromium exited ({proc.returncode})")
        m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
        if m:
            port = int(m.group(1))
    if not port:
        proc.kill()
        raise RuntimeError("chromium did not print its DevTools port")
    return proc, port


@contextlib.asynccontextmanager
async def open_page(devtools_port: int, url: str):
    """The browser's page, driven over DevTools, navigated to `url` (runtime, log and page events on)."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{devtools_port}/json/list") as r:
            targets = await r.json()
        page = next(t for t in targets if t["type"] == "page")
        async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            dt = DevTools(ws)
            await dt.send("Runtime.enable")
            await dt.send("Log.enable")
            await dt.send("Page.enable")
            await dt.send("Page.navigate", url=url)
            yield dt
