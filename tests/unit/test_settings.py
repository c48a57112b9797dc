"""Settings: a value that cannot work is refused at start, naming the setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from extender.settings import FLAT, Settings

# Every duration, and the API budget: infinity would be a hang or no limit, NaN no order.
FINITE = [*sorted(n for n in FLAT if n.endswith("_seconds")), "kube_qps"]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "inf", "NaN"])
@pytest.mark.parametrize("name", FINITE)
def test_durations_and_the_api_budget_must_be_finite(name: str, value: object) -> None:
    with pytest.raises(ValidationError) as e:
        Settings(**{name: value})  # type: ignore[arg-type]
    assert [err["loc"] for err in e.value.errors()] == [FLAT[name]]


def test_there_are_durations_to_check_and_the_defaults_are_valid() -> None:
    assert len(FINITE) > 10
    Settings()


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),  # no switch written
        ("escher-system/escher-gang-gate", True),
        ("default/gate.v1", True),
        ("escher-gang-gate", False),  # no namespace
        ("escher-system/", False),
        ("/escher-gang-gate", False),
        ("Escher/gate", False),  # not a DNS label
        ("a/b/c", False),
        ("a b/c", False),
        ("a/" + "b" * 320, False),
        (5, False),
        (None, False),
    ],
)
def test_the_gang_gate_switch_is_a_config_map_namespace_and_name(value: object, ok: bool) -> None:
    if ok:
        assert Settings(gang_gate_switch=value).gang.gate_switch == value  # type: ignore[arg-type]
        return
    with pytest.raises(ValidationError) as e:
        Settings(gang_gate_switch=value)  # type: ignore[arg-type]
    assert [err["loc"] for err in e.value.errors()] == [("gang", "gate_switch")]


def test_the_gang_gate_cool_down_may_not_be_negative() -> None:
    with pytest.raises(ValidationError) as e:
        Settings(gang_gate_cooldown_seconds=-1)
    assert [err["loc"] for err in e.value.errors()] == [("gang", "gate_cooldown_seconds")]


@pytest.mark.parametrize(
    ("mode", "kube", "binds"),
    [("standalone", False, False), ("pure", True, False), ("extender", True, True)],
)
def test_one_mode_says_what_the_service_talks_to_and_does(
    mode: str, kube: bool, binds: bool
) -> None:
    s = Settings(mode=mode)  # type: ignore[arg-type]
    assert (s.kube, s.binds) == (kube, binds)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mode": "both"}, "Input should be 'standalone', 'pure', 'extender' or 'dra'"),
        ({"mode": "standalone", "leader_elect": True}, "leader_elect needs the Kubernetes API"),
        ({"mode": "standalone", "kubernetes_auth": True}, "kubernetes_auth needs the Kubernetes"),
    ],
)
def test_a_mode_that_cannot_work_is_refused_naming_it(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(**overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "verbs_host", "plain"),
    [
        ("127.0.0.1", None, True),  # the verbs listen where the service does: loopback
        ("0.0.0.0", "127.0.0.1", True),  # the sidecar: policy API on the network, verbs not
        ("0.0.0.0", "localhost", True),
        ("0.0.0.0", "::1", True),
        ("0.0.0.0", "127.8.9.10", True),
        ("0.0.0.0", None, False),
        ("127.0.0.1", "0.0.0.0", False),
        ("127.0.0.1", "::", False),
        ("127.0.0.1", "10.0.0.1", False),
        ("127.0.0.1", "localhost.example.com", False),
    ],
)
def test_plain_verbs_only_on_loopback(host: str, verbs_host: str | None, plain: bool) -> None:
    """Without TLS anyone who reaches the verbs can have /bind create Bindings: only the
    network namespace's own loopback (a container beside kube-scheduler in its pod)."""

    def settings() -> Settings:
        return Settings(host=host, verbs_host=verbs_host, verbs_port=9999, verbs_plain=True)

    if plain:
        assert settings().listen.verbs_address() == (verbs_host or host)
    else:
        with pytest.raises(ValidationError, match="verbs_plain serves the verbs without TLS"):
            settings()


_TLS = {"tls_cert_file": "/c", "tls_key_file": "/k"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "verbs_plain needs verbs_port"),
        ({"verbs_port": 9, "verbs_client_ca_file": "/ca.crt"}, "serves no TLS"),
        ({"verbs_port": 9, "verbs_tls_cert_file": "/c", "verbs_tls_key_file": "/k"}, "no TLS"),
    ],
)
def test_plain_verbs_have_a_port_and_no_tls(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(verbs_plain=True, **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "needs verbs_port over TLS with verbs_http2 on"),
        ({"verbs_port": 9, "verbs_plain": True}, "needs verbs_port over TLS"),
        ({"verbs_port": 9, **_TLS, "verbs_http2": False}, "needs verbs_port over TLS"),
        ({"verbs_port": 9, **_TLS, "port": 7}, "must differ from port and verbs_port"),
        ({"verbs_port": 7, **_TLS}, "must differ from port and verbs_port"),
        ({"verbs_port": 9, **_TLS}, None),
    ],
)
def test_the_http1_verbs_listener_sits_beside_the_http2_one(
    overrides: dict[str, object], message: str | None
) -> None:
    def settings() -> Settings:
        return Settings(verbs_http1_port=7, **overrides)  # type: ignore[arg-type]

    if message is None:
        assert settings().listen.verbs_http1_port == 7
    else:
        with pytest.raises(ValidationError, match=message):
            settings()


def test_plain_verbs_take_no_certificate_even_when_the_policy_api_has_one() -> None:
    # The sidecar: the policy API over HTTPS for the Service, the verbs plain on loopback.
    s = Settings(
        host="0.0.0.0", tls_cert_file="/c", tls_key_file="/k", verbs_host="127.0.0.1",
        verbs_port=9, verbs_plain=True,
    )  # fmt: skip
    assert s.listen.verbs_certificate() is None and s.listen.tls_cert_file is not None


@pytest.mark.parametrize("value", [0, -1, 1025, "abc", 1.5, None, "1e400"])
def test_the_answers_a_turn_are_a_whole_number_from_1_to_1024(value: object) -> None:
    with pytest.raises(ValidationError) as e:
        Settings(bind_answers_per_turn=value)  # type: ignore[arg-type]
    assert [err["loc"] for err in e.value.errors()] == [("scheduling", "bind_answers_per_turn")]
    assert Settings(bind_answers_per_turn=1).scheduling.bind_answers_per_turn == 1
