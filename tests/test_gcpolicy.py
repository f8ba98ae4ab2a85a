"""The collector policy: frozen after the first LIST, refrozen with a full collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import anyio
import pytest

from ome_scheduler.app import gcpolicy
from ome_scheduler.app.gcpolicy import freeze_long_lived, refreeze_forever, release_free_memory


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.collect()


class Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_freezing_keeps_the_listed_state_out_of_collections() -> None:
    listed = [Cycle() for _ in range(100)]
    refs = [weakref.ref(c) for c in listed]
    freeze_long_lived()
    assert gc.get_freeze_count() >= 100
    del listed
    gc.collect()
    assert all(r() is not None for r in refs)  # frozen cycles are not scanned, so not freed


def test_a_refreeze_collects_frozen_garbage_and_freezes_the_survivors() -> None:
    garbage = [Cycle() for _ in range(100)]
    refs = [weakref.ref(c) for c in garbage]
    freeze_long_lived()
    del garbage
    survivors = [Cycle() for _ in range(50)]
    rounds = 0

    async def sleep(seconds: float) -> None:
        nonlocal rounds
        assert seconds == 7.0
        rounds += 1
        if rounds == 2:
            raise anyio.get_cancelled_exc_class()

    async def main() -> None:
        with pytest.raises(anyio.get_cancelled_exc_class()):
            await refreeze_forever(7.0, sleep)

    anyio.run(main)
    assert rounds == 2
    assert all(r() is None for r in refs)  # the refreeze's full collection freed them
    unfrozen_ids = {id(o) for o in gc.get_objects()}  # get_objects() leaves frozen objects out
    assert not any(id(c) in unfrozen_ids for c in survivors)


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(gcpolicy._TRIM is None, reason="the C library has no malloc_trim (not glibc)")
def test_free_memory_pinned_by_survivors_goes_back_to_the_kernel() -> None:
    # 4 KiB strings come from glibc's heap (pymalloc only serves up to 512 bytes); keeping every
    # 64th pins the heap, so freeing the rest does not shrink it by itself.
    pile = [b"x" * 4096 + bytes([i % 256]) for i in range(40_000)]
    survivors = pile[::64]
    del pile
    before = _rss_mib()
    assert release_free_memory()
    after = _rss_mib()
    assert before - after > 100, (before, after)  # about 155 MiB of the 160 were free
    assert len(survivors) == 625
