"""Hostile objects through the real informer decode path into a real Scheduler's handlers.

Issue 13's crash: the API server accepts ``requests: {cpu: "1e1000000"}`` (it stores
``10e999999``); a pod with that request, whichever scheduler it names, reached the pod
informer's handler, raised ``decimal.Overflow`` and took the process down, and the relist after
a restart met the same pod again. Every test here feeds raw API JSON through
:func:`ome_scheduler.app.build_informer` (the production wiring) and checks the scheduler goes
on serving everyone else.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

from ome_scheduler.app import INFORMERS, build_informer
from ome_scheduler.config.load import parse_config
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.informer import Informer
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler
from tests.plugins_env import chart_config


class ListClient:
    """Answers the informer's LIST with one page of ``items`` (the relist after a restart)."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    async def get(self, path: str, params: dict[str, str]) -> bytes:
        return json.dumps({"metadata": {"resourceVersion": "100"}, "items": self.items}).encode()


class Events:
    """Records every event and condition the scheduler writes."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, pod: Any, *, controller: str, type_: str, reason: str, action: str, note: str) -> None:
        md = pod.metadata
        self.events.append((f"{md.namespace}/{md.name}", type_, reason, note))

    def pod_scheduled_false(self, pod: Any, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        pass

    async def nominate(self, pod: Any, node: str, abandon: Any = None) -> None:
        pass


def scheduler() -> tuple[Scheduler, Events]:
    ev = Events()
    return Scheduler(parse_config(chart_config(), "test"), metrics=Metrics(), binder=None, recorder=ev), ev


def informer(s: Scheduler, name: str, client: Any = None) -> Informer[Any]:
    spec = next(i for i in INFORMERS if i.name == name)
    return build_informer(cast(KubeClient, client), spec, s)


def raw_pod(
    name: str, cpu: str, scheduler_name: str = "ome-scheduler", rv: str = "1", node: str = ""
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [{"name": "c", "image": "img", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "tenant", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": spec,
    }


def raw_node(name: str, cpu: str = "8") -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": name},
        },
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def test_huge_cpu_pod_of_another_scheduler_does_not_end_the_watch() -> None:
    s, _ = scheduler()
    pods = informer(s, "pods")
    pods._handle_line(line("ADDED", raw_pod("hostile", "10e999999", scheduler_name="nobody")))
    pods._handle_line(line("ADDED", raw_pod("fine", "1")))
    assert "tenant/hostile" in pods.store
    assert s.queue.contains(s.pods["tenant/fine"].pod_key)


def test_relist_with_a_huge_cpu_pod_does_not_crash_loop() -> None:
    s, _ = scheduler()
    items = [raw_pod("hostile", "10e999999", scheduler_name="nobody"), raw_pod("fine", "1")]
    pods = informer(s, "pods", ListClient(items))
    asyncio.run(pods._list())
    assert set(pods.store) == {"tenant/hostile", "tenant/fine"}
    assert s.queue.contains(s.pods["tenant/fine"].pod_key)
