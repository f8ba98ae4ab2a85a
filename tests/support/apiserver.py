"""A small, real HTTP API server for unit tests of the code that talks to kube-apiserver.

:class:`FakeApiServer` serves plain HTTP on ``127.0.0.1`` (a random port) with ``aiohttp.web``
and plays the parts of kube-apiserver that the leader elector, the HTTPS app's reviews and the
event recorder use, so :class:`~ome_scheduler.kube.client.KubeClient` (its encodings, retries
and error decoding) runs for real:

* ``coordination.k8s.io/v1`` Leases: GET, POST (409 ``AlreadyExists``), PUT guarded by
  ``metadata.resourceVersion`` (409 ``Conflict`` on a stale one); like the registry, a PUT
  replaces the object but keeps ``uid`` and ``creationTimestamp``;
* TokenReviews answered from ``users`` (token -> user info) and SubjectAccessReviews from
  ``allowed`` (``(user, path, verb)``);
* ``events.k8s.io/v1`` events: POST (409 when the name exists) and JSON merge PATCH (404 when
  missing);
* pod status PATCHes: recorded, answered ``{}``; pod Binding POSTs: answered 201 ``Success``;
* collections put in ``lists`` (path -> objects): paged GETs honouring ``limit`` and
  ``continue`` (the token is the next offset), every page with ``metadata.resourceVersion``;
* ``scheduling.x-k8s.io/v1alpha1`` PodGroups in ``pod_groups``: GET, PUT of the ``status``
  subresource guarded by ``metadata.resourceVersion`` (409 on a stale one; only ``status`` is
  taken, as the CRD status strategy does) and JSON merge PATCH of the object (a
  ``metadata.uid`` in the patch is a precondition: 409 when it differs).

Every request is appended to ``requests`` in arrival order (with its monotonic arrival time). ``fail()`` queues error answers,
``hold()`` parks matching requests until released, ``after_get`` runs once after a GET is
answered (to play a concurrent writer). Use it as ``async with FakeApiServer() as api:``; its clients are closed on exit.

``python -m tests.support.apiserver`` runs one as a process of its own (for load tests): it prints its
URL, serves until stdin closes, then prints every request as JSON lines
(``[method, path, arrival]``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ome_scheduler.kube.client import KubeClient

_LEASE = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?$")
_EVENT = re.compile(r"^/apis/events\.k8s\.io/v1/namespaces/([^/]+)/events(?:/([^/]+))?$")
_POD_STATUS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/status$")
_BINDING = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding$")
_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")
_PODGROUP = re.compile(r"^/apis/scheduling\.x-k8s\.io/v1alpha1/namespaces/([^/]+)/podgroups/([^/]+?)(/status)?$")


@dataclass
class Request:
    """One request as the server saw it; ``body`` is the decoded JSON (None when empty)."""

    method: str
    path: str
    content_type: str
    body: Any
    authorization: str
    query: dict[str, str] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)


@dataclass
class Hold:
    """Parks the next ``times`` matching requests: ``arrived`` is set when one comes in,
    ``release`` lets them go."""

    method: str
    path: str
    times: int
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def status(code: int, reason: str, message: str) -> web.Response:
    """A ``metav1.Status`` failure answer, as kube-apiserver writes it."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``application/merge-patch+json``)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class FakeApiServer:
    """See the module docstring. ``url`` is set once started."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.leases: dict[str, dict[str, Any]] = {}  # "ns/name" -> Lease
        self.events: dict[str, dict[str, Any]] = {}  # "ns/name" -> Event
        self.pods: dict[str, dict[str, Any]] = {}  # "ns/name" -> Pod (for Bindings)
        self.pod_groups: dict[str, dict[str, Any]] = {}  # "ns/name" -> PodGroup
        self.lose_binding_responses = 0
        """Apply the next N Bindings but answer 500, as if the response was lost on the way."""
        self.users: dict[str, dict[str, Any]] = {}  # bearer token -> TokenReview status.user
        self.allowed: set[tuple[str, str, str]] = set()  # (username, path, verb)
        self.lists: dict[str, list[dict[str, Any]]] = {}  # collection path -> objects
        self.after_get: Callable[[], None] | None = None
        self._faults: list[list[Any]] = []  # [method, path, code, remaining]
        self._holds: list[Hold] = []
        self._rv = itertools.count(100)
        self._uid = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._clients: list[KubeClient] = []
        self.url = ""

    async def __aenter__(self) -> FakeApiServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for h in self._holds:
            h.release.set()
        for c in self._clients:
            await c.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def client(self, **kw: Any) -> KubeClient:
        """A KubeClient for this server (no rate limit unless ``qps`` is given); closed on exit."""
        kw.setdefault("qps", 0)
        kw.setdefault("burst", 1)
        c = KubeClient(self.url, False, "test-token", **kw)
        self._clients.append(c)
        return c

    # ---- test controls -------------------------------------------------------------------

    def sent(self, method: str | None = None, path: str | None = None) -> list[Request]:
        """The requests received, filtered by method and by path prefix."""
        return [
            r
            for r in self.requests
            if (method is None or r.method == method) and (path is None or r.path.startswith(path))
        ]

    def fail(self, method: str, path: str, code: int, times: int = 1) -> None:
        """Answer the next ``times`` requests matching ``method`` and the ``path`` prefix with ``code``."""
        self._faults.append([method, path, code, times])

    def hold(self, method: str, path: str, times: int = 1) -> Hold:
        """Park the next ``times`` requests matching ``method`` and the ``path`` prefix until
        ``release`` is set."""
        h = Hold(method, path, times)
        self._holds.append(h)
        return h

    def next_rv(self) -> str:
        return str(next(self._rv))

    def put_lease(self, namespace: str, name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
        """Write a Lease directly, as another client would (a new resourceVersion)."""
        key = f"{namespace}/{name}"
        old = self.leases.get(key)
        md = {"name": name, "namespace": namespace, **metadata, "resourceVersion": self.next_rv()}
        md["uid"] = old["metadata"]["uid"] if old else f"lease-uid-{next(self._uid)}"
        obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md, "spec": spec}
        self.leases[key] = obj
        return obj

    def lease(self, namespace: str, name: str) -> dict[str, Any]:
        return self.leases[f"{namespace}/{name}"]

    def put_pod_group(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a PodGroup as another client would write it (a new resourceVersion, a UID kept
        or made); returns the stored object."""
        md = obj["metadata"]
        key = f"{md['namespace']}/{md['name']}"
        old = self.pod_groups.get(key)
        uid = md.get("uid") or (old["metadata"]["uid"] if old else f"pg-uid-{next(self._uid)}")
        stored = merge_patch(obj, {"metadata": {"uid": uid, "resourceVersion": self.next_rv()}})
        self.pod_groups[key] = stored
        return stored

    # ---- serving -------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        req = Request(
            request.method,
            request.path,
            request.headers.get("Content-Type", ""),
            body,
            request.headers.get("Authorization", ""),
            dict(request.query),
        )
        self.requests.append(req)
        for h in self._holds:
            if h.method == req.method and req.path.startswith(h.path) and h.times > 0:
                h.times -= 1
                h.arrived.set()
                await h.release.wait()
        for f in self._faults:
            if f[0] == req.method and req.path.startswith(f[1]) and f[3] > 0:
                f[3] -= 1
                return status(f[2], "InternalError" if f[2] >= 500 else "Forbidden", "injected failure")
        resp = self._route(req)
        if req.method == "GET" and self.after_get is not None:
            hook, self.after_get = self.after_get, None
            hook()
        return resp

    def _route(self, req: Request) -> web.Response:
        if m := _LEASE.match(req.path):
            return self._lease(req, m.group(1), m.group(2))
        if m := _EVENT.match(req.path):
            return self._event(req, m.group(1), m.group(2))
        if req.method == "GET" and req.path in self.lists:
            items = self.lists[req.path]
            start = int(req.query.get("continue") or 0)
            end = start + int(req.query.get("limit") or len(items) or 1)
            md = {"resourceVersion": "7", **({"continue": str(end)} if end < len(items) else {})}
            return web.json_response({"kind": "List", "metadata": md, "items": items[start:end]})
        if m := _PODGROUP.match(req.path):
            return self._pod_group(req, m.group(1), m.group(2), bool(m.group(3)))
        if m := _BINDING.match(req.path):
            return self._binding(req, m.group(1), m.group(2))
        if (m := _POD.match(req.path)) and req.method == "GET":
            pod = self.pods.get(f"{m.group(1)}/{m.group(2)}")
            return web.json_response(pod) if pod else status(404, "NotFound", f'pods "{m.group(2)}" not found')
        if _POD_STATUS.match(req.path) and req.method == "PATCH":
            return web.json_response({})
        if req.path == "/apis/authentication.k8s.io/v1/tokenreviews" and req.method == "POST":
            user = self.users.get(req.body["spec"]["token"])
            st: dict[str, Any] = (
                {"authenticated": True, "user": user}
                if user is not None
                else {"authenticated": False, "error": "invalid bearer token"}
            )
            return web.json_response({**req.body, "status": st}, status=201)
        if req.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews" and req.method == "POST":
            spec = req.body["spec"]
            attrs = spec["nonResourceAttributes"]
            ok = (spec["user"], attrs["path"], attrs["verb"]) in self.allowed
            return web.json_response({**req.body, "status": {"allowed": ok}}, status=201)
        return status(404, "NotFound", f"the server could not find the requested resource ({req.path})")

    def _binding(self, req: Request, ns: str, name: str) -> web.Response:
        ok = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        pod = self.pods.get(f"{ns}/{name}")
        if pod is None:  # pods the test did not register: every Binding succeeds
            return web.json_response(ok, status=201)
        node = pod["spec"].get("nodeName")
        if node:
            return status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                f'already assigned to node "{node}"',
            )
        pod["spec"]["nodeName"] = req.body["target"]["name"]
        if self.lose_binding_responses > 0:
            self.lose_binding_responses -= 1
            return status(500, "InternalError", "response lost")
        return web.json_response(ok, status=201)

    def _lease(self, req: Request, ns: str, name: str | None) -> web.Response:
        if name is None:
            if req.method != "POST":
                return status(405, "MethodNotAllowed", req.method)
            name = req.body["metadata"]["name"]
            if f"{ns}/{name}" in self.leases:
                return status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists')
            obj = self.put_lease(ns, name, req.body.get("spec", {}), **_user_metadata(req.body))
            return web.json_response(obj, status=201)
        key = f"{ns}/{name}"
        old = self.leases.get(key)
        if req.method == "GET":
            if old is None:
                return status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            return web.json_response(old)
        if req.method == "PUT":
            if old is None:
                return status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            rv = req.body.get("metadata", {}).get("resourceVersion", "")
            if rv and rv != old["metadata"]["resourceVersion"]:
                return status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                )
            obj = self.put_lease(ns, name, req.body.get("spec", {}), **_user_metadata(req.body))
            return web.json_response(obj)
        return status(405, "MethodNotAllowed", req.method)

    def _pod_group(self, req: Request, ns: str, name: str, sub: bool) -> web.Response:
        old = self.pod_groups.get(f"{ns}/{name}")
        if old is None:
            return status(404, "NotFound", f'podgroups.scheduling.x-k8s.io "{name}" not found')
        conflict = status(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on podgroups.scheduling.x-k8s.io "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
        )
        if req.method == "GET" and not sub:
            return web.json_response(old)
        if req.method == "PUT" and sub:
            rv = req.body.get("metadata", {}).get("resourceVersion", "")
            if rv != old["metadata"]["resourceVersion"]:
                return conflict
            return web.json_response(self.put_pod_group({**old, "status": req.body.get("status", {})}))
        if req.method == "PATCH" and not sub:
            uid = (req.body.get("metadata") or {}).get("uid")
            if uid and uid != old["metadata"]["uid"]:
                return conflict
            return web.json_response(self.put_pod_group(merge_patch(old, req.body)))
        return status(405, "MethodNotAllowed", req.method)

    def _event(self, req: Request, ns: str, name: str | None) -> web.Response:
        if name is None and req.method == "POST":
            name = req.body["metadata"]["name"]
            key = f"{ns}/{name}"
            if key in self.events:
                return status(409, "AlreadyExists", f'events.events.k8s.io "{name}" already exists')
            obj = merge_patch(req.body, {"metadata": {"resourceVersion": self.next_rv()}})
            self.events[key] = obj
            return web.json_response(obj, status=201)
        if name is not None and req.method == "PATCH":
            key = f"{ns}/{name}"
            if key not in self.events:
                return status(404, "NotFound", f'events.events.k8s.io "{name}" not found')
            self.events[key] = merge_patch(self.events[key], req.body)
            return web.json_response(self.events[key])
        return status(405, "MethodNotAllowed", req.method)


def _user_metadata(body: dict[str, Any]) -> dict[str, Any]:
    """The metadata a write may set (the server owns name, namespace, uid and resourceVersion)."""
    md = body.get("metadata", {})
    return {k: v for k, v in md.items() if k not in ("name", "namespace", "uid", "resourceVersion")}


async def _main() -> None:
    async with FakeApiServer() as api:
        print(api.url, flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
        for r in api.requests:
            sys.stdout.write(json.dumps([r.method, r.path, r.at]) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(_main())
