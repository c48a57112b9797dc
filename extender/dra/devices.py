"""What a node's resource publishes as DRA devices: the names of its devices, pools and slices,
and which devices each pool holds (`publication`), tainted or not. Pure: no I/O.

Device `u<k>` of a node's resource lives in pool `<node>/<name>/<k // 128>`, each pool one slice
(128 devices is the API's limit per slice); a device never moves between pools. Used by the
slice publisher (extender.dra.slices) and the claims' holdings (extender.dra.claims).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_DEVICES = 128  # resource.k8s.io/v1 ResourceSliceMaxDevices
# resource.k8s.io/v1 ResourceSliceMaxDevicesWithAdvancedFeatures: a slice in which any device
# has taints holds at most 64 devices.
MAX_TAINTED = 64
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def dns_name(short: str) -> str:
    """A resource's name as DNS label characters (DeviceClass and pool names need them):
    itself when it is one, else lower-cased with `_` and `.` as `-` and a hash of the real
    name appended, so two names never meet."""
    if _DNS_LABEL.match(short) and len(short) <= 50:
        return short
    base = re.sub(r"[^a-z0-9-]", "-", short.lower()).strip("-")[:40] or "r"
    return f"{base}-{hashlib.sha256(short.encode()).hexdigest()[:8]}"


def group_name(node: str, short: str) -> str:
    """The pools of one node's resource share this prefix: `<node>/<name>`."""
    return f"{node}/{dns_name(short)}"


def group_of(pool: str) -> str:
    """The group (node/name) of one of our pool names (node/name/index)."""
    return pool.rsplit("/", 1)[0]


def pool_name(node: str, short: str, index: int = 0) -> str:
    """Pool `index` of a node's resource: devices u<128*index> .. u<128*index+127>."""
    return f"{group_name(node, short)}/{index}"


def slice_name(pool: str) -> str:
    """The one slice of a pool (a DNS subdomain, unique per pool)."""
    node, _, rest = pool.partition("/")
    digest = hashlib.sha256(pool.encode()).hexdigest()[:8]
    return f"{node[:180]}-{rest.replace('/', '-')}-{digest}"


def pool_of(device: str) -> int:
    """The pool index a device name belongs in (foreign names: the last possible)."""
    return _index(device)[0] // MAX_DEVICES


def device_names(count: int, allocated: Iterable[str], shown: Iterable[str] = ()) -> list[str]:
    """The devices of a pool of `count` units: every allocated device (kept whatever the
    count), then free devices already published (`shown`), lowest first, then `u<i>` names
    not taken, lowest first, up to `count`; in index order.

    A free device already published is kept rather than swapped for another: a device a pod
    releases may be allocated again by kube-scheduler before its claim reaches us, and
    publishing another name in its place would give kube-scheduler one device more than the
    capacity (seen on the real control plane: a third pod bound where 2 were accepted)."""
    names = set(allocated)
    for d in sorted(set(shown) - names, key=_index):
        if len(names) >= count:
            break
        names.add(d)
    i = 0
    while len(names) < count:
        names.add(f"u{i}")
        i += 1
    return sorted(names, key=_index)


@dataclass(frozen=True)
class Want:
    """What one pool publishes: its devices, whether they carry the over-capacity taint, and
    the group's capacity (a label on the slice) while they do."""

    devices: tuple[str, ...]
    tainted: bool = False
    capacity: int | None = None


def publication(
    count: int, held: Iterable[str], taints: bool = True, shown: Iterable[str] = ()
) -> dict[int, Want]:
    """Pool index -> what it publishes, for a node's resource of capacity `count` of which
    claims hold the devices `held`.

    Within the capacity (held <= count): the held devices and free ones up to `count`
    (those published, `shown`, first: `device_names`), untainted. Above it (a decrease raced
    with kube-scheduler's allocations, or claims were counted late): only the held devices,
    each tainted NoSchedule, so kube-scheduler allocates none of them (the extended-resource
    claims it creates tolerate no taint) and a device a pod releases takes no new pod until
    the node is back within its capacity. A tainted slice holds at most 64 devices (the API's
    limit): a pool holding more keeps its 64 lowest tainted and leaves the rest unpublished
    until released (not allocatable either way). Every slice then carries the capacity,
    which the devices no longer count.
    `taints=False` (an API server that drops them: DRADeviceTaints off) publishes the held
    devices untainted, as before taints were used."""
    held = set(held)
    per: dict[int, list[str]] = {}
    if count and len(held) > count:
        for d in sorted(held, key=_index):
            per.setdefault(pool_of(d), []).append(d)
        if not taints:
            return {i: Want(tuple(ds), False, count) for i, ds in per.items()}
        return {i: Want(tuple(ds[:MAX_TAINTED]), True, count) for i, ds in per.items()}
    if count:
        for d in device_names(count, held, shown):
            per.setdefault(pool_of(d), []).append(d)
    return {i: Want(tuple(ds)) for i, ds in per.items()}


def _index(device: str) -> tuple[int, str]:
    digits = device[1:]
    return (int(digits), "") if device.startswith("u") and digits.isdigit() else (1 << 62, device)
