"""Where the repository's own files are: the repository root, the build cache, the
scheduler-config/ templates and the policies' CRDs (deploy/crds).

Used by binaries (to find .cache/bin), config (to find scheduler-config/) and cluster (to
serve the CRDs). The package is
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


def policy_crds() -> tuple[Path, ...]:
    """The policies' CustomResourceDefinitions, in the group escher.io."""
    return tuple(sorted((REPO_ROOT / "deploy" / "crds").glob("escher.io_*.yaml")))


def podgroup_crd(env: Mapping[str, str] = os.environ) -> Path:
    """scheduler-plugins' PodGroup CRD (scheduling.x-k8s.io/v1alpha1), copied from its Go
    module into the cache by hack/build-peers.sh (`make peers`)."""
    return cache_dir(env) / "peers" / "scheduling.x-k8s.io_podgroups.yaml"
