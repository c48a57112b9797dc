"""The gang's Kubernetes side, built from its args: called by extender.cluster.build in the
extender mode (the only one with gangs held at bind).

The lifter lets held members through; the nominator (args.nominate) writes their reserved
nodes; the gate switch (args.gate_switch set) holds deploy/'s adaptive gang-gate policy; the
PodGroup informers fill the declarations index. The service wires and runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.gang.args import GangArgs
from extender.gang.declarations import Declarations
from extender.gang.kube.gateswitch import GateSwitch
from extender.gang.kube.lifter import Lifter
from extender.gang.kube.nominator import Nominator
from extender.gang.kube.podgroups import PodGroups
from extender.kube.handle import Handle


@dataclass(frozen=True, slots=True)
class GangParts:
    lifter: Lifter
    nominator: Nominator | None  # args.nominate
    switch: GateSwitch | None  # args.gate_switch set
    podgroups: PodGroups  # gangs declared as PodGroups

    async def aclose(self) -> None:
        for part in (self.lifter, self.nominator, self.switch):
            if part is not None:
                await part.aclose()


def build(args: GangArgs, handle: Handle, declarations: Declarations) -> GangParts:
    h = handle
    return GangParts(
        lifter=Lifter(h.api, h.keys.gate, h.metrics, h.may_write),
        nominator=Nominator(h.api, h.metrics, h.may_write, args) if args.nominate else None,
        switch=GateSwitch(h.api, args, h.metrics, h.may_write) if args.gate_switch else None,
        podgroups=PodGroups(h.api, declarations, h.metrics),
    )
