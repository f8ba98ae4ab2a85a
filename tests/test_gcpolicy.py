"""The collector policy: frozen after the first LIST, refrozen with a full collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import anyio
import pytest

from ome_scheduler.gcpolicy import freeze_long_lived, refreeze_forever


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
