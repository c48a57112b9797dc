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
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    mode). Each entry of the extender goes through `_ENTRY_CHECKS`, then all of them through
    `_ENTRIES_CHECKS`."""
    entries = config.get("extenders") or []
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        return [Problem("extenders", "must be a list")]
    out = list(_misshapen(entries))
    ours = [
        _Entry.of(i, e, managed, keys, gang_wait_seconds)
        for i, e, managed in extender_entries(config, keys)
    ]
    if not ours:
        return out
    for entry in ours:
        for check in _ENTRY_CHECKS:
            out.extend(check(entry))
    for whole in _ENTRIES_CHECKS:
        out.extend(whole(ours))
    out.extend(_budget(config, ours, extender_qps))
    out.extend(_sampling(config))
    return out


@dataclass(frozen=True, slots=True)
class _Entry:
    """One of the extender's entries, with what the checks ask of it."""

    index: int
    entry: Mapping[str, Any]
    managed: set[str]  # the names in its managedResources
    keys: Keys
    gang_wait_seconds: float
    verbs: set[str]  # the VERBS it sets
    every_pod: bool  # no managedResources: every pod is sent to it
    gang: bool  # gang members reach it for filter
    binds_gangs: bool  # ... for bind
    timeout: float | None  # its httpTimeout, None if not a duration

    @classmethod
    def of(
        cls, i: int, e: Mapping[str, Any], managed: set[str], keys: Keys, gang_wait: float
    ) -> _Entry:
        gang = not managed or keys.gang_marker in managed
        return cls(
            i,
            e,
            managed,
            keys,
            gang_wait,
            verbs={v for v in VERBS if e.get(v)},
            every_pod=not managed,
            gang=gang,
            binds_gangs=gang or keys.bind_marker in managed,
            timeout=_seconds(e.get("httpTimeout", "5s")),
        )

    @property
    def at(self) -> str:
        return f"extenders[{self.index}]"

    @property
    def filters_gangs(self) -> bool:
        return "filterVerb" in self.verbs and self.gang

    @property
    def binds_gang_members(self) -> bool:
        return "bindVerb" in self.verbs and self.binds_gangs

    @property
    def scores(self) -> bool:
        """Whether it scores the pods with preferences."""
        return "prioritizeVerb" in self.verbs and (
            self.every_pod or self.keys.score_marker in self.managed
        )


# ---- the checks of one entry, in the order their problems are said ---------------------------


def _unknown_markers(x: _Entry) -> Iterator[Problem]:
    domain = _marker_prefix(x.keys)
    for name in sorted(x.managed):
        if name.startswith(domain) and name not in x.keys.markers:
            yield Problem(
                f"{x.at}.managedResources",
                f"{name} is no marker of this extender (its markers are "
                f"{', '.join(x.keys.markers)}): the admission policy does not add it, "
                "so the entry is sent no pod (an old marker, or another "
                "--resource-domain?)",
            )


def _markers_not_ignored(x: _Entry) -> Iterator[Problem]:
    markers = set(x.keys.markers)
    for m in x.entry.get("managedResources") or []:
        if isinstance(m, Mapping) and m.get("name") in markers and not m.get("ignoredByScheduler"):
            yield Problem(
                f"{x.at}.managedResources",
                f"{m.get('name')} needs ignoredByScheduler: true: NodeResourcesFit "
                "would refuse a node the extender has not written the marker to yet",
            )


def _ignorable(x: _Entry) -> Iterator[Problem]:
    if x.entry.get("ignorable"):
        yield Problem(
            f"{x.at}.ignorable",
            "must be false: kube-scheduler would place the pods without the "
            "extender's say whenever it does not answer (gang members without their "
            "barrier, over a reservation)",
        )


def _filter_timeout(x: _Entry) -> Iterator[Problem]:
    if x.filters_gangs and x.timeout is not None and x.timeout > FILTER_TIMEOUT_MAX:
        yield Problem(
            f"{x.at}.httpTimeout",
            f"{x.entry.get('httpTimeout')} for a filter: kube-scheduler places one "
            "pod at a time, and an extender that does not answer holds every "
            f"pod's scheduling for that long (at most {FILTER_TIMEOUT_MAX:g}s); "
            f"bind, which waits for the gang, belongs in an entry of its own "
            f"({x.keys.bind_marker})",
        )


