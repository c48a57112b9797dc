"""The image ships the service only: its wheel, installed into an empty virtualenv (as the
Dockerfile does), imports and serves, and holds nothing of the harness or of pytest."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(*argv: str | Path, cwd: Path = REPO) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_service_wheel_holds_the_service_and_nothing_else(tmp_path: Path) -> None:
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", tmp_path, REPO)
    (wheel,) = tmp_path.glob("escher_extender-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"extender"}
    assert not [n for n in names if "pytest" in n or "harness" in n or "bench" in n]

    # An empty virtualenv, the wheel and its dependencies installed by this pip (--python):
    # the venv's own pip and the bytecode of every dependency's module (--no-compile) were
    # five sixths of this test's CPU and prove nothing about the wheel.
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(
        sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
        "--disable-pip-version-check", "--no-compile", wheel,
    )  # fmt: skip
    # The service imports and builds its app; the harness and pytest are not there.
    check = (
        "import importlib.util as u, extender.app, extender.settings as s;"
        "extender.app.create_app(s.Settings(mode='standalone'));"
        "print([m for m in ('escher_harness', 'pytest', 'locust') if u.find_spec(m)])"
    )
    assert run(python, "-c", check).strip() == "[]"
    usage = run(venv / "bin" / "escher-extender", "--help")
    # No cluster, demo or bench without the harness.
    assert "{serve,check-scheduler-config}" in usage
