"""The standalone service loads no Kubernetes client: checked in a fresh interpreter (a
process of its own, so in this tier), since a test process may have imported the client."""

from __future__ import annotations

import subprocess
import sys


def test_the_standalone_service_loads_no_kubernetes_client() -> None:
    # A fresh interpreter: this test process may have imported the client for other tests.
    check = (
        "import sys; from extender.service import Service; from extender.settings import "
        "Settings; Service(Settings(mode='standalone'));"
        "print(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
