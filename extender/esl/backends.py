"""The Backends ESLs run on, besides the pure approach's (extender.esl.kube.nodestatus).

- LedgerBackend: the extender approach inside the service (the /v1/esl endpoints): applies
  changes to the service's ledger through extender.policies.api, as PUT /v1/resources does, and
  waits for the write-back to make them durable, remembering whether every change was.
- ExtenderBackend: the extender approach from outside the service, through its policy API
  (extender.esl.client.PolicyClient): the ledger decides, the write-back persists.

Refusals are the core's errors (extender.core.errors), whichever backend: the remote one
turns the policy API's answer back into the error the service raised.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.core.errors import Conflict, CoreError, InvalidValue, NoMatch, NotFound, UnknownNode
from extender.core.ledger import Ledger
from extender.esl.base import UNBOUNDED
from extender.esl.client import PolicyAPIError, PolicyClient
from extender.gang import topology
from extender.policies import api as policy
from extender.policies.api import ClusterState, ResourceSpec


class LedgerBackend:
    """The service's own ledger. `wait(version, nodes)` blocks until the write-back has
    those nodes at that version, or its wait runs out (None: nothing to wait for, as in the
    standalone mode); `durable` stays True while every change since `begin()` was confirmed.

    `claim(name)` is called before a resource is set, `release(name)` once it is removed:
    the object store records each resource of an ESL as an object it owns, before the
    resource exists, so a new leader knows every resource an instance may have made.
    """

    def __init__(
        self,
        ledger: Ledger,
        domain: str,
        *,
        wait: Callable[[int, list[str]], bool] | None = None,
        learn: bool = False,
        in_path: bool = True,
        claim: Callable[[str, ResourceSpec], None] | None = None,
        release: Callable[[str], None] | None = None,
        hierarchy: topology.Hierarchy | None = None,
        unbounded: int = UNBOUNDED,
    ) -> None:
        self.ledger = ledger
        self.unbounded = unbounded
        self.hierarchy = hierarchy or topology.parse(topology.DEFAULT)
        self._claim = claim
        self._release = release
        self.domain = domain
        self.in_path = in_path
        self._wait = wait
        self._learn = learn
        self.durable = True

    def begin(self) -> None:
        self.durable = True

    def _confirm(self, version: int, nodes: list[str]) -> None:
        if self._wait is not None and nodes and not self._wait(version, nodes):
            self.durable = False

    def set_resource(self, name: str, spec: ResourceSpec) -> dict[str, int]:
        if self._claim is not None:
            self._claim(name, spec)
        _, nodes, version = policy.set_resource(self.ledger, self.domain, name, spec, self._learn)
        self._confirm(version, list(nodes))
        return nodes

    def delete_resource(self, name: str) -> None:
        try:
            # Forced: the ESL that created it removes it; pods holding it keep running.
            _, nodes, version = policy.delete_resource(self.ledger, self.domain, name, force=True)
        except NotFound:
            nodes = []  # no node has it: what was wanted
        else:
            self._confirm(version, nodes)
        if self._release is not None and self.durable:
            self._release(name)

    def cluster_state(self) -> ClusterState:
        return policy.cluster_state(self.ledger.snapshot())


class ExtenderBackend:
    """The extender's policy API. `in_path`: the cluster runs the extender in kube-scheduler's
    path (extender mode), not only its write-back (pure mode). `hierarchy`: the service's
    topology levels (its `--gang-topology`), which the policy API does not serve.
    `unbounded`: UNBOUNDED_DRA when the service runs in mode dra."""

    def __init__(
        self,
        client: PolicyClient,
        domain: str = "escher.io",
        in_path: bool = True,
        hierarchy: topology.Hierarchy | None = None,
        unbounded: int = UNBOUNDED,
    ):
        self.client = client
        self.unbounded = unbounded
        self.hierarchy = hierarchy or topology.parse(topology.DEFAULT)
        self.domain = domain
        self.in_path = in_path

    def set_resource(self, name: str, spec: ResourceSpec) -> dict[str, int]:
        try:
            return self.client.put_resource(name, spec).nodes
        except PolicyAPIError as e:
            if e.status == 404 and e.field == "node" and spec.node is not None:
                raise UnknownNode([spec.node]) from e  # what the service raised
            raise refusal(e) from e

    def delete_resource(self, name: str) -> None:
        try:
            self.client.delete_resource(name, force=True)
        except PolicyAPIError as e:
            if e.status != 404:  # 404: no node has it, which is what was wanted
                raise refusal(e) from e

    def cluster_state(self) -> ClusterState:
        try:
            return self.client.cluster_state()
        except PolicyAPIError as e:
            raise refusal(e) from e


def refusal(e: PolicyAPIError) -> CoreError:
    """The core error the service raised, from its policy API's answer."""
    message = str(e)
    if e.status == 404:
        return NotFound(message, e.field)
    if e.status == 409:
        return Conflict(message, e.field)
    if e.status == 422 and e.field in ("node_selector", "node_spec", "node"):
        return NoMatch(message, e.field)
    if e.status in (400, 422):
        return InvalidValue(message, e.field)
    return CoreError(message, e.field)
