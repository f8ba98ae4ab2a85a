"""Informer event handling for objects that cannot be decoded (no server: lines fed directly)."""

from __future__ import annotations

import json
from typing import Any, cast

from ome_scheduler.api.core import Pod
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.informer import Informer


def _pod(rv: str, containers: Any, node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": rv},
        "spec": {"schedulerName": "ome-scheduler", "nodeName": node, "containers": containers},
    }


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


GOOD = [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
BAD = "not-a-list"


class Rec:
    def __init__(self, keep_stale: bool) -> None:
        self.events: list[tuple[str, ...]] = []
        self.inf: Informer[Pod] = Informer(
            cast(KubeClient, None),
            "/api/v1/pods",
            Pod,
            name="pods",
            on_add=lambda p: self.events.append(("add", p.metadata.resource_version)),
            on_update=lambda o, n: self.events.append(
                ("update", o.metadata.resource_version, n.metadata.resource_version)
            ),
            on_delete=lambda p: self.events.append(("delete", p.metadata.resource_version)),
            on_invalid=lambda raw, err: self.events.append(("invalid", json.loads(raw)["metadata"]["resourceVersion"])),
            keep_stale=keep_stale,
        )


def test_unreadable_update_drops_the_stale_object_and_is_reported() -> None:
    r = Rec(keep_stale=False)
    r.inf._handle_line(_line("ADDED", _pod("1", GOOD)))
    r.inf._handle_line(_line("MODIFIED", _pod("2", BAD)))
    assert r.events == [("add", "1"), ("invalid", "2"), ("delete", "1")]
    assert "ns/p" not in r.inf.store
    assert "ns/p" in r.inf.invalid and "Expected `array`" in r.inf.invalid["ns/p"]
    assert r.inf.resource_version == "2"
    # fixed: it comes back as an add, and is no longer invalid
    r.inf._handle_line(_line("MODIFIED", _pod("3", GOOD)))
    assert r.events[-1] == ("add", "3")
    assert r.inf.invalid == {}


def test_keep_stale_keeps_the_last_readable_version_until_deleted() -> None:
    r = Rec(keep_stale=True)
    r.inf._handle_line(_line("ADDED", _pod("1", GOOD, node="n1")))
    r.inf._handle_line(_line("MODIFIED", _pod("2", BAD, node="n1")))
    assert r.inf.store["ns/p"].metadata.resource_version == "1"
    assert r.events == [("add", "1"), ("invalid", "2")]
    # deleting the unreadable object deletes the last readable version
    r.inf._handle_line(_line("DELETED", _pod("3", BAD, node="n1")))
    assert r.events[-1] == ("delete", "1")
    assert r.inf.store == {} and r.inf.invalid == {}


def test_delete_of_never_readable_object_is_silent() -> None:
    r = Rec(keep_stale=False)
    r.inf._handle_line(_line("ADDED", _pod("1", BAD)))
    r.inf._handle_line(_line("DELETED", _pod("2", BAD)))
    assert r.events == [("invalid", "1")]
    assert r.inf.invalid == {} and r.inf.resource_version == "2"


def test_object_without_readable_metadata_is_skipped() -> None:
    r = Rec(keep_stale=False)
    r.inf._handle_line(_line("ADDED", {"metadata": "oops"}))
    r.inf._handle_line(_line("DELETED", {"metadata": 7}))
    r.inf._handle_line(_line("ADDED", _pod("5", GOOD)))
    assert r.events == [("add", "5")]


# ---- handlers that raise: contained to their object ----------------------------------------


class Flaky:
    """Handlers that raise for pods whose containers list a container named ``boom``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.errors: list[tuple[str, str]] = []
        self.inf: Informer[Pod] = Informer(
            cast(KubeClient, None),
            "/api/v1/pods",
            Pod,
            name="pods",
            on_add=lambda p: self._handle("add", p),
            on_update=lambda o, n: self._handle("update", n),
            on_delete=lambda p: self.seen.append(("delete", p.metadata.resource_version)),
            on_error=lambda p, err: self.errors.append((p.metadata.resource_version, err)),
        )

    def _handle(self, action: str, p: Pod) -> None:
        if any(c.name == "boom" for c in p.spec.containers):
            raise RuntimeError(f"cannot handle {p.metadata.name}")
        self.seen.append((action, p.metadata.resource_version))


BOOM = [{"name": "boom"}]


def test_a_raising_handler_is_contained_reported_once_and_the_store_follows_the_server() -> None:
    f = Flaky()
    f.inf._handle_line(_line("ADDED", _pod("1", BOOM)))
    assert "ns/p" in f.inf.store and f.inf.store["ns/p"].metadata.resource_version == "1"
    assert f.inf.failed == {"ns/p": "RuntimeError: cannot handle p"}
    assert f.errors == [("1", "RuntimeError: cannot handle p")]
    # the same error again: no second report
    f.inf._handle_line(_line("MODIFIED", _pod("2", BOOM)))
    assert len(f.errors) == 1 and f.inf.store["ns/p"].metadata.resource_version == "2"
    # fixed: the handlers never took the pod in, so it arrives as an add
    f.inf._handle_line(_line("MODIFIED", _pod("3", GOOD)))
    assert f.seen == [("add", "3")] and f.inf.failed == {}
    f.inf._handle_line(_line("MODIFIED", _pod("4", GOOD)))
    assert f.seen[-1] == ("update", "4")
    f.inf._handle_line(_line("DELETED", _pod("5", GOOD)))
    assert f.seen[-1] == ("delete", "5") and f.inf.store == {}


def test_other_objects_keep_flowing_past_a_raising_handler() -> None:
    f = Flaky()
    other = _pod("2", GOOD)
    other["metadata"]["name"] = "q"
    f.inf._handle_line(_line("ADDED", _pod("1", BOOM)))
    f.inf._handle_line(_line("ADDED", other))
    assert f.seen == [("add", "2")]
    assert set(f.inf.store) == {"ns/p", "ns/q"}


class OneList:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    async def get(self, path: str, params: dict[str, str]) -> bytes:
        return json.dumps({"metadata": {"resourceVersion": "9"}, "items": self.items}).encode()


def test_relist_offers_an_object_whose_add_raised_again() -> None:
    import asyncio

    f = Flaky()
    f.inf.client = cast(KubeClient, OneList([_pod("1", BOOM)]))
    asyncio.run(f.inf._list())
    assert f.seen == [] and "ns/p" in f.inf.store and len(f.errors) == 1
    # relist with the same (still failing) version: offered again, not reported again
    asyncio.run(f.inf._list())
    assert len(f.errors) == 1
    # the server now has a readable version under the same resourceVersion (a fixed handler)
    f.inf.client = cast(KubeClient, OneList([_pod("1", GOOD)]))
    asyncio.run(f.inf._list())
    assert f.seen == [("add", "1")] and f.inf.failed == {}
