"""The policies' CRDs (deploy/crds) against what the service takes, and as the chart and the
embedded cluster ship them. No cluster (tests/e2e/test_crds.py sends objects to a real API
server); `helm template` is the only process started.

What must not drift is read from the service, not written here a second time: the
EphemeralResource spec from extender.policies.api.ResourceSpec (its fields camelCased, its bounds
from the pydantic model's JSON schema), the ESL kinds from extender.esl.registry.REGISTRY,
the ESL names from extender.esl.base.Name, the resource names from extender.core.names.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from escher_harness.localcluster.binaries import find_tool
from escher_harness.localcluster.errors import MissingBinaryError
from escher_harness.localcluster.manifests import in_domain, load_manifests
from escher_harness.localcluster.paths import policy_crds
from extender.core import names, quantity
from extender.core.errors import InvalidValue
from extender.esl.base import Name
from extender.esl.registry import REGISTRY
from extender.policies.api import ResourceSpec

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy" / "crds"
CHART = REPO / "deploy" / "helm" / "escher-extender"
ERES = "escher.io_ephemeralresources.yaml"
ESLS = "escher.io_esls.yaml"
FILES = [ERES, ESLS]
INT64_MAX = 2**63 - 1

Doc = dict[str, Any]


@functools.cache
def crd(name: str) -> Doc:
    return dict(yaml.safe_load((CRDS / name).read_text()))


def version(name: str) -> Doc:
    (v,) = crd(name)["spec"]["versions"]
    return dict(v)


def root(name: str) -> Doc:
    return dict(version(name)["schema"]["openAPIV3Schema"])


def spec(name: str) -> Doc:
    return dict(root(name)["properties"]["spec"])


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w.title() for w in rest)


def rule(rules: list[Doc], mentioning: str) -> Doc:
    (found,) = [r for r in rules if mentioning in r["rule"]]
    return found


def cel_regex(text: str) -> re.Pattern[str]:
    """The pattern of a CEL `matches('...')` in `text`."""
    (pattern,) = re.findall(r"matches\('([^']*)'\)", text)
    return re.compile(pattern)


def cel_size_limit(text: str) -> int:
    (limit,) = re.findall(r"name\.size\(\) <= (\d+)", text)
    return int(limit)


# ---- both kinds ---------------------------------------------------------------------------

NAMES = {
    ERES: {
        "kind": "EphemeralResource",
        "listKind": "EphemeralResourceList",
        "plural": "ephemeralresources",
        "singular": "ephemeralresource",
        "shortNames": ["eres"],
        "categories": ["escher"],
    },
    ESLS: {
        "kind": "ESL",
        "listKind": "ESLList",
        "plural": "esls",
        "singular": "esl",
        "categories": ["escher"],
    },
}
PRINTER_COLUMNS = {
    ERES: [
        ("Capacity", "integer", ".spec.capacity"),
        ("Nodes", "integer", ".status.nodeCount"),
        ("Allocated", "integer", ".status.allocated"),
        ("Durable", "string", '.status.conditions[?(@.type=="Durable")].status'),
        ("Age", "date", ".metadata.creationTimestamp"),
    ],
    ESLS: [
        ("Kind", "string", ".spec.kind"),
        ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
        ("Steps", "integer", ".status.steps"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ],
}


@pytest.mark.parametrize("name", FILES)
def test_each_crd_is_a_cluster_scoped_v1alpha1_kind_with_status_in_the_escher_category(
    name: str,
) -> None:
    doc = crd(name)
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["kind"] == "CustomResourceDefinition"
    assert doc["spec"]["group"] == "escher.io" and doc["spec"]["scope"] == "Cluster"
    assert doc["spec"]["names"] == NAMES[name]
    assert doc["metadata"]["name"] == f"{NAMES[name]['plural']}.escher.io"
    assert name == f"escher.io_{NAMES[name]['plural']}.yaml"
    v = version(name)
    assert (v["name"], v["served"], v["storage"]) == ("v1alpha1", True, True)
    assert v["subresources"] == {"status": {}}
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in v["additionalPrinterColumns"]]
    assert columns == PRINTER_COLUMNS[name]
    assert root(name)["required"] == ["spec"]


CONDITION_TYPES = {
    ERES: ["Applied", "Durable", "Conflict"],
    ESLS: ["Ready", "NoRoom", "Unsatisfiable"],
}


@pytest.mark.parametrize("name", FILES)
def test_each_status_has_standard_conditions_listed_by_type(name: str) -> None:
    conditions = root(name)["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    # metav1.Condition: every field but observedGeneration is required.
    assert item["required"] == ["type", "status", "lastTransitionTime", "reason", "message"]
    assert set(item["properties"]) == {*item["required"], "observedGeneration"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    # The types the extender will set are documented next to the kinds.
    text = (REPO / "docs" / "policy-api.md").read_text()
    for kind_type in CONDITION_TYPES[name]:
        assert f"`{kind_type}`" in text, kind_type


STATUS_FIELDS = {
    ERES: {
        *("observedGeneration", "nodeCount", "capacity", "allocated", "available"),
        *("nodesListed", "nodes", "conditions"),
    },
    ESLS: {
        *("observedGeneration", "id", "resources", "requests", "dynamic", "steps", "state"),
        "conditions",
    },
}


@pytest.mark.parametrize("name", FILES)
def test_each_status_has_the_fields_the_extender_writes(name: str) -> None:
    status = root(name)["properties"]["status"]["properties"]
    assert set(status) == STATUS_FIELDS[name]
    assert status["observedGeneration"] == {"type": "integer", "format": "int64"}


def test_an_ephemeral_resources_status_counts_per_node_in_int64() -> None:
    status = root(ERES)["properties"]["status"]["properties"]
    per_node = status["nodes"]["additionalProperties"]["properties"]
    assert per_node == {k: {"type": "integer", "format": "int64"} for k in per_node}
    assert set(per_node) == {"capacity", "allocated", "available"}
    assert status["allocated"]["format"] == "int64"


# ---- EphemeralResource: the body of PUT /v1/resources/{name} ----------------------------

MODEL = ResourceSpec.model_json_schema()


def model_field(field: str) -> Doc:
    """The field's schema in the model, without the `| None` of an optional field."""
    prop = MODEL["properties"][field]
    (typed,) = [a for a in prop.get("anyOf", [prop]) if a.get("type") != "null"]
    return dict(typed)


