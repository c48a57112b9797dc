"""The check of kube-scheduler's configuration against what this extender needs of it.

A scheduler profile that sends the extender's exchanges to the wrong pods fails silently: a
gang member bound by kube-scheduler itself skips the gang barrier, a marker the extender does
not know is counted by NodeResourcesFit, a preference is never scored. `problems()` reads a
KubeSchedulerConfiguration (as its YAML or JSON decodes) and says each such mistake in a
sentence, so it is found where the configuration is started, not in the cluster later:
`escher-extender check-scheduler-config FILE` (deploy/'s scheduler runs it as an init
container) and the embedded cluster's launcher call it. Pure: no I/O.

The extender's entries are those whose `managedResources` name a marker of the domain
(`scheduling.<domain>/...`), or, with no `managedResources`, whose urlPrefix is one of those
entries' or who call the verbs by the extender's names. Other extenders are left alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.core.pod import Keys

VERBS = ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb")
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|m|s))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclass(frozen=True, slots=True)
class Problem:
    """One mistake: where (`extenders[1].bindVerb`) and why it matters."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def extender_entries(
    config: Mapping[str, Any], keys: Keys
) -> list[tuple[int, Mapping[str, Any], set[str]]]:
    """The extender's entries of `config`: (index, entry, the names it manages)."""
    entries = config.get("extenders") or []
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        return []
    domain = _marker_prefix(keys)
    found: list[tuple[int, Mapping[str, Any], set[str]]] = []
    urls = set()
    for i, e in enumerate(entries):
        if not isinstance(e, Mapping):
            continue
        managed = {
            str(m.get("name", ""))
            for m in e.get("managedResources") or []
            if isinstance(m, Mapping)
        }
        if any(m.startswith(domain) for m in managed):
            urls.add(e.get("urlPrefix"))
            found.append((i, e, managed))
    unmarked = [
        (i, e)
        for i, e in enumerate(entries)
        if isinstance(e, Mapping) and not e.get("managedResources")
    ]
    # Every pod's entries: one that filters by the extender's verb name, and any other entry of
    # its URL or a marker entry's (a bind-only entry beside the filter entry, say).
    urls |= {e.get("urlPrefix") for _, e in unmarked if e.get("filterVerb") == "filter"}
    found += [(i, e, set()) for i, e in unmarked if e.get("urlPrefix") in urls]
    return sorted(found, key=lambda t: t[0])


# kube-scheduler's client budget when clientConnection leaves it out (its defaults).
SCHEDULER_QPS = 50.0
# The longest a filter call may take before kube-scheduler gives up on it: filter runs in the
# scheduling cycle, which places one pod at a time, so this is also how long a silent extender
# holds every pod (kube-scheduler's own default is 5 s).
FILTER_TIMEOUT_MAX = 15.0


