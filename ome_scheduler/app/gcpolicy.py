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

Each of these collections ends with :func:`release_free_memory`: glibc's ``malloc_trim(0)``
hands the free pages inside the C heap back to the kernel. Without it a burst (every informer
re-listing at once after an API server outage, a backlog of Bindings and events) leaves the
process's RSS at its peak for good: glibc only gives back free memory at the top of its heap,
and objects that outlive the burst pin the rest (the soak, ``bench/soak.py``, saw RSS climb in
steps after each outage, far more than the live heap grew).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time
from collections.abc import Awaitable, Callable

import anyio

from ome_scheduler.logs import get_logger

log = get_logger()

REFREEZE_INTERVAL = 300.0
"""Seconds between the full collections that refresh the frozen set."""


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Return the C heap's free pages to the kernel (glibc ``malloc_trim(0)``; a few ms per
    100 MiB of heap). Returns whether any memory was released; False also where there is no
    ``malloc_trim``."""
    return _TRIM is not None and _TRIM(0) == 1


def freeze_long_lived() -> float:
    """One full collection, then freeze every surviving object, then :func:`release_free_memory`.
    Returns the seconds it took."""
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    release_free_memory()
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
