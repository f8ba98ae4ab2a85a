"""An asyncio event loop on a simulated clock, for running the scheduler offline.

:class:`VirtualTimeLoop` is what ``ome-scheduler simulate`` and ``explain`` run the real
scheduler on: scheduling takes no simulated time, and when nothing is ready to run the clock
jumps to the next timer (backoff flushes, Permit timeouts, the gang GC), so ten minutes of
Permit wait cost microseconds.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Mapping
from typing import Any


class SimulationStalled(RuntimeError):
    """The loop has nothing scheduled and nothing ready: a simulation bug, never a result."""


class _IdleSelector(selectors.BaseSelector):
    """A selector that never blocks: when the loop would wait ``timeout`` seconds for I/O, the
    simulated clock advances by ``timeout`` instead (after asking ``on_idle`` whether to stop).

    The loop's own self-pipe is registered with a real selector, polled without waiting.
    """

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        """Register with the real selector (polled, never waited on)."""
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        """Unregister from the real selector."""
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        """Modify a registration of the real selector."""
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """Ready file objects now; when there are none and the loop would wait, jump the clock.

        Raises:
            SimulationStalled: ``timeout`` is None (no timer left) and nothing is ready.
        """
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if self._loop.on_idle is not None and self._loop.on_idle(timeout):
            return []  # on_idle scheduled its own callbacks: run them before any time passes
        if timeout is None:
            raise SimulationStalled("the simulated scheduler has nothing scheduled and nothing to run")
        self._loop.now += timeout
        return []

    def close(self) -> None:
        """Close the real selector."""
        self._real.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        """The real selector's registrations."""
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose :meth:`time` is simulated seconds (starting at 0).

    Every ``call_later``/``sleep``/timeout on it runs on the simulated clock, which moves only
    when no callback is ready: work takes no simulated time. ``on_idle(timeout)`` is called at
    each such moment, ``timeout`` being the simulated seconds to the next timer (None: none);
    returning True means it scheduled a callback, so the clock must not move yet.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self.on_idle: Callable[[float | None], bool] | None = None
        super().__init__(selector=_IdleSelector(self))

    def time(self) -> float:
        """The simulated clock, in seconds."""
        return self.now
