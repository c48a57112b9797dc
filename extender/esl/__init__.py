"""ESCHER Scheduling Libraries (ESLs) and the typed client of the policy API they use.

An ESL turns a scheduling intent ("co-locate these", "gang of 8") into ephemeral resources
through `set_resource` / `get_cluster_state`, and tells the application what its pods must
request. The protocol and what ESLs share are in extender.esl.base; the approaches they run
on (the extender's policy API, its ledger in-process, or Node objects directly) in
extender.esl.backends; every ESL by name in extender.esl.registry.REGISTRY; the HTTP
endpoints (/v1/esl) in extender.esl.routes. `extender.esl.client.PolicyClient` is how ESLs
outside the service reach the extender's policy API.
"""

from extender.esl.base import (
    ESL,
    Backend,
    BackendError,
    Change,
    Dynamic,
    ESLError,
    InvalidParameters,
    NoRoom,
    PodRequest,
    Signalled,
    UnknownKey,
    Unsatisfiable,
    parse_params,
)
from extender.esl.registry import REGISTRY

__all__ = [
    "ESL",
    "REGISTRY",
    "Backend",
    "BackendError",
    "Change",
    "Dynamic",
    "ESLError",
    "InvalidParameters",
    "NoRoom",
    "PodRequest",
    "Signalled",
    "UnknownKey",
    "Unsatisfiable",
    "parse_params",
]
