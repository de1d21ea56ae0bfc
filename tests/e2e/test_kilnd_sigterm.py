"""SIGTERM under load: 8 client threads send kiln_builtin requests back to back; SIGTERM arrives
mid-way. Every request either succeeds with the right answer or is refused with UNAVAILABLE
(nothing accepted fails or is cancelled), every thread sees the refusal, and kilnd exits 0 within
--exit-timeout-secs."""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from builtin_models import make_repo, mnist_cnn_forward
from conftest import Kilnd

EXIT_TIMEOUT = 10
THREADS = 8


def test_sigterm_under_load_drains_accepted_requests():
    repo = Path(tempfile.mkdtemp(prefix="kiln_sigterm_"))
    try:
        weights = make_repo(repo)["mnist"]
        server = Kilnd(repo, [f"--exit-timeout-secs={EXIT_TIMEOUT}", "--metrics-port=-1"])
        x = np.random.default_rng(5).random((4, 1, 28, 28), dtype=np.float32)
        want = mnist_cnn_forward(weights, x)
        warm = grpcclient.InferenceServerClient(url=server.url)
        for _ in range(3):  # run, capture, replay: the load below replays
            warm.infer("mnist", [_input(x)])
        warm.close()

        results = [dict(ok=0, wrong=0, refused=0, other=[]) for _ in range(THREADS)]
        started = threading.Barrier(THREADS + 1)

        def worker(r):
            client = grpcclient.InferenceServerClient(url=server.url)
            started.wait()
            try:
                while True:
                    try:
                        out = client.infer("mnist", [_input(x)], client_timeout=60).as_numpy("OUTPUT")
                    except InferenceServerException as e:
                        if e.status() == "StatusCode.UNAVAILABLE":
                            r["refused"] += 1
                            return
                        r["other"].append(f"{e.status()}: {e.message()}")
                        return
                    if np.allclose(out, want, rtol=1e-4, atol=1e-4):
                        r["ok"] += 1
                    else:
                        r["wrong"] += 1
            finally:
                client.close()

        threads = [threading.Thread(target=worker, args=(r,)) for r in results]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(1.0)  # let load build up (not a threshold: only makes SIGTERM land mid-load)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        rc = server.proc.wait(timeout=EXIT_TIMEOUT + 5)
        exit_s = time.monotonic() - t0
        for t in threads:
            t.join(timeout=60)
        logs = server.logs()
        server.stop()
        assert rc == 0, logs[-2000:]
        assert exit_s < EXIT_TIMEOUT
        assert all(not r["other"] for r in results), [r["other"] for r in results]
        assert all(r["wrong"] == 0 for r in results)
        assert all(r["refused"] == 1 for r in results)
        assert sum(r["ok"] for r in results) >= THREADS
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def _input(x):
    inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp
