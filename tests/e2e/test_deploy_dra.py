"""deploy/overlays/dra's RBAC and admission policy on a real kube-apiserver.

RBAC cannot name a DRA driver or a label, so the overlay's ValidatingAdmissionPolicy
escher-extender-dra-own-objects holds the extender's ServiceAccount to its own objects. Here
the rendered overlay is applied to the embedded control plane (no extender, no scheduling:
only the API server's answers matter), and, with a token of the ServiceAccount, the API
server is asked to do what the service does and what it must never do:

- the ServiceAccount is granted exactly tests/rbac.py's EXPECTED["dra"];
- it may create, replace and delete a ResourceSlice of its driver (escher.io) carrying its
  managed-by label, and create and delete such a DeviceClass mapping escher.io/<name>;
- a slice of another driver, an unlabelled slice, a class mapping another domain, and
  deleting or taking over another writer's slice or class are refused with 403 and the
  policy's message (a class is never updated: RBAC refuses that before the policy);
- ResourceClaims are listed, never written;
- other identities (the cluster's admin here) are not held by the policy.

tests/e2e/test_dra.py runs the service itself in mode dra; tests/unit/test_deploy_manifests.py
checks the same files without a cluster.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from rbac import EXPECTED
from test_deploy import (
    BOOTSTRAP_GRANTS,
    RBAC_REFUSAL,
    SERVICE_ACCOUNT,
    deploy_overlay,
)

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.binaries import find_kubectl
from escher_harness.localcluster.errors import MissingBinaryError
from extender.dra.objects import MANAGED_BY

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=1, kwok=False)]

POLICY = "escher-extender-dra-own-objects"
DRIVER = "escher.io"
NOT_OURS = "may write only objects labelled app.kubernetes.io/managed-by=escher-extender"
OTHER_DRIVER = f"may write only ResourceSlices of its driver {DRIVER}"
OTHER_DOMAIN = f"may write only DeviceClasses mapping an {DRIVER}/ name"
TAKEOVER = "may not take over another writer's object"
OURS = {MANAGED_BY[0]: MANAGED_BY[1]}
_names = itertools.count()


@dataclass(frozen=True)
class Api:
    node: str
    admin: client.ResourceV1Api
    extender: client.ResourceV1Api  # as the ServiceAccount
    sa_kubeconfig: Path


def slice_body(
    name: str, node: str, *, driver: str = DRIVER, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A one-device slice in a pool of its own, labelled as the service labels them unless
    `labels` says otherwise."""
    if labels is None:
        labels = {**OURS, f"{DRIVER}/resource": "x"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": f"{node}/{name}/0", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "u0", "attributes": {"resource": {"string": "x"}}}],
        },
    }


def class_body(
    name: str, *, maps: str | None = f"{DRIVER}/x", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
    }
    if maps is not None:
        spec["extendedResourceName"] = maps
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "labels": OURS if labels is None else labels},
        "spec": spec,
    }


def refusal(call: Callable[[], object]) -> str:
    """The message of the 403 `call` must get."""
    with pytest.raises(ApiException) as e:
        call()
    assert e.value.status == 403, e.value.body
    return str(json.loads(e.value.body or "{}").get("message", ""))


def by_policy(message: str, why: str) -> bool:
    return f"ValidatingAdmissionPolicy '{POLICY}'" in message and why in message


@pytest.fixture(scope="module")
def api(
    cluster: localcluster.ClusterInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    try:
        kubectl = find_kubectl()
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)
    out = tmp_path_factory.mktemp("deploy-dra") / "escher-extender.kubeconfig"
    _, _, sa_kubeconfig = deploy_overlay(kubectl, cluster, "dra", SERVICE_ACCOUNT, out)
    a = Api(
        cluster.nodes[0],
        client.ResourceV1Api(api_client(cluster.kubeconfig)),
        client.ResourceV1Api(api_client(sa_kubeconfig)),
        sa_kubeconfig,
    )
    # The binding and the policy take effect once the API server's informers have them: until
    # the policy refuses (a dry run, which goes through admission and writes nothing).
    probe = slice_body("probe", a.node, labels={})
    deadline = time.monotonic() + 20
    while True:
        try:
            a.extender.create_resource_slice(probe, dry_run="All")
            message = "created"
        except ApiException as e:
            message = str(json.loads(e.body or "{}").get("message", e.body))
        if by_policy(message, NOT_OURS):
            break
        assert time.monotonic() < deadline, f"the policy is not in force: {message}"
        time.sleep(0.2)
    yield a


def test_the_api_server_grants_the_service_account_exactly_the_dra_set(api: Api) -> None:
    authorization = client.AuthorizationV1Api(api_client(api.sa_kubeconfig))
    spec = client.V1SelfSubjectRulesReviewSpec(namespace="default")
    review = authorization.create_self_subject_rules_review(
        client.V1SelfSubjectRulesReview(spec=spec)
    )
    assert review.status is not None
    granted = {
        (group, resource, verb)
        for rule in review.status.resource_rules
        for group in rule.api_groups or []
        for resource in rule.resources or []
        for verb in rule.verbs
        if (group, resource) not in BOOTSTRAP_GRANTS
    }
    assert granted == EXPECTED["dra"]


