"""A Kubernetes API server on loopback for unit tests: scripted, or holding a small cluster.

FakeAPI serves a test's function of an httpx.Request (plain or async). The httpx.Response it
returns is sent back; a Stream is sent line by line (a watch); an httpx.TransportError it
raises drops the connection unanswered. The KubeAPI under test reaches it over a real socket,
through a kubeconfig, as it reaches an API server; only the answers are scripted.

Cluster is such a function holding nodes and pods as the API server does: resourceVersions,
the status subresource patched by JSON merge patch with the resourceVersion precondition
(409 on a stale one), list pages with continue tokens, watches from a resourceVersion (410
when it is older than what is kept), Bindings with the pod's UID as precondition, and the
TokenReview / SubjectAccessReview of the callers it is told about, and the policy CRDs'
objects (ephemeralresources, esls of escher.io: generation, finalizers and deletion, merge
patches, the status subresource by JSON patch; no garbage collection). `fail` makes the next
matching requests fail; `requests` keeps every request seen. Used by the unit tests of the
Kubernetes sides and the service's tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from escher_harness.localcluster.config import render_kubeconfig
from extender.kube.client import KubeAPI


@dataclass
class Stream:
    """A streamed 200 reply: each line as it comes (a watch's events)."""

    lines: AsyncIterator[bytes]


Handler = Callable[[httpx.Request], httpx.Response | Stream | Awaitable[httpx.Response | Stream]]


class FakeAPI:
    def __init__(self, handler: Handler, tmp_path: Path) -> None:
        self._handler = handler
        # Bound now, served once a loop runs: the kubeconfig must name the port before the
        # service (and its KubeAPI) is made.
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.kubeconfig = tmp_path / "kubeconfig"
        self.kubeconfig.write_text(render_kubeconfig(self.url, "token"))
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> FakeAPI:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # An open watch the client closes is cancelled, not waited for.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1
        )
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            scripted = self._handler(
                httpx.Request(
                    request.method,
                    str(request.url),
                    headers=dict(request.headers),
                    content=await request.read(),
                )
            )
            reply = await scripted if inspect.isawaitable(scripted) else scripted
        except httpx.TransportError:
            # The script says the server cannot be reached: drop the connection unanswered,
            # so that the client sees a transport failure, not an HTTP status.
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPServiceUnavailable() from None  # never reaches the client
        if isinstance(reply, Stream):
            out = web.StreamResponse(headers={"Content-Type": "application/json"})
            await out.prepare(request)
            async for line in reply.lines:
                await out.write(line + b"\n")
            await out.write_eof()
            return out
        return web.Response(
            status=reply.status_code,
            body=reply.content,
            headers={"Content-Type": reply.headers.get("content-type", "application/json")},
        )


@contextlib.asynccontextmanager
async def connected(handler: Handler, tmp_path: Path, qps: float = 1000) -> AsyncIterator[KubeAPI]:
    """The service's API client, connected to `handler` served on loopback."""
    fake = FakeAPI(handler, tmp_path)
    api = KubeAPI(fake.kubeconfig, qps=qps, burst=int(qps))
    async with fake:
        try:
            yield api
        finally:
            await api.aclose()


def status(code: int, message: str) -> httpx.Response:
    """An API server's Status reply."""
    return httpx.Response(code, json={"kind": "Status", "code": code, "message": message})


@dataclass
class _Fault:
    method: str
    path: str  # a prefix of the request's path
    code: int
    times: int
    param: str  # a query parameter the request must carry ("": any request)


