"""The import-linter contracts bite: a copy of the service with one rule broken fails
`lint-imports` with that rule named (and the real tree passes it, in `make lint`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        (
            "extender/core/ledger.py",
            "import kubernetes",
            "The core (and gang planning) imports no Kubernetes",
        ),
        ("extender/core/ledger.py", "import extender.scheduling.verbs", "Layers point one way"),
        # The plugins sit below what runs them.
        ("extender/filters/ephemeral.py", "import extender.scheduling", "Layers point one way"),
        ("extender/scheduling/verbs.py", "import kubernetes", "Only the kube parts import"),
        # A feature's Kubernetes side may use the toolkit; its logic may not.
        ("extender/gang/manager.py", "import extender.kube.client", "use the toolkit"),
        ("extender/policies/api.py", "import extender.kube.informer", "use the toolkit"),
        # The toolkit and the core sit below every feature.
        ("extender/kube/informer.py", "import extender.gang.kube.lifter", "Layers point one way"),
        ("extender/gang/state.py", "import extender.writeback.nodes", "Layers point one way"),
        ("extender/esl/soft.py", "import extender.esl.binpack", "independent of one another"),
        ("extender/app.py", "import escher_harness", "never imports the harness"),
    ],
)
def test_a_broken_rule_fails_lint_imports(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    shutil.copytree(REPO / "extender", tmp_path / "extender")
    shutil.copytree(REPO / "harness" / "escher_harness", tmp_path / "escher_harness")
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    result = subprocess.run(
        [str(LINT), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, env={
            "PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    )  # fmt: skip
    assert result.returncode != 0, result.stdout
    broken_section = result.stdout.split("Broken contracts")[-1]
    assert broken in broken_section.replace("\n", " "), result.stdout
