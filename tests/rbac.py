"""The extender's expected permissions, (group, resource, verb), and rules flattened to them.

One source for the three tiers that check them: deploy/'s manifests (tests/unit), the
chart's rendering (tests/process) and what the API server reports it may do (tests/e2e).
"""

from __future__ import annotations

from typing import Any

LEAST_PRIVILEGE = {
    *(("", r, v) for r in ("nodes", "pods") for v in ("get", "list", "watch")),
    ("", "nodes/status", "get"),  # the write-back reads a node it has no record of
    ("", "nodes/status", "patch"),  # ... and merge-patches the resources in
    ("", "events", "create"),
    ("events.k8s.io", "events", "create"),
    # Policies as objects: reconciled, finalized, owned, adopted; status written.
    *(
        ("escher.io", r, v)
        for r in ("ephemeralresources", "esls")
        for v in ("get", "list", "watch", "create", "patch", "delete")
    ),
    *(("escher.io", f"{r}/status", "patch") for r in ("ephemeralresources", "esls")),
}
# Extender mode binds pods itself (bindVerb), annotates gang members' pods, writes their
# nominated node, and reads the gangs declared as PodGroups of either API group (listed and
# watched only).
PLACEMENT = {
    ("", "pods/binding", "create"),
    ("", "pods", "patch"),
    ("", "pods/status", "patch"),
    *(
        (g, "podgroups", v)
        for g in ("scheduling.k8s.io", "scheduling.x-k8s.io")
        for v in ("list", "watch")
    ),
}
# Dra mode publishes the resources as DRA devices: its slices (created, replaced with the next
# generation, deleted), a DeviceClass per resource (created and deleted, never updated), and
# the claims that hold devices (read only). An admission policy holds the writes to its own
# driver and label (deploy/overlays/dra/dra-policy.yaml).
DRA = {
    *(
        ("resource.k8s.io", "resourceslices", v)
        for v in ("list", "watch", "create", "update", "delete")
    ),
    *(
        ("resource.k8s.io", "deviceclasses", v)
        for v in ("get", "list", "watch", "create", "delete")
    ),
    *(("resource.k8s.io", "resourceclaims", v) for v in ("list", "watch")),
}
EXPECTED = {
    "extender": LEAST_PRIVILEGE | PLACEMENT,
    "pure": LEAST_PRIVILEGE,
    "dra": LEAST_PRIVILEGE | DRA,
}


def triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
