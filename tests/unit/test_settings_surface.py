"""The settings' surface users know, pinned: every ESCHER_* environment variable and every
`escher-extender serve` flag, with what each sets.

deploy/, the Helm chart, the docs and users name these; the typed args they fill may move
(each feature's own, nested in Settings) but no name may change or go. Each variable and its
flag are checked to set the same thing, away from its default.
"""

from __future__ import annotations

import argparse
import os
from operator import attrgetter
from typing import Any

import pytest

from extender.cli import build_parser, settings_of
from extender.settings import Settings

ENV = [
    "ESCHER_AUTH_CACHE_SECONDS",
    "ESCHER_BIND_ANSWERS_PER_TURN",
    "ESCHER_BIND_IN_FLIGHT",
    "ESCHER_BODY_TIMEOUT_SECONDS",
    "ESCHER_DRA_DRIVER",
    "ESCHER_DRA_MAX_SLICES",
    "ESCHER_DRA_SKIP_NODE_OPERATIONS",
    "ESCHER_FILTERED_MAX_BYTES",
    "ESCHER_FILTERED_MAX_PODS",
    "ESCHER_GANG_BACKOFF_INITIAL_SECONDS",
    "ESCHER_GANG_BACKOFF_MAX_SECONDS",
    "ESCHER_GANG_EXPIRY_INTERVAL_SECONDS",
    "ESCHER_GANG_FILTER_PLAN_OFFLOAD_ABOVE",
    "ESCHER_GANG_GATE_COOLDOWN_SECONDS",
    "ESCHER_GANG_GATE_SWITCH",
    "ESCHER_GANG_GATHER_HOLD_SECONDS",
    "ESCHER_GANG_GATHER_LEAD_SECONDS",
    "ESCHER_GANG_LIFT_INTERVAL_SECONDS",
    "ESCHER_GANG_NOMINATE",
    "ESCHER_GANG_NOMINATE_DELAY_SECONDS",
    "ESCHER_GANG_PLAN_OFFLOAD_ABOVE",
    "ESCHER_GANG_TOPOLOGY",
    "ESCHER_GANG_WAIT_SECONDS",
    "ESCHER_GC_DEFER_FULL_SECONDS",
    "ESCHER_GC_FREEZE",
    "ESCHER_HEADER_TIMEOUT_SECONDS",
    "ESCHER_HOST",
    "ESCHER_IDENTITY",
    "ESCHER_IN_CLUSTER",
    "ESCHER_KUBECONFIG",
    "ESCHER_KUBERNETES_AUTH",
    "ESCHER_KUBE_BURST",
    "ESCHER_KUBE_QPS",
    "ESCHER_LEADER_ELECT",
    "ESCHER_LEASE_DURATION_SECONDS",
    "ESCHER_LEASE_NAME",
    "ESCHER_LEASE_NAMESPACE",
    "ESCHER_LOG_JSON",
    "ESCHER_LOG_LEVEL",
    "ESCHER_LOOP_WATCH_INTERVAL_SECONDS",
    "ESCHER_MAX_BODY_BYTES",
    "ESCHER_MAX_CONCURRENCY",
    "ESCHER_MAX_ESL_INSTANCES",
    "ESCHER_MAX_LEARNED_NODES",
    "ESCHER_MAX_PENDING_CONNECTIONS",
    "ESCHER_METRICS_AUTH",
    "ESCHER_MODE",
    "ESCHER_POLICY_OBJECTS",
    "ESCHER_POLICY_RESYNC_SECONDS",
    "ESCHER_PORT",
    "ESCHER_PREFERENCE_NOMINATE",
    "ESCHER_PREFERENCE_NOMINATE_DELAY_SECONDS",
    "ESCHER_PREFERENCE_NOMINATE_MAX_PODS",
    "ESCHER_RENEW_DEADLINE_SECONDS",
    "ESCHER_REQUEUE_MAX_PODS",
    "ESCHER_REQUEUE_WINDOW_SECONDS",
    "ESCHER_RESOURCE_DOMAIN",
    "ESCHER_RETRY_PERIOD_SECONDS",
    "ESCHER_TLS_CERT_FILE",
    "ESCHER_TLS_KEY_FILE",
    "ESCHER_TOKEN",
    "ESCHER_VERBS_CLIENT_CA_FILE",
    "ESCHER_VERBS_HOST",
    "ESCHER_VERBS_HTTP1_PORT",
    "ESCHER_VERBS_HTTP2",
    "ESCHER_VERBS_PLAIN",
    "ESCHER_VERBS_PORT",
    "ESCHER_VERBS_TLS_CERT_FILE",
    "ESCHER_VERBS_TLS_KEY_FILE",
    "ESCHER_WRITEBACK_BACKOFF_INITIAL_SECONDS",
    "ESCHER_WRITEBACK_BACKOFF_MAX_SECONDS",
    "ESCHER_WRITEBACK_COALESCE_SECONDS",
    "ESCHER_WRITEBACK_WAIT_SECONDS",
]