def test_an_ephemeral_resource_has_exactly_the_set_resource_fields_camelcased() -> None:
    assert set(spec(ERES)["properties"]) == {camel(f) for f in ResourceSpec.model_fields}
    assert spec(ERES)["required"] == [camel(f) for f in MODEL["required"]]
    assert spec(ERES).get("additionalProperties") is None  # unknown fields are pruned/refused


# (model field, model JSON-schema keyword, CRD keyword): the same bound in both.
BOUNDS = [
    ("capacity", "minimum", "minimum"),
    ("node", "maxLength", "maxLength"),
    ("node_selector", "maxProperties", "maxProperties"),
    ("node_spec", "maxProperties", "maxProperties"),
    ("num_nodes", "minimum", "minimum"),
    ("num_nodes", "maximum", "maximum"),
]


@pytest.mark.parametrize(("field", "model_key", "crd_key"), BOUNDS)
def test_an_ephemeral_resources_bounds_are_the_models(
    field: str, model_key: str, crd_key: str
) -> None:
    assert spec(ERES)["properties"][camel(field)][crd_key] == model_field(field)[model_key]


def test_every_bound_of_the_model_is_in_the_table_above() -> None:
    keys = {"minimum", "maximum", "maxLength", "maxProperties", "minLength", "minProperties"}
    in_model = {(f, k) for f in ResourceSpec.model_fields for k in keys & model_field(f).keys()}
    # capacity's maximum is int64's, below (format int64, not `maximum`).
    assert in_model == {(f, m) for f, m, _ in BOUNDS} | {("capacity", "maximum")}


