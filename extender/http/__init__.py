"""The HTTP surface, one router per area, assembled by extender.app.create_app.

verbs    kube-scheduler's extender verbs: /filter /prioritize /bind /preempt
policy   ESCHER's policy API: /v1/resources, /v1/cluster-state
gangs    /v1/gangs
esl      the ESCHER Scheduling Libraries over HTTP: /v1/esl
ops      /healthz /readyz /metrics
deps     what routes depend on: the runtime, readiness, authentication
errors   every error type mapped to its HTTP status, in one table
edge     ASGI middleware at the edge: body size and read time, // in paths
server   uvicorn's HTTP protocol with a header read timeout
"""