def _second_filter(x: _Entry) -> Iterator[Problem]:
    if "filterVerb" in x.verbs and not x.gang and x.binds_gangs:
        yield Problem(
            f"{x.at}.filterVerb",
            f"the entry managing {x.keys.gang_marker} filters gang members; a second "
            "filter costs an exchange and holds the scheduling cycle as long as its "
            "httpTimeout",
        )


def _bind_timeout(x: _Entry) -> Iterator[Problem]:
    if x.binds_gang_members and x.timeout is not None and x.timeout <= x.gang_wait_seconds:
        yield Problem(
            f"{x.at}.httpTimeout",
            f"{x.entry.get('httpTimeout')} is not longer than gang_wait_seconds "
            f"({x.gang_wait_seconds:g} s): kube-scheduler gives up a member's bind "
            "while it waits for its gang",
        )


def _verbs_for_others(x: _Entry) -> Iterator[Problem]:
    if not x.binds_gangs and ("bindVerb" in x.verbs or "filterVerb" in x.verbs):
        sent = [v for v in ("filterVerb", "bindVerb") if v in x.verbs]
        yield Problem(
            f"{x.at}.{sent[0]}",
            f"{' and '.join(sent)} sent for pods that are not gang members "
            f"(managedResources {', '.join(sorted(x.managed))}): only "
            f"{x.keys.gang_marker} pods need them; each costs an exchange",
        )


def _weight(x: _Entry) -> Iterator[Problem]:
    if x.scores and not x.entry.get("weight"):
        yield Problem(f"{x.at}.weight", "must be > 0 with a prioritizeVerb")


_ENTRY_CHECKS: tuple[Callable[[_Entry], Iterator[Problem]], ...] = (
    _unknown_markers,
    _markers_not_ignored,
    _ignorable,
    _filter_timeout,
    _second_filter,
    _bind_timeout,
    _verbs_for_others,
    _weight,
)


# ---- the checks of all the entries together -------------------------------------------------


def _gang_filter(ours: Sequence[_Entry]) -> Iterator[Problem]:
    keys = ours[0].keys
    gang_entries = [x for x in ours if x.gang]
    if not gang_entries:
        yield Problem(
            "extenders",
            f"no entry manages {keys.gang_marker}: gang members would be placed and "
            "bound by kube-scheduler alone, one by one",
        )
    elif not any(x.filters_gangs for x in ours):
        yield Problem(
            f"{gang_entries[0].at}.filterVerb",
            "missing: gang members would be placed without their reserved places",
        )


def _gang_bind(ours: Sequence[_Entry]) -> Iterator[Problem]:
    bind_entries = [x for x in ours if x.binds_gangs]
    if bind_entries and not any(x.binds_gang_members for x in ours):
        # Where the bind belongs: the bind marker's entry, else the gang marker's.
        marked = [x for x in ours if x.keys.bind_marker in x.managed]
        yield Problem(
            f"{(marked or bind_entries)[0].at}.bindVerb",
            "missing: kube-scheduler would bind gang members one by one, not whole",
        )


def _scored(ours: Sequence[_Entry]) -> Iterator[Problem]:
    if not any(x.scores for x in ours):
        yield Problem(
            "extenders",
            f"no entry scores {ours[0].keys.score_marker} pods (prioritizeVerb): their "
            "preferences would be ignored",
        )


_ENTRIES_CHECKS: tuple[Callable[[Sequence[_Entry]], Iterator[Problem]], ...] = (
    _gang_filter,
    _gang_bind,
    _scored,
)


def _budget(
    config: Mapping[str, Any], ours: Sequence[_Entry], extender_qps: float | None
) -> Iterator[Problem]:
    """kube-scheduler's API budget: a number, and not above the extender's when it binds."""
    client = config.get("clientConnection") or {}
    qps = (client.get("qps") or SCHEDULER_QPS) if isinstance(client, Mapping) else SCHEDULER_QPS
    if not _positive(qps):
        yield Problem("clientConnection.qps", f"{qps!r} is not a positive number")
        return
    binds = any("bindVerb" in x.verbs for x in ours)
    if binds and extender_qps is not None and extender_qps < qps:
        yield Problem(
            "clientConnection.qps",
            f"{qps:g}, above the extender's --kube-qps {extender_qps:g}: the pods it binds "
            "are bound at its budget, not kube-scheduler's; give both the same",
        )


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
