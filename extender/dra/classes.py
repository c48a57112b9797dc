"""Mode dra's DeviceClasses: ours map each resource's name to its devices (created when the
resource first has capacity, deleted with its last pool); another's class that maps a name of
our domain makes the guard refuse that resource (never overwritten).

Kept by the slice publisher (extender.dra.slices) from its class informer; it creates and
deletes ours around its slice writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from extender.dra.devices import dns_name
from extender.dra.objects import GROUP, MANAGED_BY, DeviceClass, delete, ours
from extender.kube.client import ApiError, KubeAPI

log = logging.getLogger(__name__)


class DeviceClasses:
    def __init__(
        self,
        api: KubeAPI,
        driver: str,
        domain: str,
        prefix: str,
        check_leading: Callable[[], None],
    ) -> None:
        self._api = api
        self._driver = driver
        self._domain = domain
        self._prefix = prefix
        self._check_leading = check_leading  # raises unless this replica may still write
        self._classes: dict[str, DeviceClass] = {}  # class name -> class
        self._mapped: dict[str, str] = {}  # extended resource name -> class name (not ours)

    def mapped_by_another(self, resource: str) -> str | None:
        """The class not ours that maps `resource`, if one does."""
        return self._mapped.get(resource)

    def observe(self, kind: str, c: DeviceClass) -> None:
        name = c.metadata.name
        before = self._classes.get(name)
        self._forget(name)
        if kind == "DELETED":
            return
        self._classes[name] = c
        mapped = c.spec.extended_resource_name
        if mapped and mapped.startswith(self._prefix) and not ours(c.metadata):
            if before is None or before.spec.extended_resource_name != mapped:
                log.warning(
                    "DeviceClass not written by us maps a resource of our domain: "
                    "none published under that name",
                    extra={"device_class": name, "resource": mapped},
                )
            self._mapped[mapped] = name

    def listed(self, names: set[str]) -> None:
        for name in list(self._classes):
            if name not in names:
                self._forget(name)

    def class_name(self, short: str) -> str:
        return f"{dns_name(short)}.{self._domain}"

    async def ensure(self, short: str, resource: str) -> None:
        """Our class of the resource exists (created if not; another's of its name: 409)."""
        name = self.class_name(short)
        known = self._classes.get(name)
        if known is not None and ours(known.metadata):
            return
        if known is not None:
            raise ApiError(409, f"DeviceClass {name} exists and is not ours", f"class {name}")
        self._check_leading()
        try:
            reply = await self._api.request(
                "POST",
                f"{GROUP}/deviceclasses",
                body=msgspec.json.encode(self._body(name, short, resource)),
                content_type="application/json",
                what=f"creating device class {name}",
            )
        except ApiError as e:
            if e.status != 409:
                raise
            reply = await self._api.request(
                "GET", f"{GROUP}/deviceclasses/{name}", what=f"reading device class {name}"
            )
        self.observe("ADDED", msgspec.json.decode(reply, type=DeviceClass))

    async def delete(self, short: str) -> None:
        """Our class of the resource deleted, if it is ours."""
        name = self.class_name(short)
        known = self._classes.get(name)
        if known is None or not ours(known.metadata):
            return
        self._check_leading()
        await delete(self._api, f"{GROUP}/deviceclasses/{name}", f"deleting device class {name}")
        self._forget(name)

    def _body(self, name: str, short: str, resource: str) -> dict[str, object]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{self._driver}" && '
                            f'device.attributes["{self._driver}"].resource == "{short}"'
                        }
                    }
                ],
                "extendedResourceName": resource,
            },
        }

    def _forget(self, name: str) -> None:
        old = self._classes.pop(name, None)
        mapped = old.spec.extended_resource_name if old is not None else None
        if mapped and self._mapped.get(mapped) == name:
            del self._mapped[mapped]
