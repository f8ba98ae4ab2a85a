"""Waiting for the cluster to show something: any condition, pods bound, a scheduling message.

:func:`wait_for` polls a function until it returns something truthy and fails (AssertionError)
after a timeout, saying what it waited for and the last value seen; the rest are the waits the
tests share: pods bound (:func:`wait_bound`), a FailedScheduling message (:func:`wait_message`),
a pod nominated at Permit (:func:`wait_at_permit`), and a test's own nodes created, Ready and
deleted afterwards (:func:`temp_nodes`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from e2e.harness.api import Api
from e2e.harness.cluster import node_not_ready

T = TypeVar("T")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2) -> T:
    """Poll ``fn`` until it returns something truthy; raise AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def node_of(api: Api, ns: str, name: str) -> str:
    return str(api.pod(ns, name)["spec"].get("nodeName") or "")


def wait_bound(api: Api, ns: str, names: Sequence[str], timeout: float = 30.0) -> dict[str, str]:
    """Wait until every named pod has a node; return pod -> node."""

    def bound() -> dict[str, str] | None:
        out = {n: node_of(api, ns, n) for n in names}
        return out if all(out.values()) else None

    return wait_for(f"pods {list(names)} bound", bound, timeout=timeout)


def scheduled_condition(api: Api, ns: str, name: str) -> dict[str, Any] | None:
    for c in api.pod(ns, name).get("status", {}).get("conditions", []) or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return None


def wait_message(api: Api, ns: str, name: str, substring: str, timeout: float = 30.0) -> str:
    """Wait until the pod's PodScheduled condition or a FailedScheduling event contains ``substring``."""

    def found() -> str | None:
        c = scheduled_condition(api, ns, name)
        if c and substring in c.get("message", ""):
            return str(c["message"])
        for note in api.event_notes(ns, name, "FailedScheduling"):
            if substring in note:
                return note
        return None

    return wait_for(f"message {substring!r} on {ns}/{name}", found, timeout=timeout)


def wait_at_permit(api: Api, ns: str, name: str, timeout: float = 20.0) -> str:
    """Wait until pod ``name`` waits at Permit (it is nominated); return the nominated node."""
    return str(
        wait_for(
            f"{name} waiting at Permit", lambda: api.pod(ns, name)["status"].get("nominatedNodeName"), timeout=timeout
        )
    )


@contextlib.contextmanager
def temp_nodes(api: Api, nodes: Sequence[Mapping[str, Any]], ready_timeout: float = 30.0) -> Iterator[list[str]]:
    """Create nodes for one test, wait until Ready and untainted, delete them afterwards."""
    names = [n["metadata"]["name"] for n in nodes]
    for n in nodes:
        api.create_node(n)

    def ready() -> bool:
        got = {n["metadata"]["name"]: n for n in api.nodes()}
        return all(name in got and node_not_ready(got[name]) is None for name in names)

    wait_for(f"nodes {names} Ready", ready, timeout=ready_timeout)
    try:
        yield names
    finally:
        for name in names:
            api.delete_node(name)
