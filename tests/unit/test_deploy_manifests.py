"""The deploy/ manifests, read from the files: least-privilege RBAC, and pieces that must agree.

No kubectl here (tests/e2e/test_deploy.py renders every overlay with kubectl's kustomize and
applies it to a real kube-apiserver). These tests follow each overlay's `resources` to find
what it deploys, and check what a reviewer would otherwise check by eye: the extender's
ServiceAccount is granted exactly the least-privilege set of its mode and nothing else, and
its pod patches are held to the gang annotations; the scheduler configurations agree with
scheduler-config/ (the one the local control plane runs), with the Service, the mounts and
the lease; and the Deployments' flags, probes, Secrets and images are the ones the code and
the build expect. In dra mode, the admission policy that holds the extender to its own
ResourceSlices and DeviceClasses names the driver, domain and label the code writes
(tests/e2e/test_deploy_dra.py proves it on a real API server).
"""

from __future__ import annotations

import copy
import functools
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rbac import DRA, EXPECTED, PLACEMENT, triples

from escher_harness.localcluster.config import SCHEDULER_ENV
from escher_harness.localcluster.operators import GANG_SCHEDULER_NAME
from extender.cli import build_parser, settings_of
from extender.core.pod import COSCHEDULING_LABEL, Keys
from extender.dra.objects import MANAGED_BY
from extender.gang.args import GangArgs
from extender.listen import ListenArgs
from extender.scheduling.profile import problems

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
MODES = ("extender", "pure", "dra")
# The modes with no extender in kube-scheduler's path.
SCHEDULER_ALONE = ("pure", "dra")
KEYS = Keys.for_domain("escher.io")
NAMESPACE = "escher-system"
EXTENDER_SA = ("escher-system", "escher-extender")
SCHEDULER_SA = ("escher-system", "escher-scheduler")

# In the escher-system namespace: the replicas' Lease.
LEADER_ELECTION = {("coordination.k8s.io", "leases", v) for v in ("create", "get", "update")}
# ... and in extender mode the adaptive gang gate's switch, a ConfigMap.
GANG_GATE = {("", "configmaps", v) for v in ("create", "patch")}
BINDINGS = frozenset({"ClusterRoleBinding", "RoleBinding"})

Doc = dict[str, Any]


def collect(directory: Path) -> Iterator[Doc]:
    """Every object a kustomization lists in `resources`, following directories."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            yield from collect(path)
        else:
            yield from (d for d in yaml.safe_load_all(path.read_text()) if d)


def overlay(mode: str) -> list[Doc]:
    """The overlay's objects with its JSON patches applied (what `kubectl kustomize` renders,
    but for the strategic-merge patch files, which tests read on their own)."""
    return copy.deepcopy(rendered(mode))  # a test may change its copy


@functools.cache
def rendered(mode: str) -> list[Doc]:
    """overlay(mode), parsed once a run: parsing the YAML for each test took 3 s a run."""
    docs = list(collect(DEPLOY / "overlays" / mode))
    for patch in kustomization(mode).get("patches", []):
        if "target" not in patch:
            continue
        doc = find(docs, patch["target"]["kind"], patch["target"]["name"])
        for op in yaml.safe_load(patch["patch"]):
            assert op["op"] == "add", op
            *parents, last = op["path"].strip("/").split("/")
            node: Any = doc
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if last == "-":
                node.append(op["value"])
            else:
                node[last] = op["value"]
    return docs


def kustomization(mode: str) -> Doc:
    return dict(yaml.safe_load((DEPLOY / "overlays" / mode / "kustomization.yaml").read_text()))


def scheduler_config(mode: str) -> Doc:
    return dict(yaml.safe_load((DEPLOY / "overlays" / mode / "scheduler-config.yaml").read_text()))


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def granted(
    docs: list[Doc],
    subject: tuple[str, str],
    kinds: frozenset[str] = frozenset({"ClusterRoleBinding"}),
) -> list[Doc]:
    """The rules of every role in `docs` bound to the ServiceAccount `subject` (namespace,
    name) by a binding of `kinds` (default: the cluster-wide grants); built-in roles
    (system:..., not in `docs`) are left out."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    rules: list[Doc] = []
    for binding in (d for d in docs if d["kind"] in kinds):
        subjects = {
            (s.get("namespace"), s["name"])
            for s in binding["subjects"]
            if s["kind"] == "ServiceAccount"
        }
        role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        if subject in subjects and role is not None:
            rules += role["rules"]
    return rules


def pod_spec(docs: list[Doc], name: str) -> Doc:
    return dict(find(docs, "Deployment", name)["spec"]["template"]["spec"])


