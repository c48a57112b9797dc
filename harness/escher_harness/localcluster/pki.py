"""A throw-away certificate authority for mutual TLS between kube-scheduler and the extender.

`make_pki(dir)` writes, with the openssl command line (as the service-account key is made):
a CA; a server certificate for the extender, valid for 127.0.0.1 and any DNS names given;
a client certificate for kube-scheduler (CN kube-scheduler, clientAuth) that the CA signed;
and a self-signed "rogue" client certificate nobody trusts. Used by cluster.up (the verbs'
listener in extender mode), the deploy/ end-to-end tests and the process tests; the keys
live in the cluster directory and die with it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from escher_harness.localcluster.errors import ClusterError


@dataclass(frozen=True)
class Pki:
    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path  # kube-scheduler's, signed by the CA
    client_key: Path
    rogue_cert: Path  # self-signed: refused by whoever trusts only the CA
    rogue_key: Path


def _openssl(*args: str | Path) -> None:
    try:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise ClusterError("openssl is needed to make the extender's certificates") from None
    except subprocess.CalledProcessError as e:
        raise ClusterError(f"openssl {args[0]} failed: {e.stderr.strip()}") from None


def _key(path: Path) -> None:
    # EC keys: made in milliseconds, where RSA takes a second of a shared core.
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path)
    path.chmod(0o600)


def _signed(d: Path, name: str, pki_ca: tuple[Path, Path], subject: str, ext: str) -> None:
    _key(d / f"{name}.key")
    _openssl("req", "-new", "-key", d / f"{name}.key", "-subj", subject, "-out", d / f"{name}.csr")
    (d / f"{name}.ext").write_text(ext + "\n")
    _openssl("x509", "-req", "-in", d / f"{name}.csr", "-CA", pki_ca[0], "-CAkey", pki_ca[1],
             "-CAcreateserial", "-days", "2", "-out", d / f"{name}.crt",
             "-extfile", d / f"{name}.ext")  # fmt: skip


def make_pki(d: Path, dns_names: Sequence[str] = ()) -> Pki:
    """Write the CA, the extender's server certificate (127.0.0.1 and `dns_names`) and the
    client certificates into `d`."""
    d.mkdir(parents=True, exist_ok=True)
    names = ("ca.crt", "ca.key", "tls.crt", "tls.key", "client.crt", "client.key", "rogue.crt",
             "rogue.key")  # fmt: skip
    pki = Pki(*(d / n for n in names))
    selfsigned = ((pki.ca_key, pki.ca, "escher-ca"), (pki.rogue_key, pki.rogue_cert, "rogue"))
    for key, cert, cn in selfsigned:
        _key(key)
        _openssl("req", "-x509", "-new", "-key", key, "-subj", f"/CN={cn}", "-days", "2",
                 "-out", cert)  # fmt: skip
    sans = ",".join(["IP:127.0.0.1", *(f"DNS:{n}" for n in dns_names)])
    ca = (pki.ca, pki.ca_key)
    _signed(d, "tls", ca, "/CN=escher-extender",
            f"subjectAltName={sans}\nextendedKeyUsage=serverAuth")  # fmt: skip
    _signed(d, "client", ca, "/CN=kube-scheduler", "extendedKeyUsage=clientAuth")
    return pki
