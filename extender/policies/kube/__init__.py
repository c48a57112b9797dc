"""Policies kept as Kubernetes objects (EphemeralResource, ESL), reconciled by the leader.

objects: their wire shapes and bodies; loop: the controller pattern both kinds share;
resources and esls: the two reconcilers and the façade's writes; objectstore: the PolicyStore
(extender.policies.store) the policy API uses when settings.policy.objects.
"""