def problems(
    config: Mapping[str, Any],
    keys: Keys,
    gang_wait_seconds: float,
    extender_qps: float | None = None,
) -> list[Problem]:
    """Every mistake in `config` for an extender with `keys` whose gang members wait up to
    `gang_wait_seconds` at bind (and, given `extender_qps`, which binds with that API budget);
    [] for a configuration the extender works with, or one that names no entry of it (pure
    mode)."""
    entries = config.get("extenders") or []
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        return [Problem("extenders", "must be a list")]
    domain = _marker_prefix(keys)
    out = list(_misshapen(entries))
    ours = extender_entries(config, keys)
    if not ours:
        return out
    markers = set(keys.markers)
    filters: list[int] = []  # entries that filter gang members
    binders: list[int] = []  # entries that bind them
    gang_entries: list[int] = []  # entries gang members reach for filter (marker or every pod)
    bind_entries: list[int] = []  # ... for bind
    scored = False
    for i, e, managed in ours:
        at = f"extenders[{i}]"
        verbs = {v for v in VERBS if e.get(v)}
        every_pod = not managed
        for name in sorted(managed):
            if name.startswith(domain) and name not in markers:
                out.append(
                    Problem(
                        f"{at}.managedResources",
                        f"{name} is no marker of this extender (its markers are "
                        f"{', '.join(keys.markers)}): the admission policy does not add it, "
                        "so the entry is sent no pod (an old marker, or another "
                        "--resource-domain?)",
                    )
                )
        for m in e.get("managedResources") or []:
            if (
                isinstance(m, Mapping)
                and m.get("name") in markers
                and not m.get("ignoredByScheduler")
            ):
                out.append(
                    Problem(
                        f"{at}.managedResources",
                        f"{m.get('name')} needs ignoredByScheduler: true: NodeResourcesFit "
                        "would refuse a node the extender has not written the marker to yet",
                    )
                )
        if e.get("ignorable"):
            out.append(
                Problem(
                    f"{at}.ignorable",
                    "must be false: kube-scheduler would place the pods without the "
                    "extender's say whenever it does not answer (gang members without their "
                    "barrier, over a reservation)",
                )
            )
        gang = every_pod or keys.gang_marker in managed
        binds_gangs = gang or keys.bind_marker in managed
        if gang:
            gang_entries.append(i)
        if binds_gangs:
            bind_entries.append(i)
        timeout = _seconds(e.get("httpTimeout", "5s"))
        if "filterVerb" in verbs:
            if gang:
                filters.append(i)
                if timeout is not None and timeout > FILTER_TIMEOUT_MAX:
                    out.append(
                        Problem(
                            f"{at}.httpTimeout",
                            f"{e.get('httpTimeout')} for a filter: kube-scheduler places one "
                            "pod at a time, and an extender that does not answer holds every "
                            f"pod's scheduling for that long (at most {FILTER_TIMEOUT_MAX:g}s); "
                            f"bind, which waits for the gang, belongs in an entry of its own "
                            f"({keys.bind_marker})",
                        )
                    )
            elif binds_gangs:
                out.append(
                    Problem(
                        f"{at}.filterVerb",
                        f"the entry managing {keys.gang_marker} filters gang members; a second "
                        "filter costs an exchange and holds the scheduling cycle as long as its "
                        "httpTimeout",
                    )
                )
        if "bindVerb" in verbs and binds_gangs:
            binders.append(i)
            if timeout is not None and timeout <= gang_wait_seconds:
                out.append(
                    Problem(
                        f"{at}.httpTimeout",
                        f"{e.get('httpTimeout')} is not longer than gang_wait_seconds "
                        f"({gang_wait_seconds:g} s): kube-scheduler gives up a member's bind "
                        "while it waits for its gang",
                    )
                )
        if not binds_gangs and ("bindVerb" in verbs or "filterVerb" in verbs):
            sent = [v for v in ("filterVerb", "bindVerb") if v in verbs]
            out.append(
                Problem(
                    f"{at}.{sent[0]}",
                    f"{' and '.join(sent)} sent for pods that are not gang members "
                    f"(managedResources {', '.join(sorted(managed))}): only "
                    f"{keys.gang_marker} pods need them; each costs an exchange",
                )
            )
        if "prioritizeVerb" in verbs and (every_pod or keys.score_marker in managed):
            scored = True
            if not e.get("weight"):
                out.append(Problem(f"{at}.weight", "must be > 0 with a prioritizeVerb"))
    if not gang_entries:
        out.append(
            Problem(
                "extenders",
                f"no entry manages {keys.gang_marker}: gang members would be placed and "
                "bound by kube-scheduler alone, one by one",
            )
        )
    elif not filters:
        out.append(
            Problem(
                f"extenders[{gang_entries[0]}].filterVerb",
                "missing: gang members would be placed without their reserved places",
            )
        )
    if bind_entries and not binders:
        # Where the bind belongs: the bind marker's entry, else the gang marker's.
        marked = [i for i, _, managed in ours if keys.bind_marker in managed]
        out.append(
            Problem(
                f"extenders[{(marked or bind_entries)[0]}].bindVerb",
                "missing: kube-scheduler would bind gang members one by one, not whole",
            )
        )
    if not scored:
        out.append(
            Problem(
                "extenders",
                f"no entry scores {keys.score_marker} pods (prioritizeVerb): their "
                "preferences would be ignored",
            )
        )
    client = config.get("clientConnection") or {}
    qps = (client.get("qps") or SCHEDULER_QPS) if isinstance(client, Mapping) else SCHEDULER_QPS
    if not _positive(qps):
        out.append(Problem("clientConnection.qps", f"{qps!r} is not a positive number"))
        qps = None
    binds = any(e.get("bindVerb") for _, e, _ in ours)
    if binds and extender_qps is not None and qps is not None and extender_qps < qps:
        out.append(
            Problem(
                "clientConnection.qps",
                f"{qps:g}, above the extender's --kube-qps {extender_qps:g}: the pods it binds "
                "are bound at its budget, not kube-scheduler's; give both the same",
            )
        )
    out.extend(_sampling(config))
    return out