FLAGS = [
    "--auth-cache-seconds",
    "--bind-answers-per-turn",
    "--bind-in-flight",
    "--body-timeout-seconds",
    "--dra-driver",
    "--dra-max-slices",
    "--dra-skip-node-operations",
    "--filtered-max-bytes",
    "--filtered-max-pods",
    "--gang-backoff-initial-seconds",
    "--gang-backoff-max-seconds",
    "--gang-expiry-interval-seconds",
    "--gang-filter-plan-offload-above",
    "--gang-gate-cooldown-seconds",
    "--gang-gate-switch",
    "--gang-gather-hold-seconds",
    "--gang-gather-lead-seconds",
    "--gang-lift-interval-seconds",
    "--gang-nominate",
    "--gang-nominate-delay-seconds",
    "--gang-plan-offload-above",
    "--gang-topology",
    "--gang-wait-seconds",
    "--gc-defer-full-seconds",
    "--gc-freeze",
    "--header-timeout-seconds",
    "--host",
    "--identity",
    "--in-cluster",
    "--kube-burst",
    "--kube-qps",
    "--kubeconfig",
    "--kubernetes-auth",
    "--leader-elect",
    "--lease-duration-seconds",
    "--lease-name",
    "--lease-namespace",
    "--log-json",
    "--log-level",
    "--loop-watch-interval-seconds",
    "--max-body-bytes",
    "--max-concurrency",
    "--max-esl-instances",
    "--max-learned-nodes",
    "--max-pending-connections",
    "--metrics-auth",
    "--mode",
    "--no-dra-skip-node-operations",
    "--no-gang-nominate",
    "--no-gc-freeze",
    "--no-in-cluster",
    "--no-kubernetes-auth",
    "--no-leader-elect",
    "--no-log-json",
    "--no-metrics-auth",
    "--no-policy-objects",
    "--no-preference-nominate",
    "--no-verbs-http2",
    "--no-verbs-plain",
    "--policy-objects",
    "--policy-resync-seconds",
    "--preference-nominate",
    "--preference-nominate-delay-seconds",
    "--preference-nominate-max-pods",
    "--port",
    "--renew-deadline-seconds",
    "--requeue-max-pods",
    "--requeue-window-seconds",
    "--resource-domain",
    "--retry-period-seconds",
    "--tls-cert-file",
    "--tls-key-file",
    "--token",
    "--verbs-client-ca-file",
    "--verbs-host",
    "--verbs-http1-port",
    "--verbs-http2",
    "--verbs-plain",
    "--verbs-port",
    "--verbs-tls-cert-file",
    "--verbs-tls-key-file",
    "--writeback-backoff-initial-seconds",
    "--writeback-backoff-max-seconds",
    "--writeback-coalesce-seconds",
    "--writeback-wait-seconds",
]


# A value each setting can take away from its default where its type's next value will not
# do, and the settings it needs beside it (given the same way: all variables or all flags).
_TLS = {"tls_cert_file": "/c", "tls_key_file": "/k"}
SPECIAL: dict[str, tuple[str, dict[str, str]]] = {
    "host": ("0.0.0.0", {}),
    "tls_cert_file": ("/c", {"tls_key_file": "/k"}),
    "tls_key_file": ("/k", {"tls_cert_file": "/c"}),
    "verbs_port": ("9999", _TLS),
    "verbs_host": ("127.0.0.2", {}),
    "verbs_client_ca_file": ("/ca", {"verbs_port": "9999", **_TLS}),
    "verbs_tls_cert_file": ("/vc", {"verbs_tls_key_file": "/vk", "verbs_port": "9999"}),
    "verbs_tls_key_file": ("/vk", {"verbs_tls_cert_file": "/vc", "verbs_port": "9999"}),
    "verbs_plain": ("true", {"verbs_port": "9999"}),
    "verbs_http1_port": ("9998", {"verbs_port": "9999", **_TLS}),
    "mode": ("pure", {}),
    "dra_driver": ("dra.example.com", {}),
    "kubeconfig": ("/kubeconfig", {}),
    "resource_domain": ("example.com", {}),
    "token": ("secret", {}),
    "lease_name": ("lease", {}),
    "lease_namespace": ("elsewhere", {}),
    "identity": ("me", {}),
    "gang_gate_switch": ("escher-system/gate", {}),
    "gang_topology": ("zone=topology.kubernetes.io/zone", {}),
    "log_level": ("DEBUG", {}),
}


