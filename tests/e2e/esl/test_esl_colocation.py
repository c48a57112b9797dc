"""Co-location end to end, on both approaches: every member of a group on one node, and
deleting the ESL leaves none of its resources on the Node objects. Also the same through
the service's /v1/esl endpoints (modes extender and dra: the pure approach runs no service)."""

from __future__ import annotations

import httpx
import pytest
from esl_harness import Env, nodes_of

from extender.esl.base import PodRequest
from extender.esl.colocation import Colocation, ColocationParams

pytestmark = pytest.mark.e2e


def test_every_member_of_a_group_lands_on_one_node(env: Env) -> None:
    params = ColocationParams(name="web", groups={"a": 3, "b": 3}, cpu="1")
    esl = Colocation(env.backend, params)
    esl.apply()
    groups = {g: env.pods(esl.requests_for(g), 3, prefix=f"web-{g}-") for g in ("a", "b")}
    for g, names in groups.items():
        placed = env.work.wait(names, timeout=60)
        assert nodes_of(placed) == {esl.node_of(g): 3}, placed
    assert esl.node_of("a") != esl.node_of("b")  # 6 cpu of members: no 4-cpu node holds both
    env.torn_down(esl)


def test_over_http_the_delete_removes_every_resource_from_the_nodes(env: Env) -> None:
    if env.info.extender_url is None:  # the pure approach's cluster runs no service
        pytest.skip("the /v1/esl endpoints are the extender service's (modes extender, dra)")
    http = httpx.Client(
        base_url=str(env.info.extender_url), headers={"Authorization": f"Bearer {env.info.token}"}
    )
    body = {"name": "api", "groups": {"x": 2}}
    r = http.post("/v1/esl/colocation", json=body)
    assert r.status_code == 201, r.text
    view = r.json()
    (resource,) = view["resources"]
    node = next(n for n, rs in env.on_nodes().items() if resource in rs)
    names = env.pods(PodRequest.model_validate(view["requests"]["x"]), 2)
    assert nodes_of(env.work.wait(names, timeout=60)) == {node: 2}
    d = http.delete(f"/v1/esl/{view['id']}")
    assert d.status_code == 200 and d.json()["durable"] is True
    # 200 means the write-back confirmed it: no waiting for the nodes
    assert not any(resource in rs for rs in env.on_nodes().values())
    assert http.get(f"/v1/esl/{view['id']}").status_code == 404
