"""A real Scheduler with DRA objects and an in-memory ResourceClaim API, for DynamicResources tests.

:class:`ClaimApi` plays the API server's part for ResourceClaims: merge patches of the claim
(metadata only) and of its ``status`` subresource (status only), guarded by ``metadata.uid`` and
``metadata.resourceVersion`` (409 Conflict when stale), strategic merge patches that delete a
``reservedFor`` entry by ``uid``, and GETs. Every write bumps the resourceVersion and, unless
``deliver`` is off, reaches the scheduler's DRA manager as the informer's update right away.
``before_write`` runs before each write (to play a concurrent writer).

:class:`World` wires it with a Binder that reports bindings back through the pod handlers;
``run(n)`` runs n scheduling cycles and waits for their binding cycles.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from ome_scheduler.config.load import parse_config
from ome_scheduler.kube.client import ApiError
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.dynamicresources import DynamicResources
from ome_scheduler.scheduler import Scheduler
from tests.support.builders import make_node
from tests.support.plugins_env import chart_config

_PATH = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+?)(/status)?$")


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


class ClaimApi:
    """ResourceClaims as the API server keeps them (raw JSON by ``ns/name``)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str, Any]] = []
        """(method, path, body) of every request, reads included."""
        self.deliver = True
        self.world: World | None = None
        self.before_write: Callable[[str, Any], None] | None = None
        self.rv = 100

    def put(self, claim: ResourceClaim) -> ResourceClaim:
        """Create or replace a claim, as another client would (the informer delivers it)."""
        key = f"{claim.metadata.namespace}/{claim.metadata.name}"
        raw = msgspec.to_builtins(claim)
        self.rv += 1
        raw["metadata"]["resourceVersion"] = str(self.rv)
        old = self.objects.get(key)
        self.objects[key] = raw
        self._deliver(old, raw)
        return msgspec.convert(raw, ResourceClaim)

    def _deliver(self, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        if self.world is None or not self.deliver:
            return
        m = self.world.s.dra
        if old is None:
            m.on_claim_add(msgspec.convert(new, ResourceClaim))
        else:
            m.on_claim_update(msgspec.convert(old, ResourceClaim), msgspec.convert(new, ResourceClaim))

    def claim(self, ns: str, name: str) -> ResourceClaim:
        return msgspec.convert(self.objects[f"{ns}/{name}"], ResourceClaim)

    async def get(self, path: str, params: Mapping[str, str] | None = None, **kw: Any) -> bytes:
        self.writes.append(("GET", path, None))
        m = _PATH.match(path)
        assert m is not None, path
        raw = self.objects.get(f"{m[1]}/{m[2]}")
        if raw is None:
            raise ApiError(404, "NotFound", f'resourceclaims.resource.k8s.io "{m[2]}" not found')
        return json.dumps(raw).encode()

    async def patch(self, path: str, body: Any, content_type: str = "application/merge-patch+json", **kw: Any) -> bytes:
        self.writes.append(("PATCH", path, copy.deepcopy(body)))
        if self.before_write is not None:
            self.before_write(path, body)
        await asyncio.sleep(0)
        m = _PATH.match(path)
        assert m is not None, path
        key, status = f"{m[1]}/{m[2]}", bool(m[3])
        cur = self.objects.get(key)
        if cur is None:
            raise ApiError(404, "NotFound", f'resourceclaims.resource.k8s.io "{m[2]}" not found')
        meta = body.get("metadata", {})
        if meta.get("uid") and meta["uid"] != cur["metadata"].get("uid"):
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
        rv = meta.get("resourceVersion")
        if rv and rv != cur["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{m[2]}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        new = copy.deepcopy(cur)
        if content_type == "application/strategic-merge-patch+json":
            for entry in body.get("status", {}).get("reservedFor", []):
                assert entry.get("$patch") == "delete"
                st = new.setdefault("status", {})
                st["reservedFor"] = [r for r in st.get("reservedFor", []) if r.get("uid") != entry["uid"]]
        elif status:
            new["status"] = merge(new.get("status", {}), body.get("status", {}))
        else:
            md = {k: v for k, v in meta.items() if k not in ("uid", "resourceVersion")}
            new["metadata"] = merge(new["metadata"], md)
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = new
        self._deliver(cur, new)
        return json.dumps(new).encode()


class Binder:
    """Binds through the scheduler's pod handlers, as the pod informer would report it."""

    def __init__(self) -> None:
        self.s: Scheduler | None = None
        self.bound: dict[str, str] = {}

    async def bind(self, namespace: str, name: str, uid: str, node: str, *, guard: Any = None) -> None:
        assert self.s is not None
        old = self.s.pods[f"{namespace}/{name}"].pod
        self.bound[name] = node
        self.s.handlers.on_pod_update(
            old, msgspec.structs.replace(old, spec=msgspec.structs.replace(old.spec, node_name=node))
        )


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.nominations: list[tuple[str, str, int]] = []
        """(pod, node, claim writes sent before it) of every ``nominatedNodeName`` patch."""
        self.api: ClaimApi | None = None

    def event(self, obj: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((obj.metadata.name, reason, note))

    def pod_scheduled_false(self, pod: Any, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        pass

    async def nominate(self, pod: Any, node: str, abandon: Any = None) -> None:
        writes = sum(1 for m, _, _ in self.api.writes if m != "GET") if self.api is not None else 0
        self.nominations.append((pod.metadata.name, node, writes))

    def failures(self, pod: str) -> list[str]:
        return [note for name, reason, note in self.events if name == pod and reason == "FailedScheduling"]


class World:
    """A scheduler (the chart's profile), its DRA manager fed through the handlers, a ClaimApi."""

    def __init__(self, nodes: Sequence[str] = ("node-1", "node-2"), config: Mapping[str, Any] | None = None) -> None:
        self.api = ClaimApi()
        self.binder = Binder()
        self.recorder = Recorder()
        self.recorder.api = self.api
        cfg = parse_config(dict(config or chart_config()), "test")
        self.s = Scheduler(cfg, metrics=Metrics(), binder=self.binder, recorder=self.recorder, api_writer=self.api)
        self.binder.s = self.s
        self.api.world = self
        for n in nodes:
            self.s.handlers.on_node_add(make_node(n, {"region": "r1" if n.endswith("1") else "r2"}))

    @property
    def plugin(self) -> DynamicResources:
        pl = self.s.frameworks["ome-scheduler"].plugins["DynamicResources"]
        assert isinstance(pl, DynamicResources)
        return pl

    def add_class(self, c: DeviceClass) -> None:
        self.s.dra.on_class_add(c)

    def add_slice(self, s: ResourceSlice) -> None:
        self.s.dra.on_slice_add(s)

    def add_claim(self, c: ResourceClaim) -> ResourceClaim:
        return self.api.put(c)

    def add_pod(self, p: Pod) -> Pod:
        self.s.handlers.on_pod_add(p)
        return p

    def pod(self, name: str) -> Pod:
        return self.s.pods[f"default/{name}"].pod

    async def run(self, cycles: int, timeout: float = 1.0) -> None:
        """Run ``cycles`` scheduling cycles (each pops one pod), then wait for the binding cycles
        and the plugin's background writes."""
        for _ in range(cycles):
            q = await asyncio.wait_for(self.s.queue.pop(), timeout)
            assert q is not None
            self.s.schedule_one(q)
            await asyncio.sleep(0)
        for _ in range(100):
            if not self.s.cycles.binding_tasks:
                break
            await asyncio.wait(list(self.s.cycles.binding_tasks), timeout=timeout)
            await asyncio.sleep(0)
        await self.plugin.drain()
