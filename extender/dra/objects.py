"""The DRA objects as far as mode dra reads them: ResourceSlices, ResourceClaims and DeviceClasses
(resource.k8s.io/v1), decoded from the API server's JSON; the labels and the taint that mark
ours; and deleting one (gone already is done).

Used by the slice publisher (extender.dra.slices), the claims' holdings (extender.dra.claims)
and the device classes (extender.dra.classes).
"""

from __future__ import annotations

from msgspec import Struct

from extender.core.objects import ObjectMeta
from extender.kube.client import ApiError, KubeAPI

GROUP = "/apis/resource.k8s.io/v1"
MANAGED_BY = ("app.kubernetes.io/managed-by", "escher-extender")


class _Obj(Struct, rename="camel", frozen=True, gc=False):
    """Kubernetes JSON: camelCase keys; unknown keys are skipped."""


class _Taint(_Obj, frozen=True):
    key: str = ""
    effect: str = ""


class _Device(_Obj, frozen=True):
    name: str = ""
    taints: list[_Taint] = []


class _Pool(_Obj, frozen=True):
    name: str = ""
    generation: int = 0
    resource_slice_count: int = 0


class _SliceSpec(_Obj, frozen=True):
    driver: str = ""
    node_name: str | None = None
    pool: _Pool = _Pool()
    devices: list[_Device] = []


class ResourceSlice(_Obj, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: _SliceSpec = _SliceSpec()


class SliceList(Struct, frozen=True, gc=False):
    items: list[ResourceSlice] = []


class _Result(_Obj, frozen=True):
    driver: str = ""
    pool: str = ""
    device: str = ""


class _Devices(_Obj, frozen=True):
    results: list[_Result] = []


class _Allocation(_Obj, frozen=True):
    devices: _Devices = _Devices()


class _ClaimStatus(_Obj, frozen=True):
    allocation: _Allocation | None = None


class ResourceClaim(_Obj, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    status: _ClaimStatus = _ClaimStatus()


class _ClassSpec(_Obj, frozen=True):
    extended_resource_name: str | None = None


class DeviceClass(_Obj, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: _ClassSpec = _ClassSpec()


def ours(meta: ObjectMeta) -> bool:
    """Whether this service wrote the object (it carries MANAGED_BY)."""
    return meta.labels.get(MANAGED_BY[0]) == MANAGED_BY[1]


def name_of(obj: ResourceSlice | DeviceClass) -> str:
    return obj.metadata.name


def uid_of(obj: ResourceClaim) -> str:
    return obj.metadata.uid


def resource_label(domain: str) -> str:
    """On each of our slices: the short name of the resource its devices are."""
    return f"{domain}/resource"


def capacity_label(domain: str) -> str:
    """On a tainted slice: the group's capacity (its devices are the held ones)."""
    return f"{domain}/capacity"


def taint_key(domain: str) -> str:
    """The NoSchedule taint of a device held above its node's capacity."""
    return f"{domain}/over-capacity"


async def delete(api: KubeAPI, path: str, what: str) -> None:
    """Delete one object; one already gone is deleted."""
    try:
        await api.request("DELETE", path, what=what)
    except ApiError as e:
        if e.status != 404:
            raise
