"""escher-extender: a kube-scheduler extender for ESCHER-style ephemeral resources.

Packages, in the direction the layers point (docs/architecture.md draws the map):
  extender.http, extender.app   HTTP: the edge (kube-scheduler's verbs), one router per area
  extender.cluster              the cluster view, leader election, auth, the Kubernetes parts' build
  extender.policies             the policy API's logic, its stores and its objects' reconcilers
  extender.scheduling, extender.filters, extender.gang, extender.esl
                                the verbs, filter/score plugins, gangs, the ESLs
  extender.writeback, extender.dra
                                ephemeral resources on the nodes, or as DRA devices
  extender.kube                 the Kubernetes toolkit; only the features' `kube` parts use it
  extender.core                 the ledger, quantities, pods, gang planning: pure, no I/O
  extender.service              the composition root; extender.settings its one settings object
The harness (embedded control plane, benchmarks, test tooling) is escher_harness, a separate
distribution the service never imports.
"""

__version__ = "0.1.0"
