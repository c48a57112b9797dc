"""The extender approaches: kube-scheduler + the ESCHER extender, gangs declared by labels
and annotations (extender.gang). Four variants, by when a member is gated:

- extender: never; kube-scheduler tries every member as it comes.
- extender-gated: always: each member is created behind the gang gate (`<domain>/gang`),
  which the extender lifts once its gang has places, so a gang that does not fit is not
  tried by kube-scheduler meanwhile.
- extender-adaptive: deploy/'s adaptive gang gate: its admission policy gates new members
  only while the extender's switch says gangs wait for room.
- extender-marked: extender-adaptive with members created carrying their markers, as a job
  template that names them would: deploy/'s marker policy admits them untouched, so their
  creation pays no patch (split scope only; in every-pod scope it is extender-adaptive).

A gang asking for a topology level carries it as the annotation
`<domain>/gang-required-topology` or `gang-preferred-topology` (the level's name). Rows in
escher_harness.bench.approaches.registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from escher_harness import localcluster
from escher_harness.bench.approaches.base import Approach, Env, Footing, GangJob, create_members
from escher_harness.localcluster.paths import REPO_ROOT
from extender.core.pod import Keys

Gate = Literal["never", "always", "adaptive"]

_GANG = REPO_ROOT / "extender" / "gang"


@dataclass(frozen=True)
class Extender(Approach):
    gate: Gate
    marked: bool = False  # members created with their markers (on the all-nodes profile)

    def cluster_spec(self, dir: Path, footing: Footing) -> localcluster.ClusterSpec:
        return footing.cluster_spec(
            dir, mode="extender", scope=footing.extender_scope, gang_gate=self.gate == "adaptive"
        )

    def submit(self, env: Env, job: GangJob) -> bool:
        a = job.arrival
        domain = env.info.resource_domain
        keys = Keys.for_domain(domain)
        annotations = {
            f"{domain}/gang-min": str(a.size),
            f"{domain}/gang-timeout": f"{job.deadline:g}",
        }
        if job.topology and job.level:
            required = job.topology == "required"
            key = keys.gang_required_topology if required else keys.gang_preferred_topology
            annotations[key] = job.level
        return create_members(
            env,
            job,
            labels={f"{domain}/gang": a.name},
            annotations=annotations,
            gates=(f"{domain}/gang",) if self.gate == "always" else (),
            limits=dict.fromkeys((keys.gang_marker, keys.bind_marker), "0")
            if self.marked
            else None,
            # Marked and on the profile that looks at every node: the policy skips it.
            scheduler=env.marked_scheduler_name if self.marked else None,
        )

    def code(self) -> list[Path]:
        """The gang feature's folder and the filter that keeps others off reserved places;
        gated, also the adapter that lifts the gate, and adaptive, the switch's."""
        files = [*sorted(_GANG.glob("*.py")), REPO_ROOT / "extender" / "filters" / "reservation.py"]
        if self.gate != "never":
            files.append(_GANG / "kube" / "lifter.py")
        if self.gate == "adaptive":
            files.append(_GANG / "kube" / "gateswitch.py")
        return files
