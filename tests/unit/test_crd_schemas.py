"""The policies' CRDs (deploy/crds) say what the HTTP policy API says: same fields, same
bounds, the same ESL kinds. A schema written twice cannot drift from the service's models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core import quantity
from extender.esl.registry import REGISTRY
from extender.policy import ResourceSpec

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy" / "crds"
CHART_COPY = REPO / "deploy" / "helm" / "escher-extender" / "files" / "crds"
FILES = sorted(p.name for p in CRDS.glob("escher.io_*.yaml"))


def schema(name: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / name).read_text())
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    return dict(version["schema"]["openAPIV3Schema"])


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w.title() for w in rest)


def test_both_kinds_ship_and_the_charts_copy_is_the_same() -> None:
    assert FILES == ["escher.io_ephemeralresources.yaml", "escher.io_esls.yaml"]
    for name in FILES:
        assert (CHART_COPY / name).read_text() == (CRDS / name).read_text(), name


def test_an_ephemeral_resource_has_the_set_resource_body_and_its_bounds() -> None:
    spec = schema("escher.io_ephemeralresources.yaml")["properties"]["spec"]
    model = ResourceSpec.model_json_schema()["properties"]
    assert set(spec["properties"]) == {camel(f) for f in ResourceSpec.model_fields}
    assert spec["required"] == ["capacity"]
    capacity = spec["properties"]["capacity"]
    # int64 is the bound (the API server holds a `maximum` as a float64, where 2^63-1 is not
    # an integer): the same range as the ledger's.
    assert capacity["minimum"] == 0 and "maximum" not in capacity
    assert capacity["format"] == "int64" and quantity.MAX == 2**63 - 1

    def bounds(prop: dict[str, Any]) -> dict[str, Any]:
        (typed,) = [a for a in prop.get("anyOf", [prop]) if a.get("type") != "null"]
        keys = ("maxLength", "maxProperties", "minimum", "maximum")
        return {k: typed[k] for k in keys if k in typed}

    for field in ("node", "node_selector", "node_spec", "num_nodes"):
        crd = spec["properties"][camel(field)]
        assert bounds(model[field]) == {k: crd[k] for k in bounds(model[field])}, field
        assert bounds(model[field]), f"{field} is unbounded"


def test_an_esl_takes_exactly_the_registered_kinds() -> None:
    spec = schema("escher.io_esls.yaml")["properties"]["spec"]
    assert spec["properties"]["kind"]["enum"] == sorted(REGISTRY)
    assert spec["properties"]["params"]["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["required"] == ["kind", "params"]


@pytest.mark.parametrize("name", FILES)
def test_each_kind_is_cluster_scoped_with_status_and_printer_columns(name: str) -> None:
    crd = yaml.safe_load((CRDS / name).read_text())
    (version,) = crd["spec"]["versions"]
    assert crd["spec"]["scope"] == "Cluster" and crd["spec"]["group"] == "escher.io"
    assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.escher.io"
    assert version["subresources"] == {"status": {}}
    assert len(version["additionalPrinterColumns"]) >= 4
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert conditions["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
