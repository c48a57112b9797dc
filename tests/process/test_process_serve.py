"""`escher-extender serve` as a process: standalone mode, TLS, and refused configurations."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from escher_harness.localcluster.pki import Pki, make_pki
from escher_harness.localcluster.ports import allocate_ports


def serve(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def wait_ready(url: str, proc: subprocess.Popen[bytes], **kw: object) -> httpx.Response:
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.get(f"{url}/readyz", timeout=1, **kw)  # type: ignore[arg-type]
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                raise AssertionError(f"serve did not come up: {out}") from None
            time.sleep(0.05)


@pytest.fixture
def cert(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    key, crt = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(crt), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    yield crt, key


def test_standalone_over_tls(cert: tuple[Path, Path]) -> None:
    crt, key = cert
    port = allocate_ports({"x": None})["x"]
    proc = serve(
        "--mode",
        "standalone",
        "--port",
        str(port),
        "--tls-cert-file",
        str(crt),
        "--tls-key-file",
        str(key),
    )
    try:
        url = f"https://127.0.0.1:{port}"
        ca = ssl.create_default_context(cafile=str(crt))
        assert wait_ready(url, proc, verify=ca).status_code == 200
        r = httpx.put(f"{url}/v1/resources/x", json={"capacity": 1, "node": "n"}, verify=ca)
        assert r.status_code == 200 and r.json()["nodes"] == {"n": 1}
        with pytest.raises(httpx.RemoteProtocolError):  # plain HTTP is not served
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--mode", "standalone", "--tls-cert-file", "/x.crt"],
            "tls_cert_file and tls_key_file must be given",
        ),
        (
            ["--mode", "standalone", "--resource-domain", "Bad_Domain"],
            "resource_domain: resource domain 'Bad_Domain' must be",
        ),
        (
            ["--mode", "standalone", "--port", "70000"],
            "port: Input should be less than or equal to 65535",
        ),
        (["--mode", "other"], "mode: Input should be 'standalone', 'pure', 'extender' or 'dra'"),
        (["--mode", "standalone", "--leader-elect"], "leader_elect needs the Kubernetes API"),
        (
            ["--mode", "standalone", "--verbs-client-ca-file", "/ca.crt"],
            "verbs_client_ca_file needs verbs_port",
        ),
        (["--mode", "standalone", "--verbs-port", "9999"], "verbs_port serves TLS"),
        (
            ["--mode", "standalone", "--verbs-port", "9999", "--verbs-tls-cert-file", "/x.crt"],
            "verbs_port serves TLS",
        ),
        # Plain verbs only on loopback (the sidecar layout).
        (
            [
                "--mode",
                "standalone",
                "--verbs-host",
                "0.0.0.0",
                "--verbs-port",
                "9999",
                "--verbs-plain",
            ],
            "verbs_plain serves the verbs without TLS: only on a loopback verbs_host",
        ),
        (
            [
                "--mode",
                "standalone",
                "--verbs-tls-cert-file",
                "/x.crt",
                "--verbs-tls-key-file",
                "/x.key",
            ],
            "verbs_tls_cert_file needs verbs_port",
        ),
        (
            ["--mode", "standalone", "--verbs-http1-port", "9998"],
            "verbs_http1_port is an HTTP/1.1 listener beside verbs_port's HTTP/2 one",
        ),
    ],
)
def test_refused_configuration_is_one_clear_line(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "extender", "serve", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.mark.parametrize(
    ("api_tls", "http2", "http1_port"),
    [(True, True, False), (False, True, False), (True, False, False), (True, True, True)],
    ids=["one-certificate", "plain-policy-api", "verbs-http1-only", "http1-beside-http2"],
)
def test_the_verbs_take_only_kube_schedulers_client_certificate(
    pki: Pki, api_tls: bool, http2: bool, http1_port: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one certificate for both listeners (deploy/), or the verbs' own certificate and
    the policy API on plain HTTP (the embedded cluster); the verbs over HTTP/2 (hypercorn),
    or HTTP/1.1 only (uvicorn), or both on two ports (deploy/: bind on HTTP/2, filter and
    prioritize on HTTP/1.1), each held to the same client certificate."""
    monkeypatch.setenv("ESCHER_VERBS_HTTP2", str(http2).lower())
    ports = allocate_ports({"api": None, "verbs": None, "http1": None})
    cert = ["--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key)]
    if not api_tls:
        cert = [
            "--verbs-tls-cert-file",
            str(pki.server_cert),
            "--verbs-tls-key-file",
            str(pki.server_key),
        ]
    if http1_port:
        cert += ["--verbs-http1-port", str(ports["http1"])]
    proc = serve("--mode", "standalone", "--port", str(ports["api"]),
                 "--verbs-port", str(ports["verbs"]), *cert,
                 "--verbs-client-ca-file", str(pki.ca), "--token", "t")  # fmt: skip

    def context(client: tuple[Path, Path] | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        if client:
            ctx.load_cert_chain(str(client[0]), str(client[1]))
        return ctx

    scheduler = (pki.client_cert, pki.client_key)
    body = {"Pod": {"metadata": {"uid": "u"}}, "NodeNames": ["n"]}
    scheme = "https" if api_tls else "http"
    api = f"{scheme}://127.0.0.1:{ports['api']}"
    # Each verbs listener, and the HTTP version kube-scheduler's transport (which asks for
    # HTTP/2 by ALPN) gets there.
    listeners = [(f"https://127.0.0.1:{ports['verbs']}", "HTTP/2" if http2 else "HTTP/1.1")]
    if http1_port:
        listeners.append((f"https://127.0.0.1:{ports['http1']}", "HTTP/1.1"))
    try:
        assert wait_ready(api, proc, verify=context(None)).status_code == 200
        for verbs, version in listeners:
            ok = httpx.post(f"{verbs}/filter", json=body, verify=context(scheduler))
            assert ok.status_code == 200 and ok.json()["NodeNames"] == ["n"]
            with httpx.Client(http2=True, verify=context(scheduler)) as h2:
                ok = h2.post(f"{verbs}/filter", json=body)
            assert (ok.http_version, ok.json()["NodeNames"]) == (version, ["n"])
            # No certificate, or one the CA did not sign.
            for client in (None, (pki.rogue_cert, pki.rogue_key)):
                with pytest.raises(
                    (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)
                ):
                    httpx.post(f"{verbs}/filter", json=body, verify=context(client), timeout=5)
            # The API is not served on a verbs listener.
            policy = httpx.get(f"{verbs}/v1/cluster-state", verify=context(scheduler))
            assert policy.status_code == 404
        # The verbs are not served on the API listener.
        elsewhere = httpx.post(f"{api}/filter", json=body, verify=context(None))
        assert elsewhere.status_code == 404 and "mutual-TLS listener" in elsewhere.text
    finally:
        proc.terminate()
        proc.wait(10)