@pytest.mark.parametrize("mode", MODES)
def test_the_extender_is_granted_exactly_the_least_privilege_set(mode: str) -> None:
    docs = overlay(mode)
    rules = granted(docs, EXTENDER_SA)
    assert triples(rules) == EXPECTED[mode]
    # Nothing beyond the triples: no wildcard, no URL, no per-name or namespaced grant.
    for rule in rules:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
        assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"]
    # In a namespace: leader election's Lease and nothing else (test below).
    namespaced = granted(docs, EXTENDER_SA, BINDINGS - {"ClusterRoleBinding"})
    assert triples(namespaced) == LEADER_ELECTION | (GANG_GATE if mode == "extender" else set())


def test_leader_election_may_create_leases_and_use_only_its_own() -> None:
    docs = overlay("extender")
    role = find(docs, "Role", "escher-extender-leader-election")
    binding = find(docs, "RoleBinding", "escher-extender-leader-election")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    (container,) = pod_spec(docs, "escher-extender")["containers"]
    parsed = settings_of(build_parser().parse_args(["serve", *container["args"]]))
    assert (
        parsed.leader_election.leader_elect and parsed.leader_election.lease_namespace == NAMESPACE
    )
    lease = parsed.leader_election.lease_name
    by_name = {tuple(r.get("resourceNames", [])): set(r["verbs"]) for r in role["rules"]}
    assert by_name == {(): {"create"}, (lease,): {"get", "update"}}


def test_pure_and_dra_modes_cannot_place_pods_and_extender_mode_does_through_its_own_role() -> None:
    for mode in SCHEDULER_ALONE:
        assert not triples(granted(overlay(mode), EXTENDER_SA)) & PLACEMENT, mode
    docs = overlay("extender")
    assert triples(find(docs, "ClusterRole", "escher-extender-placement")["rules"]) == PLACEMENT


def test_only_dra_mode_may_publish_devices_and_through_its_own_role() -> None:
    for mode in ("extender", "pure"):
        assert not {g for g, _, _ in triples(granted(overlay(mode), EXTENDER_SA))} & {
            "resource.k8s.io"
        }, mode
    docs = overlay("dra")
    assert triples(find(docs, "ClusterRole", "escher-extender-dra")["rules"]) == DRA
    binding = find(docs, "ClusterRoleBinding", "escher-extender-dra")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "escher-extender-dra",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": EXTENDER_SA[1], "namespace": EXTENDER_SA[0]}
    ]


def test_only_extender_mode_writes_to_pods_and_an_admission_policy_holds_it_to_one_key() -> None:
    def pod_writes(docs: list[Doc]) -> set[tuple[str, str, str]]:
        return {r for r in triples(granted(docs, EXTENDER_SA))
                if r[1] == "pods" and r[2] not in ("get", "list", "watch")}  # fmt: skip

    for mode in SCHEDULER_ALONE:
        assert pod_writes(overlay(mode)) == set(), mode
    # Pure mode has no admission policy; dra mode's is about its own DRA objects (below).
    assert not [d for d in overlay("pure") if d["kind"].startswith("ValidatingAdmission")]
    assert {
        d["metadata"]["name"] for d in overlay("dra") if d["kind"].startswith("ValidatingAdmission")
    } == {"escher-extender-dra-own-objects"}
    extender = overlay("extender")
    assert pod_writes(extender) == {("", "pods", "patch")}
    policy = find(extender, "ValidatingAdmissionPolicy", "escher-extender-pod-touch")["spec"]
    binding = find(extender, "ValidatingAdmissionPolicyBinding", "escher-extender-pod-touch")
    assert binding["spec"] == {
        "policyName": "escher-extender-pod-touch",
        "validationActions": ["Deny"],
    }
    assert policy["failurePolicy"] == "Fail"
    [rule] = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods"] and rule["operations"] == ["UPDATE"]
    sa = f"system:serviceaccount:{EXTENDER_SA[0]}:{EXTENDER_SA[1]}"
    assert [c["expression"] for c in policy["matchConditions"]] == [
        f'request.userInfo.username == "{sa}"'
    ]
    assert {v["name"]: v["expression"] for v in policy["variables"]}["key"] == (
        '"escher.io/requeued-at"'
    )
    # Its status: the nominated node alone (a gang member's reserved node).
    status = {r for r in triples(granted(extender, EXTENDER_SA)) if r[1] == "pods/status"}
    assert status == {("", "pods/status", "patch")}
    nominate = find(extender, "ValidatingAdmissionPolicy", "escher-extender-pod-nominate")["spec"]
    assert find(extender, "ValidatingAdmissionPolicyBinding", "escher-extender-pod-nominate")[
        "spec"
    ] == {"policyName": "escher-extender-pod-nominate", "validationActions": ["Deny"]}
    [rule] = nominate["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods/status"] and rule["operations"] == ["UPDATE"]
    assert nominate["failurePolicy"] == "Fail"
    [check] = nominate["validations"]
    assert "nominatedNodeName" not in check["expression"]
    # The conditions but the extender's own (a held gang member's reason) stay as they were.
    kept = "conditions.orValue([]).filter(c, c.type != 'escher.io/GangHeld')"
    assert f"object.status.?{kept} == oldObject.status.?{kept}" in check["expression"]


