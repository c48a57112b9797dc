"""Where the repository's own files are: the repository root, the build cache, and the
scheduler-config/ templates.

Used by binaries (to find .cache/bin) and config (to find scheduler-config/). The package is
installed in editable mode, so the repository root is found relative to this file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The build cache: $ESCHER_CACHE_DIR, else <repo>/.cache (as hack/build-binaries.sh)."""
    return Path(env.get("ESCHER_CACHE_DIR") or REPO_ROOT / ".cache")


def scheduler_config_dir() -> Path:
    """The KubeSchedulerConfiguration templates of the extender and pure modes."""
    return REPO_ROOT / "scheduler-config"
