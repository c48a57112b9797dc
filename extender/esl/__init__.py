"""ESCHER Scheduling Libraries (ESLs): scheduling intents turned into ephemeral resources.

An ESL turns an intent ("co-locate these", "gang of 8") into ephemeral resources through
`set_resource` / `get_cluster_state`, and tells the application what its pods must request.

  base      the ESL and Backend protocols, and what every ESL shares
  errors    the ESLs' error taxonomy
  backends  the approaches inside and outside the service (the pure approach's backend,
            which writes Node objects, is extender.esl.kube.nodestatus.NodeBackend)
  client    the typed client of the extender's policy API
  registry  every ESL by name, and the service's store of instances created over HTTP
  shares    weighted max-min fair shares (queues and fair sharing)
  colocation, antiaffinity, loadbalance, locality, binpack, sequencing, queues, fairshare,
  soft, compose, gang: one module per ESL, independent of one another (an import-linter
  contract), found by name in registry.REGISTRY.
"""