def test_in_dra_mode_an_admission_policy_holds_the_writes_to_its_own_driver_and_label() -> None:
    """RBAC cannot name a driver or a label: the policy must cover every write the DRA role
    grants, for the extender's ServiceAccount only, and name the driver, the domain and the
    label the code writes (what it refuses is proven in tests/e2e/test_deploy_dra.py)."""
    docs = overlay("dra")
    policy = find(docs, "ValidatingAdmissionPolicy", "escher-extender-dra-own-objects")["spec"]
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "escher-extender-dra-own-objects")
    assert binding["spec"] == {
        "policyName": "escher-extender-dra-own-objects",
        "validationActions": ["Deny"],
    }
    assert policy["failurePolicy"] == "Fail"
    sa = f"system:serviceaccount:{EXTENDER_SA[0]}:{EXTENDER_SA[1]}"
    assert [c["expression"] for c in policy["matchConditions"]] == [
        f'request.userInfo.username == "{sa}"'
    ]
    # Every write the role grants, and no more resources than it writes.
    writes = {
        (g, r, v)
        for g, r, v in triples(granted(docs, EXTENDER_SA))
        if g == "resource.k8s.io" and v not in ("get", "list", "watch")
    }
    [rule] = policy["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["apiVersions"] == ["*"]
    assert (
        set(rule["resources"]) == {r for _, r, _ in writes} == {"resourceslices", "deviceclasses"}
    )
    assert {v.upper() for _, _, v in writes} <= set(rule["operations"])
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    # The driver, the domain and the label the Deployment's flags and the code use.
    (container,) = pod_spec(docs, "escher-extender")["containers"]
    parsed = settings_of(build_parser().parse_args(["serve", *container["args"]]))
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert f"'{MANAGED_BY[0]}'" in variables["ours"] and f"'{MANAGED_BY[1]}'" in variables["ours"]
    checks = [" ".join(v["expression"].split()) for v in policy["validations"]]
    assert checks[0] == "variables.ours"
    driver = parsed.dra.driver_name(parsed.resource_domain)
    assert f"variables.subject.spec.driver == '{driver}'" in checks[1]
    assert f"startsWith('{parsed.resource_domain}/')" in checks[2]
    assert f"'{MANAGED_BY[0]}'" in checks[3] and f"'{MANAGED_BY[1]}'" in checks[3]
    assert parsed.dra.driver_name(parsed.resource_domain) == parsed.resource_domain == "escher.io"
    for v in policy["validations"]:
        assert v["reason"] == "Forbidden" and v["message"].startswith("the escher extender"), v
    assert {"dra-rbac.yaml", "dra-policy.yaml"} <= set(kustomization("dra")["resources"])


def test_an_admission_policy_marks_escher_scheduler_pods_that_need_the_extender() -> None:
    """What the policy does is proven on a real API server (tests/e2e/test_deploy.py); here,
    that it names the extender's own keys and nothing else can drift."""
    docs = overlay("extender")
    for mode in SCHEDULER_ALONE:
        assert not [d for d in overlay(mode) if d["kind"].startswith("MutatingAdmission")], mode
    policy = find(docs, "MutatingAdmissionPolicy", "escher-extender-marker")["spec"]
    binding = find(docs, "MutatingAdmissionPolicyBinding", "escher-extender-marker")
    assert binding["spec"] == {"policyName": "escher-extender-marker"}
    assert policy["failurePolicy"] == "Fail"
    # Not run a second time after its own patch: that doubled its cost on every gang member
    # (docs/deployment.md).
    assert policy["reinvocationPolicy"] == "Never"
    [rule] = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods"] and rule["operations"] == ["CREATE"]
    conditions = {c["name"]: c["expression"] for c in policy["matchConditions"]}
    # KubeRay's hard-coded name is the one other (docs/integrations.md).
    assert " ".join(conditions["for-escher-scheduler"].split()) == (
        'object.spec.schedulerName in ["escher-scheduler", "escher-scheduler-all-nodes", '
        f'"{GANG_SCHEDULER_NAME}"]'
    )
    # ... whose every pod is taken, so that a pod needing no exchange moves to
    # escher-scheduler, not left to a scheduler that does not run.
    assert conditions["needs-the-extender"].endswith(
        f'|| object.spec.schedulerName == "{GANG_SCHEDULER_NAME}"'
    )
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    # Gang members (by label, or naming a native PodGroup) get the gang and bind markers,
    # pods with a preference the score marker; an ephemeral request alone is no reason to
    # mark a pod (NodeResourcesFit checks it).
    for key in KEYS.labels():
        assert f'"{key}"' in variables["gang"] and f'"{key}"' in conditions["needs-the-extender"]
    native = "has(object.spec.schedulingGroup)"
    assert native in variables["gang"] and native in conditions["needs-the-extender"]
    for key in (KEYS.prefer, KEYS.pack):
        assert f'"{key}"' in variables["score"] and f'"{key}"' in conditions["needs-the-extender"]
    assert COSCHEDULING_LABEL in KEYS.labels()
    assert "startsWith" not in conditions["needs-the-extender"]
    assert variables["markers"].count(f'"{KEYS.gang_marker}"') == 1
    assert variables["markers"].count(f'"{KEYS.bind_marker}"') == 1
    assert variables["markers"].count(f'"{KEYS.score_marker}"') == 1
    # A pod created with every marker it needs is not patched (the limits tell: an extended
    # resource's request defaults to its limit). The tests of `gang` and `score` are repeated
    # there: a match condition cannot read the variables.
    marked = " ".join(conditions["not-marked-already"].split())
    for marker in KEYS.markers:
        assert f'"{marker}" in object.spec.containers[0].resources.limits' in marked, marker
    for key in (*KEYS.labels(), KEYS.prefer, KEYS.pack):
        assert f'"{key}"' in marked, key
    assert native in marked and "variables." not in marked
    # ... only when it is on the profile that looks at every node already.
    assert marked.startswith('object.spec.schedulerName != "escher-scheduler-all-nodes" ||')
    [mutation] = policy["mutations"]
    patch = " ".join(mutation["jsonPatch"]["expression"].split())
    assert patch.count("variables.markers.map") == 2
    # Every marked pod moves to the profile that looks at every node, which the scheduler's
    # configuration has (test_the_extender_pods_profile_looks_at_every_node); a pod of
    # KubeRay's name needing no marker to escher-scheduler, with no resources map added.
    assert patch.startswith(
        '[JSONPatch{op: "replace", path: "/spec/schedulerName", '
        'value: size(variables.markers) == 0 ? "escher-scheduler" '
        ': "escher-scheduler-all-nodes"}]'
    )
    for section in ("limits", "requests"):
        assert f"variables.{section} || size(variables.markers) == 0 ? [] :" in patch
    assert "marker-policy.yaml" in kustomization("extender")["resources"]


def test_an_admission_policy_holds_gang_members_at_the_gang_gate_when_the_switch_says() -> None:
    docs = overlay("extender")
    policy = find(docs, "MutatingAdmissionPolicy", "escher-extender-gang-gate")["spec"]
    binding = find(docs, "MutatingAdmissionPolicyBinding", "escher-extender-gang-gate")["spec"]
    assert policy["failurePolicy"] == "Ignore"  # ungated members are still placed whole
    [rule] = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods"] and rule["operations"] == ["CREATE"]
    conditions = {c["name"]: c["expression"] for c in policy["matchConditions"]}
    # Either profile: the marker policy may have moved the member before this policy runs.
    assert conditions["for-escher-scheduler"] == (
        'object.spec.schedulerName in ["escher-scheduler", "escher-scheduler-all-nodes"]'
    )
    for key in KEYS.labels():
        assert f'"{key}"' in conditions["a-gang-member"], key
    assert f'"{KEYS.gate}"' in conditions["not-held-already"]
    [mutation] = policy["mutations"]
    assert mutation["jsonPatch"]["expression"].count(f'"{KEYS.gate}"') == 2
    touch = find(docs, "ValidatingAdmissionPolicy", "escher-extender-pod-touch")["spec"]
    assert {v["name"]: v["expression"] for v in touch["variables"]}["gate"] == f'"{KEYS.gate}"'
    # The switch: the ConfigMap the extender writes, and only it may.
    assert policy["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    ref = binding["paramRef"]
    (container,) = pod_spec(docs, "escher-extender")["containers"]
    parsed = settings_of(build_parser().parse_args(["serve", *container["args"]]))
    assert parsed.gang.gate_switch == f"{ref['namespace']}/{ref['name']}"
    role = find(docs, "Role", "escher-extender-gang-gate")
    assert role["metadata"]["namespace"] == ref["namespace"]
    by_name = {tuple(r.get("resourceNames", [])): set(r["verbs"]) for r in role["rules"]}
    assert by_name == {(): {"create"}, (ref["name"],): {"patch"}}


@pytest.mark.parametrize("mode", MODES)
def test_the_scheduler_is_a_kube_scheduler_with_its_own_lease(mode: str) -> None:
    docs = overlay(mode)
    cluster_roles = {
        d["roleRef"]["name"]
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and any(s["name"] == SCHEDULER_SA[1] for s in d["subjects"])
    }
    assert cluster_roles == {"system:kube-scheduler", "system:volume-scheduler"}
    election = scheduler_config(mode)["leaderElection"]
    assert election == {
        "leaderElect": True,
        "resourceNamespace": NAMESPACE,
        "resourceName": "escher-scheduler",
    }
    role = find(docs, "Role", "escher-scheduler-leader-election")
    assert role["metadata"]["namespace"] == election["resourceNamespace"]
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [election["resourceName"]],
            "verbs": ["get", "update"],
        }
    ]
    assert triples(granted(docs, SCHEDULER_SA, BINDINGS)) >= LEADER_ELECTION


