"""Rendering of the local control plane's files and command lines
(escher_harness.localcluster.config)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from escher_harness.localcluster import config
from escher_harness.localcluster.config import Mode, Scope
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.operators import GANG_SCHEDULER_NAME
from escher_harness.localcluster.pki import Pki
from extender.core.pod import Keys

KUBECONFIG = Path("/c/kubeconfig")
URL = "http://127.0.0.1:9999"


def test_kubeconfig_uses_the_token_and_skips_tls_verification() -> None:
    rendered = yaml.safe_load(config.render_kubeconfig("https://127.0.0.1:6443", "s3cret"))
    current = rendered["current-context"]
    context = next(c["context"] for c in rendered["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in rendered["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in rendered["users"] if u["name"] == context["user"])
    assert cluster == {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}
    assert user == {"token": "s3cret"}


def test_tokens_csv() -> None:
    assert config.render_tokens_csv("abc") == 'abc,admin,admin,"system:masters"\n'


def test_default_scheduler_config() -> None:
    rendered = config.scheduler_config(
        "none", user_config=None, kubeconfig=KUBECONFIG, extender_url=None
    )
    assert rendered == {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(KUBECONFIG)},
        "leaderElection": {"leaderElect": False},
    }


def test_extender_mode_template() -> None:
    rendered = config.scheduler_config(
        "extender", user_config=None, kubeconfig=KUBECONFIG, extender_url=URL
    )
    assert rendered["clientConnection"]["kubeconfig"] == str(KUBECONFIG)
    assert rendered["leaderElection"] == {"leaderElect": False}
    # Every feasible node is offered to the extender, and NodeResourcesFit sees the domain.
    assert rendered["percentageOfNodesToScore"] == 100
    (profile,) = rendered["profiles"]
    assert profile["schedulerName"] == "default-scheduler"
    assert "pluginConfig" not in profile
    extender, binder = rendered["extenders"]
    assert extender == {
        "urlPrefix": URL,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "preemptVerb": "preempt",
        "weight": 1,
        "nodeCacheCapable": True,
        "httpTimeout": "5s",
        "ignorable": False,
    }
    # Bind in an entry of its own: a gang member waits there for its gang, far longer than
    # a filter may hold the scheduling cycle.
    assert binder == {
        "urlPrefix": URL,
        "bindVerb": "bind",
        "httpTimeout": "195s",
        "ignorable": False,
    }
    # Every pod must reach the extender.
    assert "managedResources" not in extender and "managedResources" not in binder


def test_pure_mode_template_has_no_extender() -> None:
    rendered = config.scheduler_config(
        "pure", user_config=None, kubeconfig=KUBECONFIG, extender_url=URL
    )
    assert "extenders" not in rendered
    assert [p["schedulerName"] for p in rendered["profiles"]] == ["default-scheduler"]
    assert rendered["leaderElection"] == {"leaderElect": False}


def test_user_config_is_kept_but_kubeconfig_and_leader_election_are_overridden() -> None:
    user: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": "/elsewhere", "qps": 10},
        "leaderElection": {"leaderElect": True, "resourceName": "x"},
        "percentageOfNodesToScore": 50,
        "extenders": [
            {"urlPrefix": config.EXTENDER_URL_PLACEHOLDER, "filterVerb": "filter"},
            {"urlPrefix": "http://other:1", "filterVerb": "filter"},
        ],
    }
    rendered = config.scheduler_config(
        "extender", user_config=user, kubeconfig=KUBECONFIG, extender_url=URL
    )
    assert rendered["clientConnection"] == {"kubeconfig": str(KUBECONFIG), "qps": 10}
    assert rendered["leaderElection"] == {"leaderElect": False, "resourceName": "x"}
    assert rendered["percentageOfNodesToScore"] == 50
    assert [e["urlPrefix"] for e in rendered["extenders"]] == [URL, "http://other:1"]
    assert user["extenders"][0]["urlPrefix"] == config.EXTENDER_URL_PLACEHOLDER  # not mutated


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [b", "is not valid YAML"),
        ("- a\n- b\n", "is not a YAML mapping"),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
            "apiVersion is 'kubescheduler.config.k8s.io/v1beta3', expected",
        ),
        ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: Policy\n", "kind is 'Policy'"),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "profiles: {schedulerName: x}\n",
            "profiles must be a list",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "clientConnection: [1]\n",
            "clientConnection must be a mapping",
        ),
    ],
    ids=["yaml", "list", "api-version", "kind", "profiles", "client-connection"],
)
def test_invalid_scheduler_config_is_refused_early(text: str, message: str) -> None:
    with pytest.raises(ClusterError, match=r"scheduler config bad\.yaml") as e:
        config.parse_scheduler_config(text, "bad.yaml")
    assert message in str(e.value)


def test_unreadable_scheduler_config(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"cannot read scheduler config .*missing\.yaml"):
        config.load_scheduler_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("profiles", "name"),
    [
        (None, "default-scheduler"),
        ([{}], "default-scheduler"),
        ([{"schedulerName": "a"}, {"schedulerName": "default-scheduler"}], "default-scheduler"),
        ([{"schedulerName": "mine"}], "mine"),
    ],
)
def test_scheduler_name(profiles: list[dict[str, str]] | None, name: str) -> None:
    assert config.scheduler_name({"profiles": profiles}) == name


def test_etcd_command() -> None:
    command = config.etcd_command(
        Path("/b/etcd"), data_dir=Path("/d/etcd"), client_port=1, peer_port=2
    )
    assert command[0] == "/b/etcd"
    assert {
        "--data-dir=/d/etcd",
        "--listen-client-urls=http://127.0.0.1:1",
        "--advertise-client-urls=http://127.0.0.1:1",
        "--listen-peer-urls=http://127.0.0.1:2",
        "--initial-cluster=escher=http://127.0.0.1:2",
    } <= set(command)


@pytest.mark.parametrize(
    ("gates", "runtime", "extra"),
    [
        ({}, {}, set()),
        (
            {"B": False, "A": True},
            {"scheduling.k8s.io/v1alpha1": "true"},
            {"--feature-gates=A=true,B=false", "--runtime-config=scheduling.k8s.io/v1alpha1=true"},
        ),
    ],
    ids=["plain", "gates"],
)
def test_apiserver_command(
    gates: dict[str, bool], runtime: dict[str, str], extra: set[str]
) -> None:
    command = config.apiserver_command(
        Path("/b/kube-apiserver"),
        etcd_port=1,
        port=2,
        cert_dir=Path("/d/certs"),
        tokens=Path("/d/tokens.csv"),
        sa_key=Path("/d/sa.key"),
        feature_gates=gates,
        runtime_config=runtime,
    )
    assert command[0] == "/b/kube-apiserver"
    base = {
        "--etcd-servers=http://127.0.0.1:1",
        "--bind-address=127.0.0.1",
        "--secure-port=2",
        "--cert-dir=/d/certs",
        "--token-auth-file=/d/tokens.csv",
        "--authorization-mode=RBAC",
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--service-account-key-file=/d/sa.key",
        "--service-account-signing-key-file=/d/sa.key",
    }
    assert base | extra <= set(command)
    assert not any(
        a.startswith(("--feature-gates", "--runtime-config")) for a in set(command) - extra
    )


def test_scheduler_command() -> None:
    command = config.scheduler_command(
        Path("/b/kube-scheduler"), config=Path("/d/s.yaml"), port=3, feature_gates={"X": True}
    )
    assert command == [
        "/b/kube-scheduler",
        "--config=/d/s.yaml",
        "--bind-address=127.0.0.1",
        "--secure-port=3",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--feature-gates=X=true",
    ]


def test_extender_command() -> None:
    command = config.extender_command(
        port=4, kubeconfig=KUBECONFIG, mode="pure", token="t", domain="example.com"
    )
    assert command == [
        sys.executable,
        "-P",
        "-m",
        "extender",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "4",
        "--kubeconfig",
        str(KUBECONFIG),
        "--mode",
        "pure",
        "--token",
        "t",
        "--resource-domain",
        "example.com",
    ]


def test_a_replica_competes_for_the_lease_under_its_own_name() -> None:
    alone = config.extender_command(port=4, kubeconfig=KUBECONFIG, mode="extender", token="t")
    replica = config.extender_command(
        port=4, kubeconfig=KUBECONFIG, mode="extender", token="t", identity="extender-1"
    )
    assert "--leader-elect" not in alone
    assert replica[: len(alone)] == alone
    assert replica[len(alone) :] == [
        "--leader-elect",
        "--identity", "extender-1",
        "--lease-name", "escher-extender",
        "--lease-namespace", "kube-system",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("times", "env"),
    [
        (
            config.LeaseTimes(),  # kube-scheduler's defaults
            {"DURATION": "15", "RENEW_DEADLINE": "10", "RETRY_PERIOD": "2"},
        ),
        (
            config.LeaseTimes(duration=4, renew_deadline=3, retry_period=0.5),
            {"DURATION": "4", "RENEW_DEADLINE": "3", "RETRY_PERIOD": "0.5"},
        ),
    ],
    ids=["defaults", "short"],
)
def test_lease_times_reach_the_replicas_as_settings(
    times: config.LeaseTimes, env: dict[str, str]
) -> None:
    prefix = {"DURATION": "ESCHER_LEASE_DURATION_SECONDS"}
    want = {prefix.get(k, f"ESCHER_{k}_SECONDS"): v for k, v in env.items()}
    assert times.environment() == want


@pytest.mark.parametrize(
    ("duration", "renew", "retry"),
    [(10, 10, 2), (10, 12, 2), (10, 5, 5), (10, 5, 0)],
    ids=["renew-equals-lease", "renew-above-lease", "retry-equals-renew", "retry-zero"],
)
def test_lease_times_that_cannot_fence_are_refused(
    duration: float, renew: float, retry: float
) -> None:
    with pytest.raises(ClusterError, match="0 < retry_period < renew_deadline < duration"):
        config.LeaseTimes(duration=duration, renew_deadline=renew, retry_period=retry)


def test_service_proxy_command() -> None:
    assert config.service_proxy_command(ports=[9], backends=[[10], [11]], poll=0.2) == [
        sys.executable, "-m", "escher_harness.localcluster.serviceproxy",
        "--poll", "0.2", "--port", "9",
        "--backend", "127.0.0.1:10", "--backend", "127.0.0.1:11",
    ]  # fmt: skip
    # A second Service port (the verbs'): each replica names its port for it.
    assert config.service_proxy_command(ports=[9, 19], backends=[[10, 20]], poll=1)[3:] == [
        "--poll", "1", "--port", "9", "--port", "19", "--backend", "127.0.0.1:10,20",
    ]  # fmt: skip


PKI = Pki(
    *(Path(f"/pki/{n}") for n in ("ca", "ca.key", "tls", "tls.key", "c", "c.key", "r", "r.key"))
)


def test_with_verbs_tls_kube_scheduler_calls_the_extender_over_mutual_tls() -> None:
    rendered = config.scheduler_config(
        "extender",
        user_config=None,
        kubeconfig=KUBECONFIG,
        extender_url="https://127.0.0.1:7",
        verbs_tls=PKI,
    )
    for extender in rendered["extenders"]:
        assert extender["urlPrefix"] == "https://127.0.0.1:7" and extender["enableHTTPS"] is True
        assert extender["tlsConfig"] == {
            "caFile": "/pki/ca",
            "certFile": "/pki/c",
            "keyFile": "/pki/c.key",
        }
    # The extender serves the verbs there alone, requiring the certificate the CA signed.
    command = config.extender_command(
        port=4, kubeconfig=KUBECONFIG, mode="extender", token="t", verbs_port=7, verbs_tls=PKI
    )
    assert command[-8:] == [
        "--verbs-port", "7", "--verbs-tls-cert-file", "/pki/tls",
        "--verbs-tls-key-file", "/pki/tls.key", "--verbs-client-ca-file", "/pki/ca",
    ]  # fmt: skip


def verbs_of(extender: dict[str, object]) -> set[str]:
    return {k for k in extender if k.endswith("Verb")}


@pytest.mark.parametrize(
    ("domain", "gang", "bind", "score"),
    [
        ("escher.io", "scheduling.escher.io/gang", "scheduling.escher.io/bind",
         "scheduling.escher.io/score"),
        ("example.com", "scheduling.example.com/gang", "scheduling.example.com/bind",
         "scheduling.example.com/score"),
    ],
)  # fmt: skip
def test_split_sends_each_exchange_only_to_the_pods_marked_for_it(
    domain: str, gang: str, bind: str, score: str
) -> None:
    rendered = config.scheduler_config(
        "extender",
        user_config=None,
        kubeconfig=KUBECONFIG,
        extender_url="http://127.0.0.1:7",
        split=domain,
    )
    entries = rendered["extenders"]
    assert [verbs_of(e) for e in entries] == [
        {"filterVerb", "preemptVerb"},
        {"bindVerb"},
        {"prioritizeVerb"},
    ]
    assert [e["managedResources"] for e in entries] == [
        [{"name": gang, "ignoredByScheduler": True}],
        [{"name": bind, "ignoredByScheduler": True}],
        [{"name": score, "ignoredByScheduler": True}],
    ]
    assert all(e["urlPrefix"] == "http://127.0.0.1:7" and e["ignorable"] is False for e in entries)
    assert [e["managedResources"][0]["name"] for e in entries] == list(
        Keys.for_domain(domain).markers
    )


@pytest.mark.parametrize(
    ("http1_url", "filter_and_score"),
    [("https://127.0.0.1:8", "https://127.0.0.1:8"), (None, "https://127.0.0.1:7")],
    ids=["http1-listener", "one-listener"],
)
def test_filter_and_prioritize_go_to_the_http1_listener_and_bind_stays(
    http1_url: str | None, filter_and_score: str
) -> None:
    """The entries called one pod at a time take the HTTP/1.1 listener when there is one;
    bind, whose held gang members share an HTTP/2 connection, keeps the verbs URL."""
    rendered = config.scheduler_config(
        "extender", user_config=None, kubeconfig=KUBECONFIG, extender_url="https://127.0.0.1:7",
        verbs_tls=PKI, split="escher.io", http1_url=http1_url,
    )  # fmt: skip
    by_verb = {verb: e for e in rendered["extenders"] for verb in verbs_of(e)}
    assert by_verb["filterVerb"]["urlPrefix"] == filter_and_score
    assert by_verb["prioritizeVerb"]["urlPrefix"] == filter_and_score
    assert by_verb["bindVerb"]["urlPrefix"] == "https://127.0.0.1:7"
    assert all(e["enableHTTPS"] and e["tlsConfig"]["caFile"] == "/pki/ca" for e in by_verb.values())


def test_the_http1_listener_is_one_more_argument_beside_the_verbs_port() -> None:
    command = config.extender_command(
        port=4, kubeconfig=KUBECONFIG, mode="extender", token="t", verbs_port=7, verbs_tls=PKI,
        verbs_http1_port=8,
    )  # fmt: skip
    assert command[-2:] == ["--verbs-http1-port", "8"]
    assert command[command.index("--verbs-port") + 1] == "7"


def test_without_split_every_pod_gets_every_exchange() -> None:
    rendered = config.scheduler_config(
        "extender", user_config=None, kubeconfig=KUBECONFIG, extender_url="http://127.0.0.1:7"
    )
    extender, binder = rendered["extenders"]
    assert verbs_of(extender) | verbs_of(binder) == {
        "filterVerb",
        "prioritizeVerb",
        "preemptVerb",
        "bindVerb",
    }
    assert "managedResources" not in extender and "managedResources" not in binder


@pytest.mark.parametrize(
    ("mode", "scope", "split"),
    [
        ("extender", "split", True),
        ("extender", "every-pod", False),
        # The default scope is only how kube-scheduler calls an extender: no other mode has one.
        ("pure", "split", False),
        ("none", "split", False),
    ],
)
def test_mode_extender_is_split_unless_told_every_pod(
    mode: Mode, scope: Scope, split: bool, tmp_path: Path
) -> None:
    from escher_harness.localcluster import ClusterSpec

    assert ClusterSpec(dir=tmp_path, mode=mode, scope=scope).split is split
    assert ClusterSpec(dir=tmp_path, mode=mode).split is (mode == "extender")


def test_only_extender_mode_sends_every_pod(tmp_path: Path) -> None:
    from escher_harness.localcluster import ClusterSpec

    with pytest.raises(ClusterError, match=r"scope every-pod .* needs mode extender"):
        ClusterSpec(dir=tmp_path, mode="pure", scope="every-pod")
    with pytest.raises(ClusterError, match=r"scope 'some' is not one of split, every-pod"):
        ClusterSpec(dir=tmp_path, mode="extender", scope="some")  # type: ignore[arg-type]


def test_without_verbs_tls_the_verbs_have_a_plain_listener_of_their_own() -> None:
    # deploy/'s sidecar layout: plain HTTP on loopback, still not on the policy API's port.
    command = config.extender_command(
        port=4, kubeconfig=KUBECONFIG, mode="extender", token="t", verbs_port=7
    )
    assert command[-3:] == ["--verbs-port", "7", "--verbs-plain"]
    assert command[command.index("--host") + 1] == "127.0.0.1"


def test_the_verbs_can_be_http1_over_mutual_tls(tmp_path: Path) -> None:
    """What HTTP/2 costs the exchanges that hold no call open (bench extender's
    extender-split-h1): the same mutual TLS, uvicorn's HTTP/1.1."""
    from escher_harness.localcluster import ClusterSpec

    command = config.extender_command(
        port=4, kubeconfig=KUBECONFIG, mode="extender", token="t", verbs_port=7, verbs_tls=PKI,
        verbs_http2=False,
    )  # fmt: skip
    assert command[-9:] == [
        "--verbs-port", "7", "--verbs-tls-cert-file", "/pki/tls",
        "--verbs-tls-key-file", "/pki/tls.key", "--verbs-client-ca-file", "/pki/ca",
        "--no-verbs-http2",
    ]  # fmt: skip
    for listener in ({"verbs_http2": False}, {"verbs_http1": False}):
        with pytest.raises(ClusterError, match="verbs_http1 are the verbs' listeners"):
            ClusterSpec(dir=tmp_path, mode="pure", **listener)  # type: ignore[arg-type]


