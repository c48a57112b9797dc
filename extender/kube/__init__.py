"""The Kubernetes toolkit every feature's Kubernetes side shares.

client: the async, pooled, rate-limited API client; informer: list and watch into a handler;
inflight: writes sent without waiting, bounded; podpatches: counted patches of pods. Only the
`kube` parts of the service import this package or the kubernetes client (import-linter).
"""