@pytest.mark.parametrize("mode", MODES)
def test_the_scheduler_config_is_a_second_profile_named_escher_scheduler(mode: str) -> None:
    config = scheduler_config(mode)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    # Extender mode adds the profile of the pods the extender decides, the marker policy's.
    names = ["escher-scheduler", *(["escher-scheduler-all-nodes"] if mode == "extender" else [])]
    assert [p["schedulerName"] for p in config["profiles"]] == names
    # Every pod that needs no exchange is placed with kube-scheduler's own sampling.
    assert "percentageOfNodesToScore" not in config
    assert "percentageOfNodesToScore" not in config["profiles"][0]


@pytest.mark.parametrize("mode", ["extender", "sidecar"])
def test_the_extender_pods_profile_looks_at_every_node(mode: str) -> None:
    """The profile the marker policy moves gang members and preferences to exists in the
    scheduler's configuration and looks at every feasible node; the policies of the overlay
    know both names."""
    config = scheduler_config(mode)
    docs = overlay("extender")  # the sidecar overlay takes the extender overlay's policies
    marker = find(docs, "MutatingAdmissionPolicy", "escher-extender-marker")["spec"]
    [mutation] = marker["mutations"]
    [target] = re.findall(
        r'path: "/spec/schedulerName",\s*value: [^"]*"escher-scheduler"\s*:\s*"([^"]+)"',
        mutation["jsonPatch"]["expression"],
    )
    shares = {p["schedulerName"]: p.get("percentageOfNodesToScore") for p in config["profiles"]}
    assert shares == {"escher-scheduler": None, target: 100}
    assert problems(config, KEYS, gang_wait_seconds=60.0) == []
    gate = find(docs, "MutatingAdmissionPolicy", "escher-extender-gang-gate")["spec"]
    for policy in (marker, gate):
        [condition] = [c for c in policy["matchConditions"] if c["name"] == "for-escher-scheduler"]
        assert all(f'"{name}"' in condition["expression"] for name in shares)
    # In-cluster: kube-scheduler uses its ServiceAccount, no kubeconfig file.
    assert "clientConnection" not in config


