"""The HTTP surface: one router per area, the verbs' endpoint, and the listeners' limits.

Assembled by extender.app.create_app; served by extender.server.

verbs           kube-scheduler's extender verbs (/filter /prioritize /bind /preempt): an ASGI
                endpoint the edge calls before any routing, and their OpenAPI entries
policy          ESCHER's policy API: /v1/resources, /v1/cluster-state
gangs           /v1/gangs
esl             the ESCHER Scheduling Libraries over HTTP: /v1/esl
ops             /healthz /readyz /metrics
deps            what routes depend on: the runtime, readiness, authentication
errors          every error type mapped to its HTTP status, in one table
edge            ASGI middleware at the edge: body size, read time and UTF-8, // in paths,
                which listener serves the verbs
protocol        uvicorn's HTTP protocol, bounding the connections that wait for a request
tls             TLS on a listener, its handshake bounded as the request's headers are
pending         the connections that have not sent a request yet, bounded in number and time
verbs_listener  the verbs' mutual-TLS HTTP/2 listener (hypercorn), open while ready
h2streams       which HTTP/2 stream that listener sends next: round robin
"""
