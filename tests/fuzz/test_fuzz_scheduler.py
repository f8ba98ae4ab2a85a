"""Fuzzing: objects the API server accepts, through the informer handlers and whole scheduling cycles.

Each example draws one small cluster (``strategies.world``: namespaces, nodes, PodGroups,
pods referring to each other, with hostile but legal values) and runs it through a real
:class:`~ome_scheduler.scheduler.Scheduler` (the chart's profile):

1. every object is delivered, either as a decoded record straight to the handlers (an
   exception fails the test at once) or as the raw JSON of a watch event through the informer
   built by ``app.build_informer`` (the production decode path; nothing may end in the
   informer's ``invalid`` or ``failed``: an accepted object must decode and be handled);
2. the scheduling loop runs until the queue is drained (bounded), each cycle timed: no cycle
   may take longer than ``MAX_CYCLE_SECONDS``, no pod may fail with an Error
   (``SchedulerError``) but those upstream gives too (:data:`DRA_ERRORS`), and bound pods come
   back from the "API server" as updates;
3. then updates (labels, requests, a bound pod's node, a slice's pool generation) and deletes of
   every kind, and another round of cycles (DynamicResources' claim writes go to an in-memory
   API server and come back through the claim informer); finally Permit waits are rejected and
   binding cycles drained (bounded).

CI runs ``OME_FUZZ_EXAMPLES`` examples per delivery mode (default 300, derandomized: the same
examples every run, no example database), over 10,000 objects; the module's last test checks
the count. Raise the number locally for a longer search.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, cast

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ome_scheduler.app.informers import INFORMERS, InformerSpec, build_informer
from ome_scheduler.config.load import parse_config
from ome_scheduler.kube.client import ApiError, KubeClient
from ome_scheduler.kube.informer import Informer
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler
from ome_scheduler.util.quantity import INT64_MAX, milli_value, parse_quantity, value
from tests.fuzz import strategies as fz
from tests.support.dra_env import merge
from tests.support.plugins_env import chart_config

EXAMPLES = int(os.environ.get("OME_FUZZ_EXAMPLES", "300"))
MAX_CYCLE_SECONDS = 1.0
"""The longest one scheduling cycle may take on a shared CI core (they take milliseconds)."""
MIN_OBJECTS = 10_000
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
SPECS = {spec.name: spec for spec in INFORMERS}
KIND = {
    "namespaces": "namespace",
    "nodes": "node",
    "podgroups": "pod_group",
    "pods": "pod",
    "resourceclaims": "claim",
    "resourceslices": "slice",
    "deviceclasses": "class",
}
ORDER = ("namespaces", "nodes", "podgroups", "deviceclasses", "resourceslices", "resourceclaims", "pods")
DRA_ERRORS = (
    "asks for all devices, but resource pool",
    "because a claim constraint would not be satisfied",
    "got deleted in the meantime",
    "got allocated elsewhere in the meantime",
    ": 404 NotFound: ",
)
"""Error statuses upstream gives too, the only SchedulerErrors a fuzzed cluster may show: an
``All`` request over an incomplete pool or against its own ``matchAttribute``, and a claim that churn deleted or changed while
PreBind was writing it (binding cycles overlap the churn)."""
stats = {"objects": 0, "cycles": 0, "longest_cycle": 0.0, "bound": 0, "bound_with_claims": 0, "examples": 0}


class Recorder:
    """Keeps every event and PodScheduled condition."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.conditions: list[tuple[str, str, str]] = []

    def event(self, regarding: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((regarding.metadata.name, reason, note))

    def pod_scheduled_false(self, pod: Any, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        self.conditions.append((pod.metadata.name, reason, message))

    async def nominate(self, pod: Any, node: str, abandon: Any = None) -> None:
        await asyncio.sleep(0)


class Binder:
    """Binds at once and remembers where, so the "API server" can send the bound pod back."""

    def __init__(self) -> None:
        self.bound: list[tuple[str, str, str]] = []

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.bound.append((namespace, name, node))


class ClaimWriter:
    """The API server's side of DynamicResources' claim writes: merge patches of a claim's
    metadata or status guarded by ``resourceVersion`` (409 when stale), the reservation removal,
    GETs; each write comes back through the claim informer."""

    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    def _key(self, path: str) -> tuple[tuple[str, str], bool]:
        parts = path.split("/")
        return ("resourceclaims", f"{parts[5]}/{parts[7]}"), path.endswith("/status")

    async def get(self, path: str, params: Any = None, **kw: Any) -> bytes:
        key, _ = self._key(path)
        obj = self.c.objects.get(key)
        if obj is None:
            raise ApiError(404, "NotFound", "not found")
        return json.dumps(obj).encode()

    async def patch(self, path: str, body: Any, content_type: str = "", **kw: Any) -> bytes:
        key, status = self._key(path)
        cur = self.c.objects.get(key)
        if cur is None:
            raise ApiError(404, "NotFound", "not found")
        meta = body.get("metadata", {})
        if meta.get("resourceVersion") not in (None, cur["metadata"]["resourceVersion"]):
            raise ApiError(409, "Conflict", "the object has been modified")
        new = json.loads(json.dumps(cur))
        if content_type == "application/strategic-merge-patch+json":
            gone = {e["uid"] for e in body["status"]["reservedFor"]}
            st_ = new.setdefault("status", {})
            st_["reservedFor"] = [r for r in st_.get("reservedFor", []) if r.get("uid") not in gone]
        elif status:
            new["status"] = merge(new.get("status", {}), body.get("status", {}))
        else:
            new["metadata"] = merge(new["metadata"], {k: v for k, v in meta.items() if k != "resourceVersion"})
        self.c.deliver("resourceclaims", "MODIFIED", new)
        return json.dumps(new).encode()


class Cluster:
    """One scheduler fed the way the API server would feed it."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.recorder = Recorder()
        self.binder = Binder()
        cfg = parse_config(chart_config(), "fuzz")
        self.s = Scheduler(
            cfg, metrics=Metrics(), binder=self.binder, recorder=self.recorder, api_writer=ClaimWriter(self)
        )
        self.informers: dict[str, Informer[Any]] = {
            name: build_informer(cast(KubeClient, None), spec, self.s) for name, spec in SPECS.items()
        }
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = 1

    def _owner(self, spec: InformerSpec) -> Any:
        return getattr(self.s, spec.owner)

    def deliver(self, informer: str, action: str, obj: dict[str, Any]) -> None:
        """ADDED/MODIFIED/DELETED of ``obj`` on ``informer``, by the cluster's delivery mode."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        md = obj["metadata"]
        key = (informer, f"{md.get('namespace', '')}/{md['name']}")
        prev = self.objects.get(key)
        stats["objects"] += 1
        if action == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        if self.mode == "json":
            inf = self.informers[informer]
            inf._handle_line(json.dumps({"type": action, "object": obj}).encode())
            assert inf.invalid == {}, f"an accepted object did not decode: {inf.invalid}"
            assert inf.failed == {}, f"a handler raised on an accepted object: {inf.failed}"
            return
        spec = SPECS[informer]
        owner, kind = self._owner(spec), KIND[informer]
        rec = msgspec.convert(obj, spec.record)
        if action == "DELETED":
            getattr(owner, f"on_{kind}_delete")(rec)
        elif prev is None:
            getattr(owner, f"on_{kind}_add")(rec)
        else:
            getattr(owner, f"on_{kind}_update")(msgspec.convert(prev, spec.record), rec)

    async def cycles(self, limit: int) -> None:
        """Pop and schedule until nothing is active or ``limit`` cycles ran; each cycle timed."""
        q = self.s.queue
        for _ in range(limit):
            if not len(q.active) and not len(q.backoff):
                break
            qp = await asyncio.wait_for(q.pop(), 1.0)
            assert qp is not None
            t0 = time.perf_counter()
            self.s.schedule_one(qp)
            took = time.perf_counter() - t0
            stats["cycles"] += 1
            stats["longest_cycle"] = max(stats["longest_cycle"], took)
            assert took < MAX_CYCLE_SECONDS, f"a scheduling cycle took {took:.3f}s for {qp.pod_info.key}"
            for _ in range(3):
                await asyncio.sleep(0)  # let binding cycles run
        self.return_bound_pods()

    def return_bound_pods(self) -> None:
        """Send each bound pod back as an update carrying its node, as the API server would."""
        bound, self.binder.bound = self.binder.bound, []
        for ns, name, node in bound:
            obj = self.objects.get(("pods", f"{ns}/{name}"))
            if obj is None:
                continue
            obj = json.loads(json.dumps(obj))
            obj["spec"]["nodeName"] = node
            stats["bound"] += 1
            stats["bound_with_claims"] += bool(obj["spec"].get("resourceClaims"))
            self.deliver("pods", "MODIFIED", obj)

    async def shutdown(self) -> None:
        """Reject Permit waits and drain the binding cycles (bounded)."""
        for wp in list(self.s.waiting_pods()):
            wp.reject("", "fuzz run over")
        await self.s.drain_bindings(timeout=2.0)
        for task in list(self.s.cycles.binding_tasks):
            task.cancel()
        errors = [c for c in self.recorder.conditions if c[1] == "SchedulerError"]
        assert not [c for c in errors if not any(e in c[2] for e in DRA_ERRORS)], errors


def churn(draw: st.DrawFn, c: Cluster, w: dict[str, list[dict[str, Any]]]) -> None:
    """Updates and deletes of every kind: relabel, new requests, a bound pod moved, objects deleted."""
    for obj in w["nodes"]:
        if draw(st.integers(0, 3)) == 0:
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["labels"].update(draw(fz.labels))
            obj["status"]["allocatable"].update(draw(fz.resource_list(["cpu", "memory", "nvidia.com/gpu"], 2)))
            c.deliver("nodes", "MODIFIED", obj)
    for obj in w["pods"]:
        if draw(st.integers(0, 3)) == 0:
            obj = json.loads(
                json.dumps(c.objects.get(("pods", f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"), obj))
            )
            obj["metadata"]["labels"].update(draw(fz.labels))
            if draw(st.booleans()):
                obj["spec"].pop("schedulingGates", None)
            c.deliver("pods", "MODIFIED", obj)
    for obj in w["podgroups"]:
        if draw(st.integers(0, 2)) == 0:
            c.deliver(
                "podgroups", "MODIFIED", draw(fz.pod_group(obj["metadata"]["name"], obj["metadata"]["namespace"]))
            )
    for obj in w["resourceslices"]:
        if draw(st.integers(0, 3)) == 0:
            obj = json.loads(json.dumps(obj))
            obj["spec"]["pool"]["generation"] += 1
            c.deliver("resourceslices", "MODIFIED", obj)
    for informer in ("pods", "nodes", "podgroups", "namespaces", "resourceclaims", "resourceslices", "deviceclasses"):
        for obj in w[informer]:
            if draw(st.integers(0, 4)) == 0:
                c.deliver(informer, "DELETED", json.loads(json.dumps(obj)))


def run_world(mode: str, data: st.DataObject) -> None:
    w = data.draw(fz.world(), label="world")
    c = Cluster(mode)
    stats["examples"] += 1

    async def main() -> None:
        for informer in ORDER:
            for obj in w[informer]:
                c.deliver(informer, "ADDED", json.loads(json.dumps(obj)))
        await c.cycles(limit=3 * len(w["pods"]) + 5)
        churn(data.draw, c, w)
        c.s.queue.flush_backoff_completed()
        c.s.queue.flush_unschedulable_leftover()
        await c.cycles(limit=3 * len(w["pods"]) + 5)
        await c.shutdown()

    asyncio.run(main())


@pytest.mark.timeout(900)
@FUZZ_SETTINGS
@given(data=st.data())
def test_accepted_objects_as_json_through_the_informers(data: st.DataObject) -> None:
    run_world("json", data)


@pytest.mark.timeout(900)
@FUZZ_SETTINGS
@given(data=st.data())
def test_accepted_objects_as_records_through_the_handlers(data: st.DataObject) -> None:
    run_world("records", data)


@pytest.mark.timeout(120)
@settings(max_examples=2000, derandomize=True, database=None, deadline=None)
@given(text=fz.quantity())
def test_every_accepted_quantity_decodes_quickly_and_in_range(text: str) -> None:
    t0 = time.perf_counter()
    nanos = parse_quantity(text)
    v, m = value(text), milli_value(text)
    assert time.perf_counter() - t0 < 0.5  # microseconds; materialising 1e2147483647 would never end
    assert 0 <= v <= INT64_MAX and 0 <= m <= INT64_MAX
    assert m == min(INT64_MAX, -(-nanos // 10**6))


def test_fuzz_volume() -> None:
    """Runs last (file order): the run pushed at least MIN_OBJECTS objects through, with figures."""
    print(
        f"\nfuzz: {stats['examples']} clusters, {stats['objects']} objects delivered, {stats['cycles']} scheduling "
        f"cycles (longest {stats['longest_cycle'] * 1000:.1f} ms), {stats['bound']} pods bound "
        f"({stats['bound_with_claims']} with ResourceClaims)"
    )
    if EXAMPLES < 300:
        pytest.skip("OME_FUZZ_EXAMPLES lowered: the volume goal does not apply")
    assert stats["objects"] >= MIN_OBJECTS