def test_capacity_is_bounded_by_int64_which_is_the_ledgers_maximum() -> None:
    capacity = spec(ERES)["properties"]["capacity"]
    assert capacity["type"] == "integer" and capacity["format"] == "int64"
    assert model_field("capacity")["maximum"] == quantity.MAX == INT64_MAX
    # No `maximum`: kube-apiserver (1.37) keeps a schema bound as a float64, where 2^63-1
    # becomes 2^63, outside int64; it then refused every object, 0 included ("Maximum
    # boundary value must be of type integer with format int64"). format int64 refuses what
    # is above 2^63-1 (tests/e2e/test_crds.py sends 2^63).
    assert "maximum" not in capacity


@pytest.mark.parametrize(
    ("field", "values"),
    [("nodeSelector", "string"), ("nodeSpec", None)],
)
def test_an_ephemeral_resources_maps_take_what_the_model_takes(
    field: str, values: str | None
) -> None:
    prop = spec(ERES)["properties"][field]
    assert prop["type"] == "object"
    if values is not None:  # label values: strings, as the model's StrictStr
        assert prop["additionalProperties"]["type"] == values
    else:  # quantities: a string or an integer, as the model's Quantity
        assert prop["additionalProperties"] == {"x-kubernetes-int-or-string": True}
        kinds = {a["type"] for a in model_field("node_spec")["additionalProperties"]["anyOf"]}
        assert kinds == {"string", "integer"}


def test_at_most_one_target_and_the_message_names_the_three_fields() -> None:
    (one,) = spec(ERES)["x-kubernetes-validations"]
    fields = ("node", "node_selector", "node_spec")
    for f in fields:
        assert f"has(self.{camel(f)})" in one["rule"]
        assert camel(f) in one["message"]
    assert "<= 1" in one["rule"]


# The name is an extended-resource name part (names.check_short_name) that is also an
# object name (a DNS subdomain, as names.check_node_name checks): the CEL rules say both.
RESOURCE_NAMES = [
    "gpu-slot", "a", "0", "a.b", "a-b.c-1", "r" * 63, "r" * 64, "Upper", "under_score",
    "-lead", "trail-", ".dot", "dot.", "a b", "",
]  # fmt: skip


@pytest.mark.parametrize("name", RESOURCE_NAMES)
def test_an_ephemeral_resources_name_rule_is_a_resource_name_and_an_object_name(
    name: str,
) -> None:
    rules = root(ERES)["x-kubernetes-validations"]
    for r in rules:
        assert "metadata.name" in r["message"]
    size = rule(rules, "size()")["rule"]
    pattern = cel_regex(rule(rules, "matches(")["rule"])
    crd_accepts = len(name) <= cel_size_limit(size) and bool(pattern.fullmatch(name))

    def service_accepts(n: str) -> bool:
        try:
            names.check_short_name(n)
            names.check_node_name(n)
        except InvalidValue:
            return False
        return True

    assert crd_accepts == service_accepts(name)


# ---- ESL: the body of POST /v1/esl ---------------------------------------------------------


def test_an_esl_takes_exactly_the_registered_kinds_and_any_params() -> None:
    esl = spec(ESLS)
    assert esl["required"] == ["kind", "params"]
    assert esl["properties"]["kind"]["enum"] == sorted(REGISTRY)
    params = esl["properties"]["params"]
    assert params["type"] == "object"
    assert params["x-kubernetes-preserve-unknown-fields"] is True


def test_an_esls_spec_cannot_change() -> None:
    (immutable,) = spec(ESLS)["x-kubernetes-validations"]
    assert immutable == {
        "rule": "self == oldSelf",
        "message": "an ESL's spec cannot change: delete it and create it again",
    }


def test_params_name_if_given_is_metadata_name() -> None:
    r = rule(root(ESLS)["x-kubernetes-validations"], "params.name")
    assert r["rule"] == (
        "!has(self.spec.params.name) || self.spec.params.name == self.metadata.name"
    )
    assert "spec.params.name" in r["message"]


ESL_NAMES = ["web", "a", "gang-1", "e" * 30, "e" * 31, "Web", "a.b", "-a", "a-", "a_b", ""]