def test_the_extender_mode_config_is_the_local_split_one_plus_https_to_the_service() -> None:
    deployed = scheduler_config("extender")
    local = yaml.safe_load((REPO / "scheduler-config" / "extender-split.yaml").read_text())
    assert (
        [p.get("percentageOfNodesToScore") for p in deployed["profiles"]]
        == [p.get("percentageOfNodesToScore") for p in local["profiles"]]
        == [None, 100]
    )
    assert [p.get("pluginConfig") for p in deployed["profiles"]] == [
        p.get("pluginConfig") for p in local["profiles"]
    ]
    # The same entries (verbs, weights, timeouts, markers, ignorable) as the local control
    # plane's split (mode extender's default scope), each over mutual TLS to the Service.
    transport = {"urlPrefix", "enableHTTPS", "tlsConfig"}
    assert [{k: v for k, v in e.items() if k not in transport} for e in deployed["extenders"]] == [
        {k: v for k, v in e.items() if k != "urlPrefix"} for e in local["extenders"]
    ]
    gangs, binds, scores = deployed["extenders"]
    assert gangs["managedResources"] == [{"name": KEYS.gang_marker, "ignoredByScheduler": True}]
    assert binds["managedResources"] == [{"name": KEYS.bind_marker, "ignoredByScheduler": True}]
    assert scores["managedResources"] == [{"name": KEYS.score_marker, "ignoredByScheduler": True}]
    # Mutual TLS to the Service's verbs ports: the extender verified against the CA the
    # scheduler's pod mounts, the scheduler by its client certificate. Filter and prioritize,
    # one pod at a time, on the HTTP/1.1 listener; bind, where gang members are held, on the
    # HTTP/2 one.
    docs = overlay("extender")
    service = find(docs, "Service", "escher-extender")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    for entry, port in ((gangs, "verbs-http1"), (binds, "verbs"), (scores, "verbs-http1")):
        assert entry["urlPrefix"] == f"https://{host}:{ports[port]}", entry
        assert entry["enableHTTPS"] is True
        assert entry["tlsConfig"] == gangs["tlsConfig"]
    assert (ports["verbs"], ports["verbs-http1"]) == (8889, 8890)
    extender = gangs
    patch = yaml.safe_load((DEPLOY / "overlays" / "extender" / "scheduler-ca.yaml").read_text())
    spec = patch["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v["secret"] for v in spec["volumes"]}
    assert volumes["extender-ca"]["secretName"] == "escher-extender-tls"
    # Only the CA certificate reaches the scheduler, never the extender's key.
    assert volumes["extender-ca"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert volumes["client-tls"]["secretName"] == "escher-scheduler-client-tls"
    assert extender["tlsConfig"] == {
        "caFile": f"{mounts['extender-ca']}/ca.crt",
        "certFile": f"{mounts['client-tls']}/tls.crt",
        "keyFile": f"{mounts['client-tls']}/tls.key",
    }
    assert {"path": "scheduler-ca.yaml"} in kustomization("extender")["patches"]


def test_in_extender_mode_the_verbs_take_only_the_schedulers_client_certificate() -> None:
    docs = overlay("extender")
    spec = pod_spec(docs, "escher-extender")
    (container,) = spec["containers"]
    parsed = settings_of(build_parser().parse_args(["serve", *container["args"]]))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert parsed.listen.verbs_port == ports["verbs"] != parsed.listen.port == ports["https"]
    # The verbs also over HTTP/1.1, beside the HTTP/2 listener, with its TLS and client CA.
    assert parsed.listen.verbs_http2 and not parsed.listen.verbs_plain
    assert (
        parsed.listen.verbs_http1_port
        == ports["verbs-http1"]
        not in (parsed.listen.port, parsed.listen.verbs_port)
    )
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["secret"] for v in spec["volumes"]}
    # The CA that signed the scheduler's client certificate, from the same Secret, and
    # nothing else of it (not the scheduler's key).
    assert str(parsed.listen.verbs_client_ca_file) == f"{mounts['client-ca']}/ca.crt"
    assert volumes["client-ca"] == {
        "secretName": "escher-scheduler-client-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    service = find(docs, "Service", "escher-extender")
    assert service["spec"]["ports"] == [
        {"name": name, "port": ports[name], "targetPort": name}
        for name in ("https", "verbs", "verbs-http1")
    ]
    # Pure and dra modes have no verbs listener: kube-scheduler does not call the extender.
    for mode in SCHEDULER_ALONE:
        (alone,) = pod_spec(overlay(mode), "escher-extender")["containers"]
        assert not any(a.startswith("--verbs") for a in alone["args"]), mode
        assert [p["name"] for p in alone["ports"]] == ["https"], mode


@pytest.mark.parametrize("mode", SCHEDULER_ALONE)
def test_the_pure_and_dra_mode_configs_have_no_extender_and_enforce_the_domain(mode: str) -> None:
    config = scheduler_config(mode)
    assert "extenders" not in config
    # NodeResourcesFit must not ignore escher.io: in pure mode it is what enforces it; in dra
    # mode it leaves a DRA-backed extended resource to DynamicResources, which the default
    # profile runs.
    assert "pluginConfig" not in config["profiles"][0]
    assert "scheduler-ca.yaml" not in str(kustomization(mode))
    assert not [p for p in kustomization(mode).get("patches", []) if "path" in p]
    # The local control plane's configuration of the mode, but for the names and the lease.
    local = yaml.safe_load((REPO / "scheduler-config" / f"{mode}.yaml").read_text())
    assert "extenders" not in local
    assert [{**p, "schedulerName": "-"} for p in config["profiles"]] == [
        {**p, "schedulerName": "-"} for p in local["profiles"]
    ]
    assert config.keys() - {"leaderElection"} == local.keys() - {
        "leaderElection",
        "clientConnection",
    }


@pytest.mark.parametrize("mode", MODES)
def test_the_extender_runs_in_its_mode_with_flags_the_cli_accepts(mode: str) -> None:
    spec = pod_spec(overlay(mode), "escher-extender")
    (container,) = spec["containers"]
    parsed = settings_of(build_parser().parse_args(["serve", *container["args"]]))
    assert parsed.mode == mode
    assert parsed.in_cluster and parsed.listen.port == 8888
    # The serving pair from the escher-extender-tls Secret, mounted where the flags point.
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    volume = next(v for v in spec["volumes"] if v["name"] == "tls")
    assert (
        mount["name"] == volume["name"] and volume["secret"]["secretName"] == "escher-extender-tls"
    )
    assert {str(parsed.listen.tls_cert_file), str(parsed.listen.tls_key_file)} == {
        f"{mount['mountPath']}/{item['path']}" for item in volume["secret"]["items"]
    }
    # The policy API's token from a Secret, through the ESCHER_TOKEN setting; not a flag.
    assert parsed.token is None
    token, *bounds = container["env"]
    assert token["name"] == "ESCHER_TOKEN" and "secretKeyRef" in token["valueFrom"]
    # The slow-client bounds, shown with the extender's own defaults (what the chart's
    # connections.* set).
    defaults = ListenArgs.model_fields
    assert {e["name"]: e["value"] for e in bounds} == {
        f"ESCHER_{name.upper()}": f"{defaults[name].default:g}"
        for name in ("header_timeout_seconds", "body_timeout_seconds", "max_pending_connections")
    }
    assert spec["serviceAccountName"] == EXTENDER_SA[1]


def test_the_extender_probes_health_and_readiness_over_https() -> None:
    (container,) = pod_spec(overlay("extender"), "escher-extender")["containers"]
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "https",
        "scheme": "HTTPS",
    }
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "https",
        "scheme": "HTTPS",
    }
    # The probes use the policy API's listener: the kubelet has no client certificate for
    # the verbs' ones.
    assert [p["name"] for p in container["ports"]] == ["https", "verbs", "verbs-http1"]


