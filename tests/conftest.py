"""Shared test set-up: the local control plane's fixtures (local_cluster, shared_cluster)."""

pytest_plugins = ["escher_harness.pytest_plugin"]