@pytest.mark.parametrize("name", ESL_NAMES)
def test_an_esls_name_rule_is_the_extenders_esl_name(name: str) -> None:
    """metadata.name becomes params.name: the API server refuses what the ESL would."""
    r = rule(root(ESLS)["x-kubernetes-validations"], "matches(")
    assert "metadata.name" in r["message"]
    crd_accepts = len(name) <= cel_size_limit(r["rule"]) and bool(
        cel_regex(r["rule"]).fullmatch(name)
    )
    try:
        TypeAdapter(Name).validate_python(name)
        service_accepts = True
    except ValidationError:
        service_accepts = False
    assert crd_accepts == service_accepts
    assert root(ESLS)["properties"]["spec"]["properties"]["params"]["properties"]["name"] == {
        "type": "string",
        "maxLength": cel_size_limit(r["rule"]),
    }


# ---- one source: the chart's copy, helm's render, the embedded cluster's ----------------


@pytest.mark.parametrize("name", FILES)
def test_the_charts_copy_is_the_canonical_file(name: str) -> None:
    assert (CHART / "files" / "crds" / name).read_text() == (CRDS / name).read_text()


def test_deploy_crds_lists_both_and_the_base_includes_it() -> None:
    assert sorted(p.name for p in CRDS.glob("*.yaml") if p.name != "kustomization.yaml") == FILES
    assert sorted(p.name for p in (CHART / "files" / "crds").iterdir()) == FILES
    kustomization = yaml.safe_load((CRDS / "kustomization.yaml").read_text())
    assert kustomization["resources"] == FILES
    base = yaml.safe_load((REPO / "deploy" / "base" / "kustomization.yaml").read_text())
    assert "../crds" in base["resources"]
    assert [p.name for p in policy_crds()] == FILES  # what the embedded cluster serves


def helm_template(values: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    try:
        helm = find_tool("helm")
    except MissingBinaryError as e:  # `make tools` builds helm: without it the run is broken
        pytest.fail(str(e), pytrace=False)
    return subprocess.run(
        [str(helm), "template", "escher-extender", str(CHART), "-n", "escher-system", "-f", "-"],
        input=yaml.safe_dump(dict(values)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def rendered_crds(values: Mapping[str, Any]) -> dict[str, Doc]:
    r = helm_template(values)
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}


DOMAINS = ["escher.io", "sched.example.com", "example.com"]


@pytest.mark.parametrize("domain", DOMAINS)
def test_helm_renders_both_crds_in_the_resource_domain(domain: str) -> None:
    crds = rendered_crds({"resourceDomain": domain})
    assert sorted(crds) == [f"ephemeralresources.{domain}", f"esls.{domain}"]
    for name in FILES:
        doc = crds[f"{NAMES[name]['plural']}.{domain}"]
        # Exactly deploy/'s spec but for the group: int64 bounds stay integers, as the chart
        # edits the text (a fromYaml round trip would turn them into floats).
        assert doc["spec"] == {**crd(name)["spec"], "group": domain}
        # Upgraded with the release (templates/, not crds/), kept on uninstall.
        assert doc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_embedded_cluster_serves_what_the_chart_renders(domain: str) -> None:
    crds = rendered_crds({"resourceDomain": domain})
    served = in_domain(load_manifests(policy_crds()), domain)
    assert [m.name for m in served] == [f"{NAMES[f]['plural']}.{domain}" for f in FILES]
    for m in served:
        assert m.body["spec"] == crds[m.name]["spec"]
    assert crd(ERES)["spec"]["group"] == "escher.io"  # the canonical files are left alone


@pytest.mark.parametrize(
    ("values", "count"),
    [({}, 2), ({"crds": {"install": True}}, 2), ({"crds": {"install": False}}, 0)],
)
def test_crds_install_renders_them_or_leaves_them_out(values: Doc, count: int) -> None:
    assert len(rendered_crds(values)) == count


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        ({"crds": {"instal": True}}, "at '/crds': additional properties 'instal' not allowed"),
        ({"crds": {"install": "yes"}}, "at '/crds/install': got string, want boolean"),
    ],
)
def test_the_crds_values_are_checked_by_the_schema(values: Doc, refusal: str) -> None:
    r = helm_template(values)
    assert r.returncode != 0 and refusal in r.stderr, r.stderr