def test_the_scheduler_drops_a_dead_connection_to_the_extender_as_the_local_cluster_does() -> None:
    # The embedded cluster's failover figures hold for deploy/ only with the same settings.
    for mode in MODES:
        (scheduler,) = pod_spec(overlay(mode), "escher-scheduler")["containers"]
        assert {e["name"]: e["value"] for e in scheduler["env"]} == SCHEDULER_ENV


@pytest.mark.parametrize("name", ["escher-extender", "escher-scheduler"])
def test_both_workloads_have_requests_and_a_memory_limit(name: str) -> None:
    (container,) = pod_spec(overlay("extender"), name)["containers"]
    resources = container["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert "memory" in resources["limits"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_two_replicas_elect_a_leader_apart_and_the_budget_guards_the_leader() -> None:
    docs = overlay("extender")
    deployment = find(docs, "Deployment", "escher-extender")
    assert deployment["spec"]["replicas"] == 2
    # Only the leader is ever ready: a rollout that waited for new pods to be ready before
    # removing old ones would never finish, so it replaces them all at once.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": "100%"},
    }
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    budget = find(docs, "PodDisruptionBudget", "escher-extender")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"  # the follower
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert find(docs, "Service", "escher-extender")["spec"]["selector"].items() <= labels.items()


