"""The harness of escher-extender: what runs, tests and benchmarks the service.

Packages and modules:
  escher_harness.localcluster  the embedded control plane (etcd, kube-apiserver, kube-scheduler,
                               kwok, fake nodes) as processes on loopback, its CLI and Python API
  escher_harness.workload      pods as a workload: create, watch, wait for placement and phases
  escher_harness.listwatch     list, then watch, until the API shows a condition
  escher_harness.peers         the in-framework gang peers (Coscheduling, native gangs)
  escher_harness.bench         the benchmarks (extender, gang, esl) and their figures
  escher_harness.tour          a two-minute tour on the embedded cluster
  escher_harness.pytest_plugin the local_cluster / shared_cluster fixtures
  escher_harness.cli           `escher-extender cluster|demo|bench`

The service (the `extender` package) never imports this one.
"""