@dataclass
class _Kind:
    """One kind's objects by key, and the events kept for watches."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


CUSTOM = ("ephemeralresources", "esls")
_GROUP = ["apis", "escher.io", "v1alpha1"]
DRA = ("resourceslices", "resourceclaims", "deviceclasses")
_DRA_GROUP = ["apis", "resource.k8s.io", "v1"]


class Cluster:
    """Nodes and pods as an API server holds them (see the module's docstring)."""

    def __init__(self) -> None:
        self.version = 100
        self.compacted = 0  # watches from a version below this one get 410
        self.kinds = {n: _Kind() for n in ("nodes", "pods", *CUSTOM, *DRA)}
        self.requests: list[httpx.Request] = []
        self.times: list[float] = []  # the event loop's time of each request
        self.faults: list[_Fault] = []
        self.users: dict[str, str] = {}  # token -> username
        self.grants: set[tuple[str, str, str]] = set()  # (username, verb, resource[/subresource])
        self.hold: dict[str, asyncio.Event] = {}  # path -> released: requests wait for it
        self._changed = asyncio.Condition()
        self._stopped = False

    # ---- what tests do to the cluster --------------------------------------------------

    def add_node(
        self,
        name: str,
        allocatable: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        shown = {"cpu": "4", "memory": "8Gi", "pods": "110", **(allocatable or {})}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "status": {"capacity": dict(shown), "allocatable": dict(shown)},
        }
        return self.put("nodes", name, node)

    def put(self, kind: str, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (another writer's change); its watch event follows."""
        objects = self.kinds[kind].objects
        self._store(kind, key, obj, "MODIFIED" if key in objects else "ADDED")
        return obj

    def delete(self, kind: str, key: str) -> None:
        obj = self.kinds[kind].objects.pop(key)
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self._event(kind, "DELETED", obj)

    def node(self, name: str) -> dict[str, Any]:
        return self.kinds["nodes"].objects[name]

    def fail(self, method: str, path: str, code: int, times: int = 1, param: str = "") -> None:
        """The next `times` requests of `method` to a path starting with `path` (and carrying
        the query parameter `param`, if given) answer `code` (0: dropped unanswered)."""
        self.faults.append(_Fault(method, path, code, times, param))

    def compact(self) -> None:
        """Forget the events so far: a watch from before now gets 410 Gone."""
        self.compacted = self.version
        for kind in self.kinds.values():
            kind.events.clear()

    def stop_watches(self) -> None:
        """End every open watch (as the API server's timeout does)."""
        self._stopped = True
        asyncio.get_running_loop().create_task(self._notify())

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == path]

    # ---- the API server ----------------------------------------------------------------

    async def __call__(self, request: httpx.Request) -> httpx.Response | Stream:
        self.requests.append(request)
        self.times.append(asyncio.get_running_loop().time())
        path = request.url.path
        gate = self.hold.get(path)
        if gate is not None:
            await gate.wait()
        for fault in self.faults:
            if (
                fault.times
                and request.method == fault.method
                and path.startswith(fault.path)
                and (not fault.param or fault.param in request.url.params)
            ):
                fault.times -= 1
                if fault.code == 0:
                    raise httpx.ConnectError("dropped")
                return status(fault.code, f"injected {fault.code}")
        parts = path.strip("/").split("/")
        if request.method == "GET" and path in ("/api/v1/nodes", "/api/v1/pods"):
            kind = parts[-1]
            if request.url.params.get("watch") == "true":
                return self._watch(kind, request)
            return self._list(kind, request)
        if parts[:3] == _GROUP and len(parts) >= 4 and parts[3] in CUSTOM:
            if len(parts) == 4 and request.method == "GET":
                if request.url.params.get("watch") == "true":
                    return self._watch(parts[3], request)
                return self._list(parts[3], request)
            return self._custom(request, parts[3], parts[4] if len(parts) > 4 else "", parts[5:])
        if parts[:3] == _DRA_GROUP and len(parts) >= 4 and parts[3] in DRA:
            if len(parts) == 4 and request.method == "GET":
                if request.url.params.get("watch") == "true":
                    return self._watch(parts[3], request)
                return self._list(parts[3], request)
            return self._plain(request, parts[3], parts[4] if len(parts) > 4 else "")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) >= 4:
            return self._node_status(request, parts[3])
        if parts[-1] == "binding":
            return self._bind(request, parts[3], parts[5])
        if path.endswith("/tokenreviews"):
            token = json.loads(request.content)["spec"]["token"]
            user = self.users.get(token)
            review = {"authenticated": True, "user": {"username": user}} if user else {}
            return httpx.Response(201, json={"status": review})
        if path.endswith("/subjectaccessreviews"):
            spec = json.loads(request.content)["spec"]
            attrs = spec["resourceAttributes"]
            what = attrs["resource"] + (f"/{attrs['subresource']}" if attrs["subresource"] else "")
            grant = (spec["user"], attrs["verb"], what)
            return httpx.Response(201, json={"status": {"allowed": grant in self.grants}})
        return status(404, f"{path} not found")

    def _list(self, kind: str, request: httpx.Request) -> httpx.Response:
        selected = _selector(request.url.params.get("fieldSelector", ""))
        objects = self.kinds[kind].objects
        keys = sorted(k for k, o in objects.items() if selected(o))
        start = int(request.url.params.get("continue") or 0)
        limit = int(request.url.params.get("limit") or len(keys) or 1)
        chunk = keys[start : start + limit]
        more = start + limit < len(keys)
        meta = {
            "resourceVersion": str(self.version),
            "continue": str(start + limit) if more else "",
        }
        items = [self.kinds[kind].objects[k] for k in chunk]
        return httpx.Response(200, json={"metadata": meta, "items": items})

    def _watch(self, kind: str, request: httpx.Request) -> httpx.Response | Stream:
        since = int(request.url.params.get("resourceVersion") or 0)
        selected = _selector(request.url.params.get("fieldSelector", ""))
        if since < self.compacted:
            return status(410, f"too old resource version: {since} ({self.compacted})")
        self._stopped = False

        async def lines() -> AsyncIterator[bytes]:
            sent = since
            while True:
                for version, type_, obj in list(self.kinds[kind].events):
                    if version > sent:
                        sent = version
                        if not selected(obj):
                            continue
                        yield json.dumps({"type": type_, "object": obj}).encode()
                async with self._changed:
                    if self._stopped:
                        return
                    await self._changed.wait()

        return Stream(lines())

    def _node_status(self, request: httpx.Request, name: str) -> httpx.Response:
        node = self.kinds["nodes"].objects.get(name)
        if node is None:
            return status(404, f'nodes "{name}" not found')
        if request.method == "GET":
            return httpx.Response(200, json=node)
        patch = json.loads(request.content)
        wanted = patch.get("metadata", {}).get("resourceVersion")
        if wanted is not None and wanted != node["metadata"]["resourceVersion"]:
            return status(409, "the object has been modified")
        new = copy.deepcopy(node)
        for section, values in patch.get("status", {}).items():
            target = new["status"].setdefault(section, {})
            for k, v in values.items():
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = v
        return httpx.Response(200, json=self._store("nodes", name, new, "MODIFIED"))

    def _custom(
        self, request: httpx.Request, kind: str, name: str, sub: list[str]
    ) -> httpx.Response:
        objects = self.kinds[kind].objects
        body = json.loads(request.content) if request.content else {}
        if request.method == "POST" and not name:
            name = body["metadata"]["name"]
            if name in objects:
                return _exists(kind, name)
            self.version += 1
            meta = body["metadata"]
            meta.update(uid=f"uid-{name}-{self.version}", generation=1)
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            body.pop("status", None)
            return httpx.Response(201, json=self._store(kind, name, body, "ADDED"))
        obj = objects.get(name)
        if obj is None:
            return status(404, f'{kind} "{name}" not found')
        if request.method == "GET":
            return httpx.Response(200, json=obj)
        new = copy.deepcopy(obj)
        if request.method == "DELETE":
            wanted = body.get("preconditions", {}).get("resourceVersion")
            if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
                return status(409, "the object has been modified")
            if not new["metadata"].get("finalizers"):
                self.delete(kind, name)
                return httpx.Response(200, json={"kind": "Status", "status": "Success"})
            new["metadata"].setdefault("deletionTimestamp", "2026-01-01T00:00:01Z")
            return httpx.Response(200, json=self._store(kind, name, new, "MODIFIED"))
        if sub == ["status"]:  # a JSON patch: [{"op": "add", "path": "/status", ...}]
            for op in body:
                new["status"] = op["value"]
            return httpx.Response(200, json=self._store(kind, name, new, "MODIFIED"))
        wanted = body.get("metadata", {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            return status(409, "the object has been modified")
        _merge(new, {k: v for k, v in body.items() if k != "status"})
        if new.get("spec") != obj.get("spec"):
            new["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self.delete(kind, name)
            return httpx.Response(200, json=new)
        return httpx.Response(200, json=self._store(kind, name, new, "MODIFIED"))

    def _plain(self, request: httpx.Request, kind: str, name: str) -> httpx.Response:
        """A cluster-scoped built-in kind: create, get, replace (resourceVersion checked),
        delete."""
        objects = self.kinds[kind].objects
        body = json.loads(request.content) if request.content else {}
        if request.method == "POST" and not name:
            name = body["metadata"]["name"]
            if name in objects:
                return _exists(kind, name)
            body["metadata"]["uid"] = f"uid-{name}-{self.version + 1}"
            return httpx.Response(201, json=self._store(kind, name, body, "ADDED"))
        obj = objects.get(name)
        if obj is None:
            return status(404, f'{kind} "{name}" not found')
        if request.method == "GET":
            return httpx.Response(200, json=obj)
        if request.method == "DELETE":
            self.delete(kind, name)
            return httpx.Response(200, json=obj)
        wanted = body.get("metadata", {}).get("resourceVersion")
        if wanted != obj["metadata"]["resourceVersion"]:
            return status(409, "the object has been modified")
        body["metadata"]["uid"] = obj["metadata"]["uid"]
        return httpx.Response(200, json=self._store(kind, name, body, "MODIFIED"))

    def _bind(self, request: httpx.Request, namespace: str, name: str) -> httpx.Response:
        binding = json.loads(request.content)
        pod = self.kinds["pods"].objects.get(f"{namespace}/{name}")
        if pod is None or pod["metadata"].get("uid") != binding["metadata"].get("uid"):
            return status(404, f'pods "{name}" not found')
        if pod["spec"].get("nodeName"):
            return status(409, f"pod {name} is already assigned to node")
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = binding["target"]["name"]
        self._store("pods", f"{namespace}/{name}", new, "MODIFIED")
        return httpx.Response(201, json={"kind": "Status", "status": "Success"})

    def _store(self, kind: str, key: str, obj: dict[str, Any], type_: str) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.kinds[kind].objects[key] = obj
        self._event(kind, type_, obj)
        return obj

    def _event(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        self.kinds[kind].events.append((self.version, type_, copy.deepcopy(obj)))
        with contextlib.suppress(RuntimeError):  # set up before the loop runs: no watch yet
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


def _exists(kind: str, name: str) -> httpx.Response:
    return status(409, f'{kind} "{name}" already exists')


def _selector(text: str) -> Callable[[dict[str, Any]], bool]:
    """A field selector of `a.b=value` terms joined by commas (what the service sends)."""
    terms = [t.partition("=")[::2] for t in text.split(",") if t]

    def field_of(obj: dict[str, Any], path: str) -> str:
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return "" if value is None else str(value)

    return lambda obj: all(field_of(obj, p) == v for p, v in terms if not p.endswith("!"))


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386: null removes, objects merge, anything else replaces."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
