"""TLS and mutual TLS on kilnd's gRPC listener (issue #23), with Triton's flag names.

Certificates are made per test run with the openssl CLI (a CA, a server certificate for 127.0.0.1,
a client certificate). The stock tritonclient.grpc speaks TLS to kilnd; `openssl s_client` checks
the protocol versions offered and the certificate served after the files are replaced."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import Kilnd


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_cert(d: Path, name: str, cn: str, ca: str = "ca", server: bool = True) -> None:
    openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={cn}", cwd=d)
    ext = d / f"{name}.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else "extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.crt", "-extfile", ext.name, cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=kiln-test-ca", cwd=d)
    make_cert(d, "server", "kilnd-one")
    make_cert(d, "server2", "kilnd-two")
    make_cert(d, "client", "kiln-client", server=False)
    return d


def infer(url: str, **ssl) -> np.ndarray:
    c = grpcclient.InferenceServerClient(url=url, **ssl)
    try:
        a = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        a.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
        b = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
        b.set_data_from_numpy(np.full((1, 16), 2, np.float32))
        return c.infer("add_sub", [a, b], client_timeout=20).as_numpy("OUTPUT0")
    finally:
        c.close()


def s_client(port: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost", *args],
                          input="", capture_output=True, text=True, timeout=30)


def test_tls_serves_tritonclient_and_refuses_plaintext_and_old_versions(models, certs):
    server = Kilnd(models, ["--grpc-use-ssl", f"--grpc-server-cert={certs/'server.crt'}",
                            f"--grpc-server-key={certs/'server.key'}"])
    try:
        assert "over TLS" in server.logs()
        want = np.arange(16, dtype=np.float32).reshape(1, 16) + 2
        got = infer(server.url, ssl=True, root_certificates=str(certs / "ca.crt"))
        np.testing.assert_array_equal(got, want)
        with pytest.raises(InferenceServerException):
            infer(server.url)  # plaintext
        ok = s_client(server.port, "-tls1_2", "-CAfile", str(certs / "ca.crt"))
        assert "Protocol  : TLSv1.2" in ok.stdout or "TLSv1.2" in ok.stdout, ok.stdout[-2000:]
        old = s_client(server.port, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0")
        assert "Cipher is (NONE)" in old.stdout or old.returncode != 0, old.stdout[-2000:]
    finally:
        assert server.stop() == 0


def test_mutual_tls_needs_a_client_certificate(models, certs):
    server = Kilnd(models, ["--grpc-use-ssl-mutual", f"--grpc-server-cert={certs/'server.crt'}",
                            f"--grpc-server-key={certs/'server.key'}", f"--grpc-root-cert={certs/'ca.crt'}"])
    try:
        assert "over mutual TLS" in server.logs()
        ssl = {"ssl": True, "root_certificates": str(certs / "ca.crt")}
        got = infer(server.url, **ssl, private_key=str(certs / "client.key"),
                    certificate_chain=str(certs / "client.crt"))
        np.testing.assert_array_equal(got, np.arange(16, dtype=np.float32).reshape(1, 16) + 2)
        with pytest.raises(InferenceServerException):
            infer(server.url, **ssl)  # no client certificate
    finally:
        assert server.stop() == 0


def test_replaced_certificate_is_served_without_dropping_connections(models, certs, tmp_path):
    cert, key = tmp_path / "live.crt", tmp_path / "live.key"
    cert.write_bytes((certs / "server.crt").read_bytes())
    key.write_bytes((certs / "server.key").read_bytes())
    server = Kilnd(models, ["--grpc-use-ssl", f"--grpc-server-cert={cert}", f"--grpc-server-key={key}"])
    try:
        assert "CN = kilnd-one" in s_client(server.port, "-CAfile", str(certs / "ca.crt")).stdout
        open_client = grpcclient.InferenceServerClient(url=server.url, ssl=True,
                                                       root_certificates=str(certs / "ca.crt"))
        assert open_client.is_server_live()
        # Key first, then certificate: the watcher reads the pair together.
        key.write_bytes((certs / "server2.key").read_bytes())
        cert.write_bytes((certs / "server2.crt").read_bytes())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if "CN = kilnd-two" in s_client(server.port, "-CAfile", str(certs / "ca.crt")).stdout:
                break
            time.sleep(0.5)
        assert "CN = kilnd-two" in s_client(server.port, "-CAfile", str(certs / "ca.crt")).stdout
        assert open_client.is_server_live()  # the connection opened before the change still works
        open_client.close()
        np.testing.assert_array_equal(infer(server.url, ssl=True, root_certificates=str(certs / "ca.crt")),
                                      np.arange(16, dtype=np.float32).reshape(1, 16) + 2)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("flags,named", [
    (["--grpc-use-ssl"], "--grpc-use-ssl needs --grpc-server-cert"),
    (["--grpc-use-ssl", "--grpc-server-cert={d}/server.crt", "--grpc-server-key={d}/server2.key"],
     "--grpc-server-key"),
    (["--grpc-use-ssl", "--grpc-server-cert={d}/nope.crt", "--grpc-server-key={d}/server.key"],
     "--grpc-server-cert"),
    (["--grpc-use-ssl-mutual", "--grpc-server-cert={d}/server.crt", "--grpc-server-key={d}/server.key"],
     "--grpc-root-cert"),
])
def test_bad_tls_files_fail_the_start_naming_the_flag(models, certs, flags, named):
    with pytest.raises(RuntimeError) as e:
        Kilnd(models, [f.format(d=certs) for f in flags]).stop()
    assert named in str(e.value)


# ---- HTTPS on the REST gateway (the --http-* twins) ----

def https(port: int, certs: Path, method: str = "GET", path: str = "/v2/health/ready", body: bytes | None = None,
          client: bool = False, conn=None):
    import http.client
    import ssl as ssl_lib
    if conn is None:
        ctx = ssl_lib.create_default_context(cafile=str(certs / "ca.crt"))
        if client:
            ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=20)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read(), conn


INFER_BODY = (b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": '
              + str(list(range(16))).encode() + b'}, {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", '
              b'"data": ' + str([2] * 16).encode() + b'}]}')


def test_https_serves_rest_and_refuses_plaintext_and_old_versions(models, certs):
    import http.client
    import json
    server = Kilnd(models, ["--http-use-ssl", f"--http-server-cert={certs/'server.crt'}",
                            f"--http-server-key={certs/'server.key'}"])
    try:
        assert "REST over TLS" in server.logs()
        status, _, conn = https(server.http_port, certs)
        assert status == 200
        status, body, _ = https(server.http_port, certs, "POST", "/v2/models/add_sub/infer", INFER_BODY, conn=conn)
        assert status == 200
        out = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
        np.testing.assert_array_equal(out["OUTPUT0"], np.arange(16) + 2)
        conn.close()
        plain = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        with pytest.raises((http.client.HTTPException, OSError)):
            plain.request("GET", "/v2/health/ready")
            plain.getresponse().read()
        plain.close()
        assert "TLSv1.2" in s_client(server.http_port, "-tls1_2", "-CAfile", str(certs / "ca.crt")).stdout
        old = s_client(server.http_port, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0")
        assert "Cipher is (NONE)" in old.stdout or old.returncode != 0, old.stdout[-2000:]
        # The daemon is fine after the failed handshakes; curl agrees.
        assert https(server.http_port, certs)[0] == 200
        curl = subprocess.run(["curl", "-sS", "--cacert", str(certs / "ca.crt"), "-o", "/dev/null", "-w",
                               "%{http_code} %{ssl_verify_result}",
                               f"https://127.0.0.1:{server.http_port}/v2/health/ready"],
                              capture_output=True, text=True, timeout=30)
        assert curl.stdout == "200 0", curl.stderr
        insecure = subprocess.run(["curl", "-sS", f"https://127.0.0.1:{server.http_port}/v2/health/ready"],
                                  capture_output=True, text=True, timeout=30)
        assert insecure.returncode != 0  # an unknown CA is refused by curl's default verification
    finally:
        assert server.stop() == 0


def test_https_mutual_and_certificate_reload(models, certs, tmp_path):
    import ssl as ssl_lib
    cert, key = tmp_path / "live.crt", tmp_path / "live.key"
    cert.write_bytes((certs / "server.crt").read_bytes())
    key.write_bytes((certs / "server.key").read_bytes())
    server = Kilnd(models, ["--http-use-ssl-mutual", f"--http-server-cert={cert}", f"--http-server-key={key}",
                            f"--http-root-cert={certs/'ca.crt'}", "--http-keep-alive-timeout-s=120"])
    try:
        assert "REST over mutual TLS" in server.logs()
        with pytest.raises((ssl_lib.SSLError, OSError)):
            https(server.http_port, certs)  # no client certificate
        status, _, kept = https(server.http_port, certs, client=True)
        assert status == 200
        assert "CN = kilnd-one" in s_client(server.http_port, "-CAfile", str(certs / "ca.crt"),
                                            "-cert", str(certs / "client.crt"), "-key", str(certs / "client.key")).stdout
        key.write_bytes((certs / "server2.key").read_bytes())
        cert.write_bytes((certs / "server2.crt").read_bytes())
        time.sleep(1.5)  # past kTlsRefreshSeconds: the next connection sees the change
        seen = ""
        deadline = time.monotonic() + 20
        while "CN = kilnd-two" not in seen and time.monotonic() < deadline:
            seen = s_client(server.http_port, "-CAfile", str(certs / "ca.crt"), "-cert", str(certs / "client.crt"),
                            "-key", str(certs / "client.key")).stdout
            time.sleep(0.5)
        assert "CN = kilnd-two" in seen
        assert https(server.http_port, certs, conn=kept)[0] == 200  # the kept-alive connection still works
        kept.close()
    finally:
        assert server.stop() == 0


def test_bad_https_files_fail_the_start(models, certs):
    with pytest.raises(RuntimeError) as e:
        Kilnd(models, ["--http-use-ssl", f"--http-server-cert={certs/'server.crt'}",
                       f"--http-server-key={certs/'server2.key'}"]).stop()
    assert "--http-server-key" in str(e.value)
