"""The write-back: ephemeral resources on the Node objects, equal to the ledger.

nodes: what each node must show (pure and extender modes); nodewriter: the engine that keeps
each node equal to it. The dra mode's write-back is extender.dra, on the same engine; the pure
approach's ESL backend over node status is extender.esl.kube.nodestatus.
"""