@pytest.mark.parametrize("module", ["markers", "gangate"])
def test_a_local_clusters_policies_name_its_own_profiles(module: str) -> None:
    """deploy/'s policies, as a local cluster runs them: escher-scheduler and
    escher-scheduler-all-nodes become the cluster's profile and the split template's second
    profile, which looks at every feasible node."""
    from escher_harness.localcluster import gangate, markers

    build = {
        "markers": lambda: markers.manifests("default-scheduler", "escher.io"),
        "gangate": lambda: gangate.manifests("default-scheduler"),
    }[module]
    [policy] = [m.body for m in build() if m.body["kind"] == "MutatingAdmissionPolicy"]
    spec = policy["spec"]
    text = str([*spec["matchConditions"], *spec["mutations"]])
    assert '"escher-scheduler' not in text
    [condition] = [c for c in spec["matchConditions"] if c["name"] == "for-escher-scheduler"]
    # The marker policy takes KubeRay's hard-coded name too, unrenamed (docs/integrations.md).
    kuberay = f', "{GANG_SCHEDULER_NAME}"' if module == "markers" else ""
    assert " ".join(condition["expression"].split()) == (
        'object.spec.schedulerName in ["default-scheduler", "default-scheduler-all-nodes"'
        f"{kuberay}]"
    )
    split = config.split_config("escher.io")
    shares = {p["schedulerName"]: p.get("percentageOfNodesToScore") for p in split["profiles"]}
    assert shares == {
        "default-scheduler": None,
        config.all_nodes_scheduler_name("default-scheduler"): 100,
    }
    if module == "markers":
        assert '"default-scheduler-all-nodes"' in str(spec["mutations"])
        assert '? "default-scheduler"' in str(spec["mutations"])  # KubeRay's plain pods
