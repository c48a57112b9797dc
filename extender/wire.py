"""kube-scheduler's extender wire types (k8s.io/kube-scheduler/extender/v1, v1.37), exactly.

The Go types carry no JSON tags, so kube-scheduler sends the Go field names, capitalised
(`Pod`, `Nodes`, `NodeNames`); tests/fixtures/kube-scheduler-v1.37/ holds requests recorded
from the real kube-scheduler. Go's encoding/json reads replies case-insensitively; we reply
capitalised.

Requests are decoded once, with msgspec, into only the fields some decision reads
(extender.core.objects): a value of the wrong JSON type, malformed JSON or nesting too deep
is refused as BadRequest naming the field, before anything is decided. Nodes of a NodeList
(sent when the extender is not nodeCacheCapable) are kept undecoded but for their names,
since a filter reply must echo the passing Node objects back unchanged.

Used by the HTTP routes (extender.http.verbs) and the verbs (extender.scheduling.verbs).
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec
from msgspec import Raw, Struct, field

from extender.core.objects import Pod

# Prioritize scores must lie in 0..MAX_SCORE: kube-scheduler multiplies by weight * 10 and
# adds the result to its plugin scores without clamping, so a larger score would dominate.
MAX_SCORE = 10


class BadRequest(Exception):
    """A request body that is not what kube-scheduler sends; nothing was decided."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class _Wire(Struct, frozen=True, gc=False):
    """Go's field names as they are (no JSON tags upstream); unknown fields are skipped.
    Replies carry every field, as Go's encoding/json writes them (null and "" included)."""


# ---- filter and prioritize -----------------------------------------------------------------


def _empty_object() -> Raw:
    return Raw(b"{}")


class NodeList(_Wire, frozen=True):
    apiVersion: str = ""
    kind: str = ""
    # Echoed back as it came; absent, it is echoed as Go writes an empty ListMeta: an empty
    # Raw would be written as nothing, and the reply would not be JSON.
    metadata: Raw = field(default_factory=_empty_object)
    items: list[Raw] = []


_NAMES_SCHEMA = {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}


class ExtenderArgs(_Wire, frozen=True):
    Pod: Pod
    Nodes: NodeList | None = None
    # []string or null, decoded on demand (node_names): thousands of names a neutral
    # prioritize never reads cost more to decode than the rest of the request.
    NodeNames: Annotated[Raw, msgspec.Meta(extra_json_schema=_NAMES_SCHEMA)] = field(
        default_factory=Raw
    )

    @property
    def node_cache_capable(self) -> bool:
        """Whether kube-scheduler sent names (nodeCacheCapable) rather than a NodeList."""
        return bytes(self.NodeNames) not in (b"", b"null")


class ExtenderFilterResult(_Wire, frozen=True):
    """With nodeCacheCapable false the reply must carry `Nodes` (a reply with only NodeNames
    counts as "no node passed"); with it true, `NodeNames`, each one of the names sent."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = {}
    FailedAndUnresolvableNodes: dict[str, str] = {}
    Error: str = ""


class HostPriority(_Wire, frozen=True):
    Host: str
    Score: int


# ---- bind ------------------------------------------------------------------------------------


class ExtenderBindingArgs(_Wire, frozen=True):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(_Wire, frozen=True):
    Error: str = ""


# ---- preempt ---------------------------------------------------------------------------------


class MetaPod(_Wire, frozen=True):
    UID: str


class MetaVictims(_Wire, frozen=True):
    Pods: list[MetaPod] = []
    NumPDBViolations: int = 0


class Victims(_Wire, frozen=True):
    Pods: list[Pod] = []
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_Wire, frozen=True):
    Pod: Pod
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(Struct, frozen=True, gc=False):
    # Always sent, even empty: kube-scheduler reads it to learn which nodes remain.
    NodeNameToMetaVictims: dict[str, MetaVictims]


# ---- decoding and encoding ---------------------------------------------------------------


class _NodeName(Struct, frozen=True, gc=False):
    class _Meta(Struct, frozen=True, gc=False):
        name: str = ""

    metadata: _Meta = msgspec.field(default_factory=_Meta)


T = TypeVar("T")
_decoders: dict[type, msgspec.json.Decoder[object]] = {}
_node_name = msgspec.json.Decoder(_NodeName)
_names = msgspec.json.Decoder(list[str])
encode = msgspec.json.Encoder().encode


def decode(body: bytes, kind: type[T]) -> T:
    """Decode a request body into `kind`, or raise BadRequest naming the field."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        return decoder.decode(body)  # type: ignore[return-value]
    except msgspec.ValidationError as e:
        message = str(e)
        head, at, path = message.rpartition(" - at `$")
        field = path.rstrip("`").lstrip(".") if at else None
        raise BadRequest(f"{field or 'body'}: {head if at else message}", field or "body") from None
    except msgspec.DecodeError as e:
        raise BadRequest(f"body is not valid JSON: {e}", "body") from None
    except RecursionError:
        raise BadRequest("body is nested too deeply", "body") from None


def node_names(args: ExtenderArgs) -> list[str]:
    """The names of the nodes a filter or prioritize call is about; BadRequest naming the
    field when they are not a list of strings."""
    if args.node_cache_capable:
        try:
            return _names.decode(args.NodeNames)
        except msgspec.ValidationError as e:
            head, at, path = str(e).rpartition(" - at `$")
            field = "NodeNames" + (path.rstrip("`") if at else "")
            raise BadRequest(f"{field}: {head if at else e}", field) from None
    if args.Nodes is not None:
        names = []
        for i, raw in enumerate(args.Nodes.items):
            try:
                name = _node_name.decode(raw).metadata.name
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                name = ""
            if not name:
                field = f"Nodes.items[{i}].metadata.name"
                raise BadRequest(f"{field} is missing or not a string", field)
            names.append(name)
        return names
    raise BadRequest("neither Nodes nor NodeNames is set", "NodeNames")
