"""The policy feature: ESCHER's set_resource and get_cluster_state, and where changes go.

api: the policy logic over the ledger (pure); store: the PolicyStore protocol and the
in-memory store; kube: policies kept as EphemeralResource and ESL objects, reconciled by the
leader. The HTTP routes are extender.http.policy and extender.http.esl.
"""
