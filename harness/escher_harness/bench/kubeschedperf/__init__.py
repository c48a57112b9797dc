"""`escher-extender bench scheduling-perf`: kube-scheduling-perf's matrix on the embedded
control plane.

Follows kube-scheduling-perf (github.com/wzshiming/kube-scheduling-perf, and the fork that
publishes results, github.com/songmingming0827/kube-scheduling-perf): 10,000 pods in eight
scenarios (10,000 jobs of 1 pod, 500 of 20, 20 of 500, 1 of 10,000; each without and with
gang scheduling) on 1,000 kwok nodes, created-to-scheduled per pod read from kube-apiserver's
audit log. Not to be confused with escher_harness.bench.scheduler_perf (`bench
scheduler-perf`), which runs upstream Kubernetes' own scheduler_perf.

Modules: shapes (the scenarios, node and pod shapes, submission rates and the published
figures), audit (the audit log read into per-pod times, and the figures from them), submit
(an approach's pods and group objects created at the project's rates), run (the campaign:
a fresh cluster per run, interleaved repetitions) and report (tables and plots). Called by
escher_harness.cli; docs/scheduling-perf.md says what was kept and what changed.
"""
