"""`escher-extender bench paper`: the ESCHER paper's control-plane experiments (Bhardwaj et
al., SoCC 2022, Fig. 8) reproduced on the embedded control plane, each beside its figure.

One module per experiment (e7_creation: resource creation latency, Fig. 8a; e8_makespan:
makespan with resources present, Fig. 8b; e9_requested: per-pod latency against resources
requested, Fig. 8c), what they run against (context), the resources they create
(resources), the frame that runs them per mode and repetition (runner), the verdicts on the
paper's claims (verdicts) and the report with its tables and plots (report). Called by
escher_harness.cli; docs/paper.md says what each maps to and what differs from the paper.
"""
