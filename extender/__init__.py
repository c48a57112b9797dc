"""escher-extender: a kube-scheduler extender for ESCHER-style ephemeral resources.

Packages, in the direction the layers point:
  extender.app          HTTP routes (extender verbs, policy API, health, metrics)
  extender.filters      filter/score plugins that decide over the ledger
  extender.esl          ESCHER Scheduling Libraries and the policy API client
  extender.ledger       the in-memory ledger of ephemeral resources (pure, no I/O)
  extender.adapters         the only package that talks to the Kubernetes API
  escher_harness.localcluster the embedded local control plane (etcd, apiserver, scheduler)
"""

__version__ = "0.1.0"
