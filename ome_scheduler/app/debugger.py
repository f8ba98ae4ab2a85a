"""The cache debugger: compare the scheduler's view with the API server, dump it, settle
assumptions whose confirmation never came.

Mirrors kube-scheduler's ``pkg/scheduler/backend/cache/debugger`` (``comparer.go``,
``dumper.go``, ``signal.go``): on ``SIGUSR2`` (``app/run.py`` installs the handler)
:meth:`CacheDebugger.run_once` logs a dump of the cache and the queue, then compares. Unlike
upstream, which compares the cache with its own informers' listers, the comparison is with
a fresh LIST from the API server, so it also catches an informer that missed an event:

* **nodes**: every Node the server has is in the cache with the same resourceVersion, and
  the cache holds no other (``missed``, ``redundant``, ``stale``);
* **pods**: every bound pod is accounted on its node, and nothing else is (``missed``,
  ``redundant``, ``wrong-node``); the pod lister holds every pod at its current version;
* **assumed pods** whose Binding succeeded: the server shows them bound there and the
  informer has not said so (``assumed-not-confirmed``), or not (``assumed-not-bound``,
  ``assumed-pod-gone``); assumptions still binding or waiting at Permit are not drift;
* **queue**: every pending pod this scheduler serves is queued, in a cycle, or assumed
  (``pending-pod-not-queued``);
* **PodGroups**: the pod-group state holds every PodGroup at its current version;
* **plugins**: whatever ``Plugin.check_state`` reports (OMEGangPack: pins against
  PodGroups and bound members).

A difference is reported only if a second comparison :data:`CONFIRM_DELAY` seconds later
finds it again (same object, same kind of difference): events still on their way are not
drift. Each one is logged as ``"Cache mismatch" kind=... object=... what=... detail=...``
and the comparison ends with ``"Cache comparer finished" differences=N`` (V(0)).

**Assumed pods whose confirmation never comes.** kube-scheduler has no expiry for assumed
pods since 1.30, and neither has this scheduler: expiring an assumption while the pod is in
fact bound would free its capacity twice. Instead, every :data:`ASSUMED_CHECK_INTERVAL`
seconds, an assumed pod whose Binding succeeded more than :data:`ASSUMED_RECHECK_AFTER`
seconds ago without the informer showing it bound is read with a GET: bound to its node,
it stays assumed (it is bound: the capacity is used) and the pod informer relists, which
delivers the missing update and confirms it; gone, re-created, unbound or bound elsewhere,
the assumption is forgotten (its capacity freed, the pods waiting for capacity woken, a pod of
ours that is still pending queued again) and the pod informer relists.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ome_scheduler.api.core import PodHead
from ome_scheduler.api.meta import MetaOnly
from ome_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from ome_scheduler.framework.gangsource import gang_name
from ome_scheduler.framework.interface import ClusterTruth
from ome_scheduler.framework.types import GangKey, PodKey, gang_key
from ome_scheduler.kube.client import TRANSPORT_ERRORS, ApiError, KubeClient
from ome_scheduler.kube.informer import Informer, list_raw
from ome_scheduler.logs import enabled, get_logger
from ome_scheduler.scheduler import Scheduler

log = get_logger()

CONFIRM_DELAY = 2.0
"""Seconds between the two comparisons whose common differences are reported."""
ASSUMED_RECHECK_AFTER = 30.0
"""Seconds after its Binding succeeded that an unconfirmed assumed pod is checked with a GET."""
ASSUMED_CHECK_INTERVAL = 10.0
"""Seconds between two looks for overdue assumptions."""

_POD = msgspec.json.Decoder(PodHead)
_META = msgspec.json.Decoder(MetaOnly)


@dataclass(frozen=True, order=True)
class Difference:
    """One way the scheduler's view differs from the API server.

    ``kind``: ``node``, ``pod``, ``pod-lister``, ``assumed``, ``queue``, ``podgroup`` or
    ``plugin:<name>``; ``object``: the node name, ``namespace/name`` or gang key; ``what``: a
    short stable label (``missed``, ``redundant``, ``stale``...); ``detail``: free text.
    """

    kind: str
    object: str
    what: str
    detail: str = field(default="", compare=False)

    def key(self) -> tuple[str, str, str]:
        """What identifies the difference across two comparisons (the detail may change)."""
        return (self.kind, self.object, self.what)


@dataclass
class _Truth:
    """One fresh LIST of nodes, pods and PodGroups (None when the CRD is not served)."""

    nodes: dict[str, MetaOnly]
    pods: dict[str, PodHead]
    pod_groups: dict[GangKey, MetaOnly] | None


def _compare_objects(
    kind: str, where: str, have: Mapping[Any, Any], truth: Mapping[Any, MetaOnly], *, extra: Any = None
) -> list[Difference]:
    """``missed`` (in ``truth``, not in ``have``), ``stale`` (another resourceVersion or UID) and
    ``redundant`` (in ``have``, not in ``truth``; ``extra`` overrides which keys) differences
    between objects by key; ``have`` holds records with ``metadata``."""
    out: list[Difference] = []
    for key, m in truth.items():
        obj = have.get(key)
        if obj is None:
            out.append(Difference(kind, key, "missed", f"in the API server, not in {where}"))
        elif obj.metadata.resource_version != m.metadata.resource_version or obj.metadata.uid != m.metadata.uid:
            rv, want = obj.metadata.resource_version, m.metadata.resource_version
            out.append(Difference(kind, key, "stale", f"{where} has resourceVersion {rv}, the server {want}"))
    for key in sorted(have.keys() - truth.keys() if extra is None else extra):
        out.append(Difference(kind, key, "redundant", f"in {where}, not in the API server"))
    return out


class CacheDebugger:
    """Comparer, dumper and assumption settler over one scheduler and its informers.

    ``informers`` by name (``app/informers.py``): ``nodes`` and ``pods`` are required,
    ``podgroups`` is used when present.
    """

    def __init__(self, client: KubeClient, scheduler: Scheduler, informers: Mapping[str, Informer[Any]]) -> None:
        self.client = client
        self.scheduler = scheduler
        self.informers = informers
        self._lock = asyncio.Lock()

    # ---- the signal ------------------------------------------------------------------------

    async def run_once(self) -> list[Difference]:
        """Dump, compare and log (what ``SIGUSR2`` does); returns the differences found.

        A comparison that cannot LIST (the server out of reach) logs ``"Cache comparer
        failed"`` and returns no differences. Concurrent calls run one after the other.
        """
        async with self._lock:
            self.dump()
            log.info("Cache comparer started", v=0)
            try:
                diffs = await self.compare()
            except (*TRANSPORT_ERRORS, ApiError, msgspec.DecodeError) as exc:
                log.error("Cache comparer failed", error=repr(exc))
                return []
            for d in diffs:
                log.info("Cache mismatch", v=0, kind=d.kind, object=d.object, what=d.what, detail=d.detail)
            log.info("Cache comparer finished", v=0, differences=len(diffs))
            return diffs

    # ---- comparer --------------------------------------------------------------------------

    async def compare(self) -> list[Difference]:
        """The differences found twice, :data:`CONFIRM_DELAY` seconds apart, sorted.

        Raises:
            ApiError, aiohttp.ClientError, TimeoutError, msgspec.DecodeError: a LIST failed.
        """
        first = self.differences(await self.fetch_truth())
        if not first:
            return []
        await asyncio.sleep(CONFIRM_DELAY)
        again = {d.key() for d in first}
        return sorted(d for d in self.differences(await self.fetch_truth()) if d.key() in again)

    async def fetch_truth(self) -> _Truth:
        """LIST nodes, pods (the pod informer's selector) and PodGroups from the API server."""
        nodes_inf, pods_inf = self.informers["nodes"], self.informers["pods"]
        raw_nodes, _ = await list_raw(self.client, nodes_inf.path, nodes_inf.params)
        raw_pods, _ = await list_raw(self.client, pods_inf.path, pods_inf.params)
        nodes = {m.metadata.name: m for m in (_META.decode(r) for r in raw_nodes)}
        pods: dict[str, PodHead] = {}
        for r in raw_pods:
            p = _POD.decode(r)
            pods[f"{p.metadata.namespace}/{p.metadata.name}"] = p
        groups: dict[GangKey, MetaOnly] | None = None
        pg_inf = self.informers.get("podgroups")
        if pg_inf is not None:
            try:
                raw_groups, _ = await list_raw(self.client, pg_inf.path, pg_inf.params)
            except ApiError as exc:
                if exc.code != 404:
                    raise
            else:
                groups = {}
                for r in raw_groups:
                    m = _META.decode(r)
                    groups[gang_key(m.metadata.namespace, m.metadata.name)] = m
        return _Truth(nodes, pods, groups)

    def differences(self, truth: _Truth) -> list[Difference]:
        """Every difference between the scheduler's view now and ``truth`` (no confirmation)."""
        out: list[Difference] = []
        out += self._nodes(truth)
        out += self._pods(truth)
        out += self._queue(truth)
        out += self._pod_groups(truth)
        out += self._plugins(truth)
        return out

    def _nodes(self, truth: _Truth) -> list[Difference]:
        cached = {n: ni.node for n, ni in self.scheduler.cache.nodes.items() if ni.node is not None}
        return _compare_objects("node", "the cache", cached, truth.nodes)

    def _pods(self, truth: _Truth) -> list[Difference]:
        out = []
        cache = self.scheduler.cache
        by_uid = {p.metadata.uid: (k, p) for k, p in truth.pods.items()}
        bound = cache.bound_pods()
        assumed = {pi.pod_key: (pi, node, at) for pi, node, at in cache.assumed_pods()}
        for uid, (key, p) in by_uid.items():
            node = p.spec.node_name
            if not node:
                continue
            have = bound.get(PodKey(uid))
            if have is None:
                if PodKey(uid) not in assumed:
                    out.append(Difference("pod", key, "missed", f"bound to {node}, not accounted in the cache"))
            elif have[1] != node:
                out.append(Difference("pod", key, "wrong-node", f"bound to {node}, accounted on {have[1]}"))
        for uid, (pi, node) in bound.items():
            api = by_uid.get(uid)
            if api is None or not api[1].spec.node_name:
                out.append(Difference("pod", pi.key, "redundant", f"accounted on {node}, not bound in the API server"))
        for uid, (pi, node, at) in assumed.items():
            if at is None:
                continue  # still binding, or waiting at Permit
            api = by_uid.get(uid)
            if api is None:
                out.append(Difference("assumed", pi.key, "assumed-pod-gone", f"assumed on {node}; the pod is gone"))
            elif api[1].spec.node_name == node:
                out.append(
                    Difference("assumed", pi.key, "assumed-not-confirmed", f"bound to {node}; the update never came")
                )
            else:
                got = api[1].spec.node_name or "no node"
                out.append(Difference("assumed", pi.key, "assumed-not-bound", f"assumed on {node}, the server: {got}"))
        pods_inf = self.informers["pods"]
        lister = self.scheduler.pods
        for key, p in truth.pods.items():
            if key in pods_inf.invalid:
                continue  # unreadable: kept out of the lister on purpose (and reported by its own path)
            listed = lister.get(key)
            if listed is None:
                out.append(Difference("pod-lister", key, "missed", "in the API server, not in the pod lister"))
            elif listed.pod.metadata.resource_version != p.metadata.resource_version or listed.uid != p.metadata.uid:
                rv, want = listed.pod.metadata.resource_version, p.metadata.resource_version
                note = f"lister has resourceVersion {rv}, the server {want}"
                out.append(Difference("pod-lister", key, "stale", note))
        for key in lister.keys() - truth.pods.keys():
            out.append(Difference("pod-lister", key, "redundant", "in the pod lister, not in the API server"))
        return out

    def _queue(self, truth: _Truth) -> list[Difference]:
        out = []
        sched, queue = self.scheduler, self.scheduler.queue
        pods_inf = self.informers["pods"]
        for key, p in truth.pods.items():
            md = p.metadata
            if p.spec.node_name or md.deletion_timestamp is not None or p.spec.scheduler_name not in sched.frameworks:
                continue
            if key in pods_inf.invalid or key in pods_inf.failed:
                continue  # said why in an event; waits for its next change on purpose
            uid = PodKey(md.uid)
            if queue.contains(uid) or uid in queue.in_flight or sched.cache.is_assumed(uid):
                continue
            if sched.get_waiting_pod(uid) is not None:
                continue
            out.append(Difference("queue", key, "pending-pod-not-queued", "pending, ours, and in no queue"))
        return out

    def _pod_groups(self, truth: _Truth) -> list[Difference]:
        if truth.pod_groups is None:
            return []
        have = self.scheduler.pod_group_state.groups()
        pg_inf = self.informers.get("podgroups")
        invalid = pg_inf.invalid if pg_inf is not None else {}
        readable = {k: m for k, m in truth.pod_groups.items() if k not in invalid}
        return _compare_objects(
            "podgroup", "the pod-group state", have, readable, extra=have.keys() - truth.pod_groups.keys()
        )

    def _plugins(self, truth: _Truth) -> list[Difference]:
        bound: dict[GangKey, dict[str, str]] = {}
        for key, p in truth.pods.items():
            g = gang_name(p.metadata)
            if g and p.spec.node_name:
                bound.setdefault(gang_key(p.metadata.namespace, g), {})[key] = p.spec.node_name
        groups = {k: m.metadata.uid for k, m in (truth.pod_groups or {}).items()}
        labels = {n: m.metadata.labels for n, m in truth.nodes.items()}
        view = ClusterTruth(pod_groups=groups, bound_members=bound, node_labels=labels)
        out = []
        seen: set[int] = set()
        for fw in self.scheduler.frameworks.values():
            for pl in fw.plugins.values():
                if id(pl) in seen:
                    continue
                seen.add(id(pl))
                for obj, what, detail in pl.check_state(view):
                    out.append(Difference(f"plugin:{pl.name}", obj, what, detail))
        return out

    # ---- dumper ----------------------------------------------------------------------------

    def dump(self) -> None:
        """Log the cache (a summary at V(0), one line per node at V(4)) and the queue (V(0))."""
        cache, queue = self.scheduler.cache, self.scheduler.queue
        nodes, pods, assumed = cache.counts()
        log.info("Dump of cached NodeInfo", v=0, nodes=nodes, pods=pods, assumedPods=assumed)
        if enabled(4):
            for name, ni in sorted(cache.nodes.items()):
                log.info(
                    "cached node",
                    v=4,
                    node=name,
                    deleted=ni.node is None,
                    allocatable=repr(ni.allocatable),
                    requested=repr(ni.requested),
                    pods=sorted(p.key for p in ni.pods.values()),
                    assumed=sorted(p.key for p in ni.pods.values() if cache.is_assumed(p.pod_key)),
                )
        waiting = sorted(wp.pod_info.key for wp in self.scheduler.waiting_pods())
        in_flight = len(queue.in_flight)
        log.info("Dump of scheduling queue", v=0, inFlight=in_flight, waitingAtPermit=waiting, **queue.pending())

    # ---- overdue assumptions ---------------------------------------------------------------

    async def settle_assumed(self, now: float | None = None) -> int:
        """Check with a GET every assumed pod whose Binding succeeded more than
        :data:`ASSUMED_RECHECK_AFTER` seconds before ``now`` (monotonic; default: now) and the
        informer has not confirmed (rule in the module docstring). Returns how many were
        forgotten; stops at the first transport error (the next round tries again)."""
        now = time.monotonic() if now is None else now
        cache = self.scheduler.cache
        forgotten = 0
        relist = False
        for pi, node, at in cache.unconfirmed(now - ASSUMED_RECHECK_AFTER):
            try:
                raw: bytes | None = await self.client.get(f"/api/v1/namespaces/{pi.namespace}/pods/{pi.name}")
            except ApiError as exc:
                if exc.code != 404:
                    continue
                raw = None
            except TRANSPORT_ERRORS:
                break
            if cache.assumed_node(pi.pod_key) != node:
                continue  # confirmed or forgotten while we asked
            head = _POD.decode(raw) if raw else None
            relist = True
            waited = round(now - at, 1)
            if head is not None and head.metadata.uid == pi.uid and head.spec.node_name == node:
                log.info("assumed pod is bound but its update never came; relisting pods", v=0, pod=pi.key, node=node)
                continue
            state = "gone" if head is None or head.metadata.uid != pi.uid else (head.spec.node_name or "unbound")
            log.info("forgetting an assumed pod", v=0, pod=pi.key, node=node, server=state, waitedSeconds=waited)
            cache.forget_pod(pi.pod_key)
            forgotten += 1
            self.scheduler.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pi.pod, None)
            live = self.scheduler.pods.get(pi.key)
            if head is not None and state == "unbound" and live is not None and live.uid == pi.uid:
                if live.pod.spec.scheduler_name in self.scheduler.frameworks and not self.scheduler.queue.contains(
                    pi.pod_key
                ):
                    self.scheduler.queue.add(live)
        if relist:
            self.informers["pods"].request_relist()
        return forgotten

    async def settle_assumed_forever(self) -> None:
        """:meth:`settle_assumed` every :data:`ASSUMED_CHECK_INTERVAL` seconds until cancelled."""
        while True:
            await asyncio.sleep(ASSUMED_CHECK_INTERVAL)
            try:
                await self.settle_assumed()
            except Exception as exc:
                log.error("Unhandled Error", task="settle_assumed", err=repr(exc), exc_info=exc)
