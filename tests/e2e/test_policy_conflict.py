"""Two writers of one EphemeralResource on the real API server: exactly one write wins, the
loser gets 409 naming what conflicted, and the nodes and the ledger show the winner's values
only (issue 58, item 8).

The conflict is the API server's own, made deterministic by the precondition that
`PUT /v1/resources/{name}?resourceVersion=N` passes on to it (the object's merge patch is
sent at version N; a DELETE's, as its precondition): two clients that read the same version
and both write, or a client whose read another writer (kubectl, here its client library)
overtook before its write, meet the API server's "the object has been modified" whatever
the timing.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import httpx
import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.bench.outage import ledger, shown
from escher_harness.kubeclient import api_client
from escher_harness.waits import until
from escher_harness.workload import Workload

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=3, mode="extender")]

PLURAL = "ephemeralresources"


def read(cluster: localcluster.ClusterInfo, name: str) -> dict[str, Any]:
    api = client.CustomObjectsApi(api_client(cluster.kubeconfig))
    obj = api.get_cluster_custom_object(cluster.resource_domain, "v1alpha1", PLURAL, name)
    return cast(dict[str, Any], obj)


def put(
    cluster: localcluster.ClusterInfo, name: str, capacity: int, rv: str | None = None
) -> httpx.Response:
    return httpx.put(
        f"{cluster.extender_url}/v1/resources/{name}",
        params={"resourceVersion": rv} if rv else None,
        json={"capacity": capacity},
        headers={"Authorization": f"Bearer {cluster.token}"},
        timeout=60,
    )


def everywhere(cluster: localcluster.ClusterInfo, name: str) -> set[tuple[str, str]]:
    """What the nodes show of `name` and what the ledger holds, each node: (where, value)."""
    full = f"{cluster.resource_domain}/{name}"
    work = Workload(api_client(cluster.kubeconfig))
    nodes = shown(cluster, work, name)
    mine = ledger(cluster, name)
    return {(f"node {n}", nodes[n].get(full, "-")) for n in cluster.nodes} | {
        (f"ledger {n}", str(mine[n].get(full, "-"))) for n in cluster.nodes
    }


def only(cluster: localcluster.ClusterInfo, value: int) -> set[tuple[str, str]]:
    return {(f"{w} {n}", str(value)) for w in ("node", "ledger") for n in cluster.nodes}


def assert_lost_clearly(r: httpx.Response, name: str, rv: str) -> None:
    assert r.status_code == 409, (r.status_code, r.text)
    body = r.json()
    assert body["field"] == "name", body
    # It names what conflicted: the resource, its object, the version the write was based on,
    # and the API server's own refusal.
    for words in (
        f"resource {name} was changed by another writer",
        f"resourceVersion {rv}",
        "Operation cannot be fulfilled",  # the API server's own conflict
        "nothing was changed",
    ):
        assert words in body["error"], body["error"]


def test_two_clients_writing_at_the_same_version_one_wins_the_other_gets_409(
    cluster: localcluster.ClusterInfo,
) -> None:
    assert put(cluster, "duel", 2).status_code == 200
    before = read(cluster, "duel")
    rv, generation = before["metadata"]["resourceVersion"], before["metadata"]["generation"]
    answers: dict[int, httpx.Response] = {}
    start = threading.Barrier(2)

    def write(capacity: int) -> None:
        start.wait()
        answers[capacity] = put(cluster, "duel", capacity, rv)

    writers = [threading.Thread(target=write, args=(c,)) for c in (5, 7)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    won = [c for c, r in answers.items() if r.status_code == 200]
    assert len(won) == 1, {c: (r.status_code, r.text) for c, r in answers.items()}
    winner, loser = won[0], 12 - won[0]
    assert_lost_clearly(answers[loser], "duel", rv)
    # The winner's write alone reached the object (one generation on), and the nodes and the
    # ledger show its value on every node, the loser's on none.
    after = read(cluster, "duel")
    assert after["spec"]["capacity"] == winner
    assert after["metadata"]["generation"] == generation + 1
    assert everywhere(cluster, "duel") == only(cluster, winner)


def test_a_write_overtaken_by_kubectl_gets_409_and_kubectl_s_values_stay(
    cluster: localcluster.ClusterInfo,
) -> None:
    assert put(cluster, "overtaken", 2).status_code == 200
    rv = read(cluster, "overtaken")["metadata"]["resourceVersion"]  # the client reads ...
    api = client.CustomObjectsApi(api_client(cluster.kubeconfig))
    api.patch_cluster_custom_object(  # ... another writer goes first ...
        cluster.resource_domain, "v1alpha1", PLURAL, "overtaken", {"spec": {"capacity": 3}}
    )
    until(
        lambda: everywhere(cluster, "overtaken") == only(cluster, 3),
        "the leader applied kubectl's write on every node",
    )
    lost = put(cluster, "overtaken", 9, rv)  # ... and the client writes what it read
    assert_lost_clearly(lost, "overtaken", rv)
    assert read(cluster, "overtaken")["spec"]["capacity"] == 3
    assert everywhere(cluster, "overtaken") == only(cluster, 3)
    # Read again, the write goes through: the 409 asked for exactly that.
    fresh = read(cluster, "overtaken")["metadata"]["resourceVersion"]
    assert put(cluster, "overtaken", 9, fresh).status_code == 200
    assert everywhere(cluster, "overtaken") == only(cluster, 9)


def test_a_version_with_no_object_is_a_409_and_makes_none(
    cluster: localcluster.ClusterInfo,
) -> None:
    r = put(cluster, "never-made", 4, "1")
    assert r.status_code == 409, r.text
    assert r.json()["field"] == "resourceVersion"
    assert "has no EphemeralResource object" in r.json()["error"]
    assert everywhere(cluster, "never-made") == {
        (f"{w} {n}", "-") for w in ("node", "ledger") for n in cluster.nodes
    }


def test_a_delete_overtaken_by_a_write_gets_409_and_the_write_stays(
    cluster: localcluster.ClusterInfo,
) -> None:
    # DELETE takes the same precondition: a client that read the object and deletes it
    # removes nothing if another writer changed it since.
    assert put(cluster, "kept", 2).status_code == 200
    rv = read(cluster, "kept")["metadata"]["resourceVersion"]
    assert put(cluster, "kept", 5).status_code == 200  # another writer, after the read
    headers = {"Authorization": f"Bearer {cluster.token}"}
    url = f"{cluster.extender_url}/v1/resources/kept"
    lost = httpx.delete(url, params={"resourceVersion": rv}, headers=headers, timeout=60)
    assert_lost_clearly(lost, "kept", rv)
    assert read(cluster, "kept")["spec"]["capacity"] == 5
    assert everywhere(cluster, "kept") == only(cluster, 5)
    # At the version read now, it goes.
    fresh = read(cluster, "kept")["metadata"]["resourceVersion"]
    gone = httpx.delete(url, params={"resourceVersion": fresh}, headers=headers, timeout=60)
    assert gone.status_code == 200, gone.text
    until(lambda: everywhere(cluster, "kept") == {
        (f"{w} {n}", "-") for w in ("node", "ledger") for n in cluster.nodes
    }, "the resource gone from every node")  # fmt: skip
