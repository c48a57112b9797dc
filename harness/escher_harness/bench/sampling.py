"""How many nodes each benchmarked kube-scheduler looks at per pod, said in the reports.

By default every approach runs as it ships (docs/performance.md, "Each mode as shipped"):
kube-scheduler alone, pure, dra and the peers with kube-scheduler's adaptive
percentageOfNodesToScore (about 42% of the feasible nodes at 1,000 nodes, 10% at 5,000, at
least 100 nodes); the extender as deploy/ runs it, that sampling for the pods that need no
exchange and every feasible node for the pods it decides (gang members, preferences: the
profile `<name>-all-nodes`); the every-pod layout every node for every pod. A benchmark may
equalise the share (`--percentage-of-nodes-to-score N`): that sets the top-level share of every
scheduler's configuration, which a profile's own share (the extender's all-nodes profile)
still overrides, and isolates the exchanges from the sampling. Called by
escher_harness.bench.extender_bench and escher_harness.bench.gang_report.
"""

from __future__ import annotations

AS_SHIPPED = (
    "percentageOfNodesToScore as each approach ships: kube-scheduler's adaptive default for "
    "kube-scheduler alone, pure, dra and the peers; for the extender as deploy/ runs it, that "
    "default for pods that need no exchange and every feasible node (100) for the pods it "
    "decides (gang members, preferences); 100 for the every-pod layout."
)


def sentence(percentage: int | None) -> str:
    """The report's sentence for a run's share (None: each approach as it ships)."""
    if percentage is None:
        return AS_SHIPPED
    share = "kube-scheduler's adaptive default" if percentage == 0 else f"{percentage}"
    return (
        f"percentageOfNodesToScore equalised at {share} for every approach "
        "(--percentage-of-nodes-to-score; a profile's own share, the extender's all-nodes "
        "profile's 100, still applies): this isolates the exchanges, it is not how the "
        "approaches ship."
    )
