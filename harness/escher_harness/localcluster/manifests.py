"""Creates the objects of YAML manifests (CRDs first) through the Kubernetes API.

Called by the local control plane (escher_harness.localcluster.cluster.up) once kube-apiserver is
ready and before kube-scheduler starts, for the benchmark's peers: scheduler-plugins' scheduler
reads PodGroups of its own CRD, which must be served before it starts. CRDs are created with
ApiextensionsV1Api and waited for until API discovery lists their resources (which it does
once they are Established); other objects (built-in kinds, e.g. a Namespace or a
PriorityClass) with kubernetes.utils.create_from_dict.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

_CRD_API_VERSION = "apiextensions.k8s.io/v1"
# libyaml's loader where PyYAML was built with it: the operators' CRDs are megabytes, which
# the pure-Python loader reads at about 1 MB/s (issue 60).
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The schedulerName deploy/'s policies are written for.
DEPLOY_SCHEDULER_NAME = "escher-scheduler"


class ManifestError(Exception):
    """A manifest cannot be read, is not a Kubernetes object, or its CRD never became ready."""


@dataclass(frozen=True)
class Manifest:
    """One object of a manifest file, with the file it came from (for error messages)."""

    source: Path
    body: Mapping[str, Any]

    @property
    def is_crd(self) -> bool:
        kind, api_version = self.body["kind"], self.body["apiVersion"]
        return bool(kind == "CustomResourceDefinition" and api_version == _CRD_API_VERSION)

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    def describe(self) -> str:
        return f"{self.body['kind']} {self.name} (from {self.source})"


def load_manifests(paths: Iterable[Path]) -> tuple[Manifest, ...]:
    """Every object of every (multi-document) YAML file, in order; empty documents skipped.

    Raises ManifestError for an unreadable file, invalid YAML, or a document that is not an
    object with apiVersion, kind and metadata.name.
    """
    out: list[Manifest] = []
    for path in paths:
        try:
            documents = list(yaml.load_all(path.read_text(), Loader=_LOADER))
        except OSError as e:
            raise ManifestError(f"cannot read manifest {path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ManifestError(f"manifest {path} is not valid YAML: {e}") from None
        for index, document in enumerate(documents):
            if document is None:
                continue
            metadata = document.get("metadata") if isinstance(document, dict) else None
            if not (
                isinstance(document, dict)
                and isinstance(document.get("apiVersion"), str)
                and isinstance(document.get("kind"), str)
                and isinstance(metadata, dict)
                and isinstance(metadata.get("name"), str)
            ):
                raise ManifestError(
                    f"manifest {path}, document {index + 1}: not a Kubernetes object "
                    "(apiVersion, kind and metadata.name are required)"
                )
            out.append(Manifest(path, document))
    return tuple(out)


def create_manifests(
    api: client.ApiClient, manifests: Iterable[Manifest], *, deadline: float
) -> None:
    """Create the CRDs, wait until each is Established, then create the other objects.

    `deadline` is a time.monotonic() value; ManifestError when a CRD is not Established by then.
    API errors (kubernetes.client.ApiException, kubernetes.utils.FailToCreateError) propagate.
    """
    manifests = list(manifests)
    crds = [m for m in manifests if m.is_crd]
    extensions = client.ApiextensionsV1Api(api)
    for crd in crds:
        # The typed client wants a V1CustomResourceDefinition; a plain mapping serialises the
        # same. The answer is not decoded: a megabyte CRD takes the client seconds to type.
        answer: Any = extensions.create_custom_resource_definition(
            cast(Any, dict(crd.body)), _preload_content=False
        )
        answer.drain_conn()  # read to its end, so the connection can be used again
        answer.release_conn()
    for crd in crds:
        _wait_established(api, crd, deadline)
    for manifest in manifests:
        if not manifest.is_crd:
            # create_from_dict picks the typed API class from apiVersion and kind, and has none
            # for kinds a CRD defines; say so instead of its AttributeError.
            try:
                utils.create_from_dict(api, dict(manifest.body))  # type: ignore[no-untyped-call]
            except AttributeError:
                raise ManifestError(
                    f"{manifest.describe()}: only CRDs and built-in kinds can be created"
                ) from None


def _wait_established(api: client.ApiClient, crd: Manifest, deadline: float) -> None:
    """Until every served version of the CRD lists its resource in its group-version's
    discovery document: the apiserver publishes a CRD's resource there only once it is
    Established, and a controller started next finds its kinds there (reading the CRD back
    instead decodes all of it: 0.66 s a read for half a megabyte, loaded, and an Established
    CRD may be missing from discovery for a moment yet)."""
    spec = crd.body["spec"]
    plural = spec["names"]["plural"]
    versions = [v["name"] for v in spec["versions"] if v.get("served", True)]
    while not all(_listed(api, spec["group"], v, plural) for v in versions):
        if time.monotonic() > deadline:
            raise ManifestError(f"{crd.describe()} was not Established in time")
        time.sleep(0.05)


def _listed(api: client.ApiClient, group: str, version: str, plural: str) -> bool:
    """Whether /apis/<group>/<version> (a few kilobytes) lists resource `plural`."""
    try:
        found = client.CustomObjectsApi(api).get_api_resources(group, version)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return any(r.name == plural for r in found.resources or [])


def in_domain(manifests: Iterable[Manifest], domain: str) -> tuple[Manifest, ...]:
    """deploy/crds' CRDs with their group (and so their names) in `domain`, as the Helm
    chart renders them for its resourceDomain."""
    out = []
    for m in manifests:
        body = dict(m.body)
        spec = {**body["spec"], "group": domain}
        body["spec"] = spec
        body["metadata"] = {**body["metadata"], "name": f"{spec['names']['plural']}.{domain}"}
        out.append(Manifest(m.source, body))
    return tuple(out)


def for_scheduler(body: Mapping[str, Any], scheduler_name: str) -> dict[str, Any]:
    """A copy of one of deploy/'s pod admission policies for a local cluster whose pods use
    `scheduler_name`: every quoted name starting `"escher-scheduler` in its conditions and
    mutations names `scheduler_name`'s instead, so deploy/'s escher-scheduler-all-nodes (the
    profile the marker policy moves the extender's pods to) becomes `<scheduler_name>-all-nodes`."""
    out: dict[str, Any] = copy.deepcopy(dict(body))
    spec = out["spec"]
    expressions = [
        *spec.get("matchConditions", []),
        *(m["jsonPatch"] for m in spec.get("mutations", []) if "jsonPatch" in m),
    ]
    for entry in expressions:
        entry["expression"] = entry["expression"].replace(
            f'"{DEPLOY_SCHEDULER_NAME}', f'"{scheduler_name}'
        )
    return out
