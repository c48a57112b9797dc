"""Gangs for the in-framework gang-scheduling peers: a group object and its member pods.

Used by the benchmarks and tests/e2e/test_gang_peers.py to submit the same gang to each peer
the ESCHER extender is compared with, through the API:

- coscheduling: scheduler-plugins' Coscheduling (kube-scheduler-plugins v0.34.7 with
  scheduler-config/coscheduling.yaml): a `scheduling.x-k8s.io/v1alpha1` PodGroup (a CRD) with
  spec.minMember, and pods labelled `scheduling.x-k8s.io/pod-group: <PodGroup name>`.
- native: Kubernetes v1.37's own gang scheduling, beta in 1.37 (kube-scheduler with
  scheduler-config/native.yaml and the cluster set-up NATIVE_FEATURE_GATES and
  NATIVE_RUNTIME_CONFIG): a `scheduling.k8s.io/v1beta1` PodGroup with
  spec.schedulingPolicy.gang.minCount, and pods naming it in
  spec.schedulingGroup.podGroupName (the same pod field as in 1.36; only the group's API
  version moved, v1alpha2 is gone).

What 1.37.2 needs, read from its sources: one feature gate, GenericWorkload (beta, off by
default, pkg/features/kube_features.go). It serves the Workload and PodGroup storage, keeps
pods' spec.schedulingGroup, and adds the GangScheduling plugin to kube-scheduler's default
profile (pkg/scheduler/apis/config/v1/default_plugins.go); the GangScheduling gate of 1.36 no
longer exists, and kube-apiserver refuses an unknown gate. scheduling.k8s.io/v1beta1 is in
kube-apiserver's beta versions disabled by default (pkg/controlplane/instance.go), hence the
runtime config. A Workload object is still not needed: PodGroup.spec.workloadRef is optional
(required only with parentCompositePodGroupName, pkg/apis/scheduling/validation),
kube-scheduler has informers for PodGroups (and CompositePodGroups, behind their own gate) but
none for Workloads, and its GangScheduling plugin finds a pod's group by
spec.schedulingGroup.podGroupName alone (pkg/scheduler/framework/plugins/gangscheduling).

Topology (1.37.2, read from its sources): the alpha gate TopologyAwareWorkloadScheduling
(pkg/features/kube_features.go, alpha since 1.36, needs GenericWorkload) keeps a PodGroup's
spec.schedulingConstraints.topology ([{key: <node label>}], one entry at most) in the API
server, and in kube-scheduler adds the TopologyPlacementGenerator and PodGroupPodsCount
plugins to the default profile (pkg/scheduler/apis/config/v1/default_plugins.go) and switches
the group's cycle to the placement algorithm (pkg/scheduler/schedule_one_podgroup.go): one
candidate placement per domain of the key (the domain of members already bound, if any),
the group scheduled on each, the best kept (pkg/scheduler/framework/plugins/topologyaware).
A constraint is required: all members in one domain. There is nothing preferred.
NATIVE_TOPOLOGY_FEATURE_GATES is the set-up with it on; `topology_key` sets the constraint.

The group object is created before the pods, so no member is ever seen without its group.
Both PodGroup kinds go through CustomObjectsApi: the first is a CRD, and for the second the
typed SchedulingV1beta1Api exists only in kubernetes clients >= 37, while one generic path
serves both peers and the older clients the harness allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from escher_harness.workload import Workload, pod_manifest

COSCHEDULING_GROUP = "scheduling.x-k8s.io"
COSCHEDULING_VERSION = "v1alpha1"
# The label that makes a pod a member of the PodGroup it names (scheduler-plugins'
# apis/scheduling/v1alpha1.PodGroupLabel).
COSCHEDULING_LABEL = f"{COSCHEDULING_GROUP}/pod-group"
NATIVE_GROUP = "scheduling.k8s.io"
NATIVE_VERSION = "v1beta1"
# The cluster set-up (ClusterSpec feature_gates and runtime_config) the native peer needs.
NATIVE_FEATURE_GATES: Final[Mapping[str, bool]] = {"GenericWorkload": True}
NATIVE_RUNTIME_CONFIG: Final[Mapping[str, str]] = {f"{NATIVE_GROUP}/{NATIVE_VERSION}": "true"}
# With topology-aware workload scheduling (alpha in 1.37) on as well, on both components.
NATIVE_TOPOLOGY_FEATURE_GATES: Final[Mapping[str, bool]] = {
    **NATIVE_FEATURE_GATES,
    "TopologyAwareWorkloadScheduling": True,
}
_PODGROUPS = "podgroups"
_PROTECTION_FINALIZER = f"{NATIVE_GROUP}/podgroup-protection"


@dataclass(frozen=True)
class Gang:
    """A submitted gang: its PodGroup's name (also the pods' name prefix) and its pods."""

    name: str
    namespace: str
    pods: tuple[str, ...]
    min_member: int


def submit_coscheduling_gang(
    api: client.ApiClient,
    name: str,
    *,
    size: int,
    min_member: int,
    cpu: str,
    memory: str,
    namespace: str = "default",
    scheduler_name: str = "default-scheduler",
    schedule_timeout_seconds: int | None = None,
) -> Gang:
    """A scheduler-plugins PodGroup `name` (minMember = min_member) and `size` pods
    `<name>-<i>` requesting (and limited to) cpu and memory each, for the profile
    `scheduler_name`. schedule_timeout_seconds: how long assumed members wait at permit for
    the rest (None: the plugin's permitWaitingTimeSeconds)."""
    _check(size, min_member)
    spec: dict[str, Any] = {"minMember": min_member}
    if schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = schedule_timeout_seconds
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        COSCHEDULING_GROUP,
        COSCHEDULING_VERSION,
        namespace,
        _PODGROUPS,
        {
            "apiVersion": f"{COSCHEDULING_GROUP}/{COSCHEDULING_VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )
    return _create_members(
        api,
        name,
        namespace,
        min_member,
        [
            pod_manifest(
                f"{name}-{i}",
                limits={"cpu": cpu, "memory": memory},
                requests={"cpu": cpu, "memory": memory},
                labels={COSCHEDULING_LABEL: name},
                scheduler_name=scheduler_name,
            )
            for i in range(size)
        ],
    )


def delete_coscheduling_gang(api: client.ApiClient, gang: Gang) -> None:
    """Delete the gang's pods, then its PodGroup; what is already gone is skipped."""
    # Pods first: a member whose group is gone is an error case of the plugin's permit.
    Workload(api, gang.namespace).delete(gang.pods)
    try:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            COSCHEDULING_GROUP, COSCHEDULING_VERSION, gang.namespace, _PODGROUPS, gang.name
        )
    except ApiException as e:
        if e.status != 404:
            raise


def submit_native_gang(
    api: client.ApiClient,
    name: str,
    *,
    size: int,
    min_member: int,
    cpu: str,
    memory: str,
    namespace: str = "default",
    scheduler_name: str = "default-scheduler",
    topology_key: str | None = None,
) -> Gang:
    """A scheduling.k8s.io/v1beta1 PodGroup `name` with a gang policy (minCount =
    min_member) and `size` pods `<name>-<i>` requesting (and limited to) cpu and memory each,
    each naming the PodGroup in spec.schedulingGroup. With `topology_key` (a node label), the
    group requires all members in one domain of it (spec.schedulingConstraints.topology: the
    cluster needs NATIVE_TOPOLOGY_FEATURE_GATES, or the API server drops the field)."""
    _check(size, min_member)
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_member}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        NATIVE_GROUP,
        NATIVE_VERSION,
        namespace,
        _PODGROUPS,
        {
            "apiVersion": f"{NATIVE_GROUP}/{NATIVE_VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )
    pods = []
    for i in range(size):
        pod = pod_manifest(
            f"{name}-{i}",
            limits={"cpu": cpu, "memory": memory},
            requests={"cpu": cpu, "memory": memory},
            scheduler_name=scheduler_name,
        )
        pod["spec"]["schedulingGroup"] = {"podGroupName": name}
        pods.append(pod)
    return _create_members(api, name, namespace, min_member, pods)


def delete_native_gang(api: client.ApiClient, gang: Gang) -> None:
    """Delete the gang's pods, then its PodGroup; what is already gone is skipped.

    kube-apiserver's PodGroupProtection admission gives every such PodGroup the finalizer
    scheduling.k8s.io/podgroup-protection, which kube-controller-manager removes once no pod
    uses the group. The local control plane runs no controller-manager, so with the pods gone
    this removes it, as that controller would; otherwise the PodGroup stays Terminating.
    """
    Workload(api, gang.namespace).delete(gang.pods)
    groups = client.CustomObjectsApi(api)
    try:
        # CustomObjectsApi returns the decoded JSON, typed `object`.
        current = cast(
            dict[str, Any],
            groups.get_namespaced_custom_object(
                NATIVE_GROUP, NATIVE_VERSION, gang.namespace, _PODGROUPS, gang.name
            ),
        )
        finalizers = current["metadata"].get("finalizers") or []
        if _PROTECTION_FINALIZER in finalizers:
            groups.patch_namespaced_custom_object(
                NATIVE_GROUP,
                NATIVE_VERSION,
                gang.namespace,
                _PODGROUPS,
                gang.name,
                # A merge patch replaces the list: the other finalizers are kept as they were.
                {"metadata": {"finalizers": [f for f in finalizers if f != _PROTECTION_FINALIZER]}},
            )
        groups.delete_namespaced_custom_object(
            NATIVE_GROUP, NATIVE_VERSION, gang.namespace, _PODGROUPS, gang.name
        )
    except ApiException as e:
        if e.status != 404:
            raise


def _check(size: int, min_member: int) -> None:
    if not 1 <= min_member <= size:
        raise ValueError(f"min_member must be in 1..size ({size}), not {min_member}")


def _create_members(
    api: client.ApiClient,
    name: str,
    namespace: str,
    min_member: int,
    pods: list[dict[str, Any]],
) -> Gang:
    workload = Workload(api, namespace)
    for pod in pods:
        workload.create(pod)
    return Gang(name, namespace, tuple(p["metadata"]["name"] for p in pods), min_member)