def serve_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices["serve"]
    return parser


def test_the_flags_are_todays() -> None:
    options = [o for a in serve_parser()._actions for o in a.option_strings]
    assert sorted(o for o in options if o != "-h") == sorted([*FLAGS, "--help"])


def test_every_variable_is_a_flag() -> None:
    names = {"ESCHER_" + f[2:].replace("-", "_").upper() for f in FLAGS if f[:5] != "--no-"}
    assert sorted(names) == ENV


def by_name(settings: dict[str, Any]) -> dict[str, Any]:
    """Each setting's value by its name, whether a field of Settings or of a feature's args
    in it (named there with or without its group's name)."""
    found: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            found.update({f"{key}_{k}": v for k, v in value.items()})
            found.update(value)
        else:
            found[key] = value
    return found


def away_from_default(name: str) -> tuple[str, dict[str, str]]:
    """A value of setting `name` that is not its default, and what it needs beside it."""
    if name in SPECIAL:
        return SPECIAL[name]
    value = by_name(Settings().model_dump())[name]
    if isinstance(value, bool):
        return ("false" if value else "true"), {}
    assert isinstance(value, int | float), name
    return str(value + 1), {}


def argv(given: dict[str, str]) -> list[str]:
    out: list[str] = []
    for name, value in given.items():
        flag = name.replace("_", "-")
        if value in ("true", "false"):
            out.append(f"--{flag}" if value == "true" else f"--no-{flag}")
        else:
            out += [f"--{flag}", value]
    return out


def from_env(given: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as m:
        for name, value in given.items():
            m.setenv(f"ESCHER_{name.upper()}", value)
        return Settings().model_dump()


@pytest.fixture(autouse=True)
def no_escher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in os.environ:
        if name.startswith("ESCHER_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("name", [e.removeprefix("ESCHER_").lower() for e in ENV])
def test_each_variable_and_its_flag_set_the_same(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    value, beside = away_from_default(name)
    given = {name: value, **beside}
    by_env = from_env(given, monkeypatch)
    by_flags = settings_of(build_parser().parse_args(["serve", *argv(given)])).model_dump()
    assert by_env == by_flags
    assert by_name(by_env)[name] != by_name(Settings().model_dump())[name], name


@pytest.mark.parametrize(
    ("name", "value", "where", "expected"),
    [
        ("gang_wait_seconds", "5", "gang.wait_seconds", 5.0),
        ("gang_nominate", "false", "gang.nominate", False),
        ("preference_nominate", "false", "preference.nominate", False),
        ("gang_gate_switch", "ns/gate", "gang.gate_switch", "ns/gate"),
        ("writeback_coalesce_seconds", "0.5", "writeback.coalesce_seconds", 0.5),
        ("writeback_wait_seconds", "3", "writeback.wait_seconds", 3.0),
        ("policy_objects", "false", "policy.objects", False),
        ("policy_resync_seconds", "7", "policy.resync_seconds", 7.0),
        ("leader_elect", "true", "leader_election.leader_elect", True),
        ("lease_name", "mine", "leader_election.lease_name", "mine"),
        ("retry_period_seconds", "1", "leader_election.retry_period_seconds", 1.0),
        ("port", "9000", "listen.port", 9000),
        ("verbs_http2", "false", "listen.verbs_http2", False),
        ("max_body_bytes", "1024", "listen.max_body_bytes", 1024),
        ("dra_max_slices", "4", "dra.max_slices", 4),
        ("dra_skip_node_operations", "true", "dra.skip_node_operations", True),
        ("kube_qps", "7", "kube_qps", 7.0),
    ],
)
def test_a_variable_and_its_flag_reach_their_features_args(
    name: str, value: str, where: str, expected: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_flag = settings_of(build_parser().parse_args(["serve", *argv({name: value})]))
    monkeypatch.setenv(f"ESCHER_{name.upper()}", value)
    assert attrgetter(where)(Settings()) == attrgetter(where)(by_flag) == expected