def test_images_match_the_package_and_the_pinned_kubernetes() -> None:
    base = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert base["images"] == [{"name": "escher-extender", "newTag": version}]
    docs = overlay("extender")
    (extender,) = pod_spec(docs, "escher-extender")["containers"]
    assert extender["image"] == f"escher-extender:{version}"
    go_mod = (REPO / "hack" / "kubernetes" / "go.mod").read_text()
    pinned = re.search(r"^require k8s\.io/kubernetes (v[\d.]+)$", go_mod, re.MULTILINE)
    assert pinned is not None
    (scheduler,) = pod_spec(docs, "escher-scheduler")["containers"]
    assert scheduler["image"] == f"registry.k8s.io/kube-scheduler:{pinned[1]}"


def test_the_scheduler_reads_the_generated_config_where_it_is_mounted() -> None:
    for mode in MODES:
        (generator,) = kustomization(mode)["configMapGenerator"]
        assert generator["files"] == ["config.yaml=scheduler-config.yaml"]
        spec = pod_spec(overlay(mode), "escher-scheduler")
        volume = next(v for v in spec["volumes"] if "configMap" in v)
        assert volume["configMap"]["name"] == generator["name"]
        (container,) = spec["containers"]
        mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
        assert f"--config={mount['mountPath']}/config.yaml" in container["command"]
        assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize("mode", MODES)