def test_it_may_write_its_own_slices_and_classes(api: Api) -> None:
    n = next(_names)
    name, cls = f"own-{n}", f"own-{n}.{DRIVER}"
    created = api.extender.create_resource_slice(slice_body(name, api.node))
    try:
        # Replaced with the next generation, as the service rewrites a pool.
        body = slice_body(name, api.node)
        body["metadata"]["resourceVersion"] = created.metadata.resource_version
        body["spec"]["pool"]["generation"] = 2
        body["spec"]["devices"].append({"name": "u1"})
        replaced = api.extender.replace_resource_slice(name, body)
        assert replaced.spec.pool.generation == 2 and len(replaced.spec.devices) == 2
    finally:
        api.extender.delete_resource_slice(name)
    made = api.extender.create_device_class(class_body(cls))
    assert made.spec.extended_resource_name == f"{DRIVER}/x"
    api.extender.delete_device_class(cls)
    assert not [s for s in api.admin.list_resource_slice().items if s.metadata.name == name]
    assert not [c for c in api.admin.list_device_class().items if c.metadata.name == cls]


def test_another_driver_an_unlabelled_object_or_another_domain_is_refused(api: Api) -> None:
    n = next(_names)
    refused = {
        "a slice of another driver": (
            lambda: api.extender.create_resource_slice(
                slice_body(f"gpu-{n}", api.node, driver="gpu.example.com")
            ),
            OTHER_DRIVER,
        ),
        "an unlabelled slice": (
            lambda: api.extender.create_resource_slice(
                slice_body(f"bare-{n}", api.node, labels={})
            ),
            NOT_OURS,
        ),
        "a slice labelled by another manager": (
            lambda: api.extender.create_resource_slice(
                slice_body(f"helm-{n}", api.node, labels={MANAGED_BY[0]: "Helm"})
            ),
            NOT_OURS,
        ),
        "a class mapping another domain": (
            lambda: api.extender.create_device_class(
                class_body(f"gpu-{n}.{DRIVER}", maps="example.com/gpu")
            ),
            OTHER_DOMAIN,
        ),
        "a class mapping no name": (
            lambda: api.extender.create_device_class(class_body(f"none-{n}.{DRIVER}", maps=None)),
            OTHER_DOMAIN,
        ),
        "an unlabelled class": (
            lambda: api.extender.create_device_class(class_body(f"bare-{n}.{DRIVER}", labels={})),
            NOT_OURS,
        ),
    }
    for what, (call, why) in refused.items():
        message = refusal(call)
        assert by_policy(message, why), (what, message)
    slices = {f"gpu-{n}", f"bare-{n}", f"helm-{n}"}
    classes = {f"{c}-{n}.{DRIVER}" for c in ("gpu", "none", "bare")}
    assert not [s for s in api.admin.list_resource_slice().items if s.metadata.name in slices]
    assert not [c for c in api.admin.list_device_class().items if c.metadata.name in classes]


def test_another_writers_slice_and_class_are_neither_changed_nor_deleted(api: Api) -> None:
    """Another driver's objects, and even unlabelled ones of its own driver and domain (which
    the policy does not hold the admin to): the ServiceAccount can neither delete them nor
    take them over by labelling them its own."""
    n = next(_names)
    theirs = {
        "slice": f"theirs-{n}",
        "same-driver slice": f"theirs-escher-{n}",
        "class": f"theirs-{n}.example.com",
        "same-domain class": f"theirs-{n}.{DRIVER}",
    }
    api.admin.create_resource_slice(
        slice_body(theirs["slice"], api.node, driver="gpu.example.com", labels={})
    )
    api.admin.create_resource_slice(slice_body(theirs["same-driver slice"], api.node, labels={}))
    api.admin.create_device_class(class_body(theirs["class"], maps="example.com/gpu", labels={}))
    api.admin.create_device_class(class_body(theirs["same-domain class"], labels={}))
    try:
        for kind in ("slice", "same-driver slice"):
            name = theirs[kind]
            message = refusal(lambda name=name: api.extender.delete_resource_slice(name))
            assert by_policy(message, NOT_OURS), (kind, message)
            # Taken over: labelled ours (and of our driver, for the same-driver slice).
            current = api.admin.read_resource_slice(name)
            body = slice_body(name, api.node)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            body["spec"]["driver"] = current.spec.driver
            message = refusal(
                lambda name=name, body=body: api.extender.replace_resource_slice(name, body)
            )
            why = TAKEOVER if kind == "same-driver slice" else OTHER_DRIVER
            assert by_policy(message, why), (kind, message)
            assert not (api.admin.read_resource_slice(name).metadata.labels or {}), kind
        for kind in ("class", "same-domain class"):
            name = theirs[kind]
            message = refusal(lambda name=name: api.extender.delete_device_class(name))
            assert by_policy(message, NOT_OURS), (kind, message)
            # The role has no update on classes: RBAC refuses before the policy is asked.
            current = api.admin.read_device_class(name)
            body = class_body(name)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            message = refusal(
                lambda name=name, body=body: api.extender.replace_device_class(name, body)
            )
            assert RBAC_REFUSAL in message, (kind, message)
            assert not (api.admin.read_device_class(name).metadata.labels or {}), kind
    finally:
        for kind, name in theirs.items():
            if "slice" in kind:
                api.admin.delete_resource_slice(name)
            else:
                api.admin.delete_device_class(name)


def test_claims_are_read_never_written(api: Api) -> None:
    assert api.extender.list_resource_claim_for_all_namespaces().items == []
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{next(_names)}"},
        "spec": {
            "devices": {"requests": [{"name": "u", "exactly": {"deviceClassName": f"x.{DRIVER}"}}]}
        },
    }
    message = refusal(lambda: api.extender.create_namespaced_resource_claim("default", claim))
    assert RBAC_REFUSAL in message
    message = refusal(lambda: api.extender.delete_collection_resource_slice())
    assert RBAC_REFUSAL in message
