"""The service's presence in a cluster, and the composition of every Kubernetes side.

view: the ledger filled from the API server (nodes, pods); leader: leader election over a
Lease; auth: who may call the policy API (TokenReview, SubjectAccessReview); build: the
composition root of the Kubernetes parts, calling each feature's own build.
"""