def test_a_network_policy_lets_only_the_scheduler_at_the_verbs_and_labelled_namespaces_in(
    mode: str,
) -> None:
    docs = overlay(mode)
    policy = find(docs, "NetworkPolicy", "escher-extender")["spec"]
    extender = find(docs, "Deployment", "escher-extender")
    scheduler = find(docs, "Deployment", "escher-scheduler")
    assert policy["podSelector"]["matchLabels"].items() <= (
        extender["spec"]["template"]["metadata"]["labels"].items()
    )
    assert policy["policyTypes"] == ["Ingress"]
    verbs_rule, api_rule = policy["ingress"]
    scheduler_labels = scheduler["spec"]["template"]["metadata"]["labels"]
    # The verbs' ports, HTTP/2 and HTTP/1.1: the scheduler's pods only.
    (source,) = verbs_rule["from"]
    assert "namespaceSelector" not in source
    assert source["podSelector"]["matchLabels"].items() <= scheduler_labels.items()
    assert verbs_rule["ports"] == [{"port": p, "protocol": "TCP"} for p in (8889, 8890)]
    # The policy API's port: labelled namespaces only.
    assert api_rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"escher.io/policy-client": "true"}}}
    ]
    (container,) = pod_spec(docs, "escher-extender")["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert api_rule["ports"] == [{"port": ports["https"], "protocol": "TCP"}]
    if mode == "extender":
        assert [r["port"] for r in verbs_rule["ports"]] == [ports["verbs"], ports["verbs-http1"]]


@pytest.mark.parametrize("mode", MODES)
def test_the_scheduler_checks_its_configuration_before_it_starts(mode: str) -> None:
    """deploy/'s scheduler configuration has no mistake the extender's check finds, and the
    scheduler's pod runs the check on the file kube-scheduler reads, in an init container."""
    wait = GangArgs().wait_seconds  # deploy/ leaves it at that
    assert problems(scheduler_config(mode), KEYS, gang_wait_seconds=wait) == []
    spec = pod_spec(overlay(mode), "escher-scheduler")
    (check,) = spec["initContainers"]
    (scheduler,) = spec["containers"]
    config = next(a for a in scheduler["command"] if a.startswith("--config=")).split("=", 1)[1]
    (extender,) = pod_spec(overlay(mode), "escher-extender")["containers"]
    budget = settings_of(build_parser().parse_args(["serve", *extender["args"]])).kube_qps
    assert check["command"] == [
        "escher-extender",
        "check-scheduler-config",
        config,
        f"--kube-qps={budget:g}",
    ]
    mount = {m["name"]: m["mountPath"] for m in check["volumeMounts"]}
    assert config.startswith(mount["config"] + "/")
    assert check["image"] == extender["image"]


def test_the_sidecar_config_is_the_split_one_over_the_pods_loopback() -> None:
    """deploy/overlays/sidecar: the same entries as the local split configuration, each to
    the extender container's plain verbs listener on the pod's loopback."""
    deployed = scheduler_config("sidecar")
    local = yaml.safe_load((REPO / "scheduler-config" / "extender-split.yaml").read_text())
    assert [p.get("percentageOfNodesToScore") for p in deployed["profiles"]] == [
        p.get("percentageOfNodesToScore") for p in local["profiles"]
    ]
    assert [{k: v for k, v in e.items() if k != "urlPrefix"} for e in deployed["extenders"]] == [
        {k: v for k, v in e.items() if k != "urlPrefix"} for e in local["extenders"]
    ]
    patch = yaml.safe_load((DEPLOY / "overlays" / "sidecar" / "sidecar.yaml").read_text())
    spec = patch["spec"]
    (extender,) = [c for c in spec["template"]["spec"]["containers"] if c["name"] == "extender"]
    parsed = settings_of(build_parser().parse_args(["serve", *extender["args"]]))
    assert parsed.listen.verbs_plain and parsed.listen.verbs_address() == "127.0.0.1"
    assert parsed.listen.verbs_http1_port is None  # plain HTTP/1.1 already, for every entry
    assert parsed.mode == "extender" and parsed.leader_election.leader_elect
    url = f"http://{parsed.listen.verbs_address()}:{parsed.listen.verbs_port}"
    assert {e["urlPrefix"] for e in deployed["extenders"]} == {url}
    # Not a port of the pod: nothing outside it may call /bind.
    assert [p["containerPort"] for p in extender["ports"]] == [parsed.listen.port]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert problems(deployed, KEYS, parsed.gang.wait_seconds) == []
