"""Python's cyclic garbage collector, kept off the scheduling path.

A full (generation 2) collection scans every container object the process holds: at 5,000
nodes the informers' records, NodeInfos and PodInfos number in the millions, and one such
collection stops the event loop for 0.1-0.5 s. Under a steady churn of pods they recur, and
every pod arriving meanwhile waits (the S6 steady-state benchmark showed pending pods piling
up in waves). Go's collector, which kube-scheduler relies on, runs concurrently; CPython's
does not, so the state that lives long is moved out of its sight:

* after the informers' first LIST, one full collection, then ``gc.freeze()``: what exists then
  (the cluster as listed) joins the permanent generation, which collections do not scan;
* every :data:`REFREEZE_INTERVAL` seconds, ``gc.unfreeze()``, one full collection and
  ``gc.freeze()`` again: cyclic garbage among frozen objects is collected after all (freezing
  would otherwise keep it), and the objects that have lived since are frozen too.

Objects freed by reference counting (most of them: records, lists, dicts) are freed at once
whether frozen or not; only reference cycles wait for the next refreeze.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable

import anyio

from ome_scheduler.logs import get_logger

log = get_logger()

REFREEZE_INTERVAL = 300.0
"""Seconds between the full collections that refresh the frozen set."""


def freeze_long_lived() -> float:
    """One full collection, then freeze every surviving object. Returns the seconds it took."""
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - start


async def refreeze_forever(
    interval: float = REFREEZE_INTERVAL, sleep: Callable[[float], Awaitable[None]] = anyio.sleep
) -> None:
    """Every ``interval`` seconds: unfreeze, collect everything, freeze the survivors (logged at
    V(4) with the pause it cost and how many objects stay frozen). Runs until cancelled."""
    while True:
        await sleep(interval)
        gc.unfreeze()
        took = freeze_long_lived()
        log.info("garbage collector refroze", v=4, seconds=round(took, 3), frozen=gc.get_freeze_count())
