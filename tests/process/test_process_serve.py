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
