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
