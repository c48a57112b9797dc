"""escher-extender: a kube-scheduler extender for ESCHER-style ephemeral resources.

One package per feature, each with its Kubernetes side in a `kube` sub-package (or as the
whole package, for the write-back and DRA). In the order the layers contract points
(.importlinter; docs/architecture.md draws the map):
  extender.cli, .server, .app, .service
                        the command line, the listeners, the FastAPI app, and the composition
                        root that builds, starts and stops the parts
  extender.http         the edge, kube-scheduler's verbs' endpoint, one router per area
  extender.cluster      the cluster view, leader election, auth, the build of the Kubernetes parts
  extender.policies     the policy API: its stores and, in policies.kube, its objects'
                        reconcilers (above the ESLs); its logic, policies.api (below the gangs)
  extender.dra          ephemeral resources as DRA devices (mode dra)
  extender.writeback    ephemeral resources on Node status
  extender.scheduling, extender.esl
                        the verbs and the plugin registry; the ESLs
  extender.filters      the filter and score plugins
  extender.gang         gang scheduling
  extender.kube         the Kubernetes toolkit; only the features' Kubernetes sides use it
  extender.core         the ledger, quantities, pods, the plugin protocols: pure, no I/O
Beside the layers: extender.settings (the one settings object, each feature's typed args,
its own <feature>/args.py, nested in it), extender.listen (the listeners' args), metrics,
wire, logs.
The harness (embedded control plane, benchmarks, test tooling) is escher_harness, a separate
distribution the service never imports.
"""

__version__ = "0.1.0"