def _sampling(config: Mapping[str, Any]) -> Iterator[Problem]:
    """No profile looks at every feasible node: said once, where the share is set. The pods
    the extender decides need one that does (deploy/'s <name>-all-nodes, where the marker
    policy moves them): kube-scheduler stops looking after a share of the feasible nodes, and
    a gang member's reserved node, or a preference's one node, may not be among those sent.
    The other profiles may sample (kube-scheduler's default): NodeResourcesFit finds a rare
    ephemeral resource whatever the share, since the share counts feasible nodes."""
    top = config.get("percentageOfNodesToScore")
    profiles = config.get("profiles") or [{}]
    if not isinstance(profiles, Sequence) or isinstance(profiles, str | bytes):
        profiles = [{}]
    own = [p.get("percentageOfNodesToScore") if isinstance(p, Mapping) else None for p in profiles]
    shares = [o if o is not None else top for o in own]
    if 100 in shares:
        return
    set_at = [i for i, o in enumerate(own) if o is not None]
    where = (
        f"profiles[{set_at[0]}].percentageOfNodesToScore" if set_at else "percentageOfNodesToScore"
    )
    pct = own[set_at[0]] if set_at else top
    yield Problem(
        where,
        f"{'adaptive' if pct in (None, 0) else pct}: no profile looks at every feasible node. "
        "kube-scheduler stops looking after a share of them, so a gang member's reserved node "
        "is often not among those it sends, and the member waits for a retry; the profile the "
        "extender's pods go to (deploy/'s <name>-all-nodes) needs 100",
    )


def _marker_prefix(keys: Keys) -> str:
    """`scheduling.<domain>/`: what every marker of the extender starts with."""
    return keys.gang_marker.rsplit("/", 1)[0] + "/"


def _misshapen(entries: Sequence[Any]) -> Iterator[Problem]:
    """The fields the checks read that are not of kube-scheduler's types: said, never a
    traceback, and an entry whose managedResources is not a list is not silently skipped."""
    for i, e in enumerate(entries):
        at = f"extenders[{i}]"
        if not isinstance(e, Mapping):
            yield Problem(at, "must be a mapping")
            continue
        managed = e.get("managedResources")
        if managed is not None and (
            isinstance(managed, str | bytes)
            or not isinstance(managed, Sequence)
            or not all(isinstance(m, Mapping) and isinstance(m.get("name"), str) for m in managed)
        ):
            yield Problem(f"{at}.managedResources", "must be a list of {name, ignoredByScheduler}")
        if "httpTimeout" in e and _seconds(e["httpTimeout"]) is None:
            yield Problem(f"{at}.httpTimeout", f"{e['httpTimeout']!r} is not a duration (15s)")


def _positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _seconds(text: object) -> float | None:
    """A Go duration ("15s", "1m30s", "500ms") in seconds; None if it is not one."""
    if not isinstance(text, str) or not _DURATION.match(text):
        return None
    return sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))
