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
    proc = serve("--no-kube", "--port", str(port), "--tls-cert", str(crt), "--tls-key", str(key))
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
        (["--no-kube", "--tls-cert", "/x.crt"], "tls_cert_file and tls_key_file must be given"),
        (
            ["--no-kube", "--domain", "Bad_Domain"],
            "resource_domain: resource domain 'Bad_Domain' must be",
        ),
        (["--no-kube", "--port", "70000"], "port: Input should be less than or equal to 65535"),
        (["--mode", "other"], "invalid choice: 'other'"),
        (["--no-kube", "--leader-elect"], "leader_elect needs the Kubernetes API"),
        (
            ["--no-kube", "--verbs-client-ca", "/ca.crt"],
            "verbs_client_ca_file needs verbs_port",
        ),
        (["--no-kube", "--verbs-port", "9999"], "verbs_port serves TLS"),
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


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1, and two client certificates: one the CA
    signed (kube-scheduler's) and one self-signed (anybody's)."""
    d = {k: tmp_path / k for k in ("ca.key", "ca.crt", "tls.key", "tls.crt", "client.key",
                                   "client.crt", "rogue.key", "rogue.crt")}  # fmt: skip
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=ca",
            "-keyout", d["ca.key"], "-out", d["ca.crt"])  # fmt: skip
    for name, cn, san in (("tls", "127.0.0.1", "IP:127.0.0.1"), ("client", "kube-scheduler", "")):
        csr = tmp_path / f"{name}.csr"
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                "-keyout", d[f"{name}.key"], "-out", csr)  # fmt: skip
        ext = tmp_path / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n" if san else "extendedKeyUsage=clientAuth\n")
        signed = d[f"{name}.crt"]
        openssl("x509", "-req", "-in", csr, "-CA", d["ca.crt"], "-CAkey", d["ca.key"],
                "-CAcreateserial", "-days", "1", "-out", signed, "-extfile", ext)  # fmt: skip
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=rogue",
            "-keyout", d["rogue.key"], "-out", d["rogue.crt"])  # fmt: skip
    return d


def test_the_verbs_take_only_kube_schedulers_client_certificate(pki: dict[str, Path]) -> None:
    ports = allocate_ports({"api": None, "verbs": None})
    proc = serve("--no-kube", "--port", str(ports["api"]), "--verbs-port", str(ports["verbs"]),
                 "--tls-cert", str(pki["tls.crt"]), "--tls-key", str(pki["tls.key"]),
                 "--verbs-client-ca", str(pki["ca.crt"]), "--token", "t")  # fmt: skip
    ca = str(pki["ca.crt"])

    def context(client: str | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=ca)
        if client:
            ctx.load_cert_chain(str(pki[f"{client}.crt"]), str(pki[f"{client}.key"]))
        return ctx

    body = {"Pod": {"metadata": {"uid": "u"}}, "NodeNames": ["n"]}
    api, verbs = f"https://127.0.0.1:{ports['api']}", f"https://127.0.0.1:{ports['verbs']}"
    try:
        assert wait_ready(api, proc, verify=context(None)).status_code == 200
        ok = httpx.post(f"{verbs}/filter", json=body, verify=context("client"))
        assert ok.status_code == 200 and ok.json()["NodeNames"] == ["n"]
        for client in (None, "rogue"):  # no certificate, or one the CA did not sign
            with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                httpx.post(f"{verbs}/filter", json=body, verify=context(client), timeout=5)
        # The verbs are not served on the API listener, and the API not on the verbs one.
        elsewhere = httpx.post(f"{api}/filter", json=body, verify=context(None))
        assert elsewhere.status_code == 404 and "mutual-TLS listener" in elsewhere.text
        policy = httpx.get(f"{verbs}/v1/cluster-state", verify=context("client"))
        assert policy.status_code == 404
    finally:
        proc.terminate()
        proc.wait(10)
