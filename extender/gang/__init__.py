"""Gang scheduling in the extender: all-or-nothing placement of a gang's members.

The whole feature lives here, with its lifecycle: a gang is created when its first member
appears and destroyed when its last member is gone.

  spec      the declaration on the members' labels and annotations
  topology  the node-label levels a gang may require or prefer one domain of
  plan      a node for every member at once (pure)
  planning  one reservation attempt as a job, run inline or in a worker thread
  state     a gang's members, places and phase (plain data)
  places    which place a member takes; moving one kube-scheduler refused
  manager   the gangs' state: members from the pod informer, reservations, expiry
  barrier   members wait at bind until the gang's minimum is there
  gate      members created held, let through once their gang has places
  plugin    the filter plugin (listed in extender.scheduling.registry)
  status    what GET /v1/gangs shows

The scheduling verbs, the filter plugin and the HTTP routes see gangs through the `Gangs`
protocol, as Coscheduling's plugin sees its core.Manager; GangManager is the implementation.
docs/gangs.md explains how all-or-nothing holds and how to declare a gang.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from extender.core.plugins import Verdict
    from extender.core.pod import PodInfo
    from extender.gang.state import Arrival, GangState


class Gangs(Protocol):
    clock: Callable[[], float]  # monotonic: what GangState's deadlines are in

    def filter(self, pod: PodInfo, nodes: Sequence[str]) -> Verdict | Awaitable[Verdict] | None:
        """Pass a member only its reserved node, or turn every node away with why; None for
        a pod of no gang, or of a gang already bound. An awaitable when the verdict waits for
        a plan made off the event loop."""
        ...

    def arrive(self, uid: str, node: str) -> Arrival:
        """A member reached bind on `node`: wait at the barrier, refused, or None (bind it
        as any other pod)."""
        ...

    def bound(self, uid: str, node: str) -> None:
        """The member's Binding was created."""
        ...

    def gangs(self) -> list[GangState]: ...
