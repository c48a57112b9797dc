"""Scheduling: kube-scheduler's extender verbs, decided over the ledger.

  verbs       filter, prioritize, bind and preempt (called by the HTTP layer, extender.http.verbs)
  preemption  which victims free what a preemptor needs (called by the preempt verb)
  requeue     which pods the filter turned away to wake when their resource frees
  registry    the filters and the weighted scorers the verbs run, built from a Handle

The plugins themselves live in extender.filters (and the gang feature's filter in
extender.gang); extender.service builds the verbs.
"""
