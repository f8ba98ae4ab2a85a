"""Times the fault tests measured (recovery after an outage, a lost Binding...), for the session's summary.

:func:`record_measurement` adds one; ``e2e/conftest.py`` prints :data:`MEASUREMENTS` at the
end of the pytest session.
"""

from __future__ import annotations

MEASUREMENTS: list[tuple[str, float]] = []
"""(what, seconds) recorded by the fault tests; printed at the end of the pytest session."""


def record_measurement(what: str, seconds: float) -> None:
    """Record a measured time (seconds) for the end-of-session summary."""
    MEASUREMENTS.append((what, round(seconds, 2)))
