"""RFC 3339 timestamps as the API serves them (``2026-11-29T16:21:06Z``)."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch; fractional seconds and offsets are accepted.

    Raises:
        ValueError: not an RFC 3339 timestamp.
    """
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def now_rfc3339() -> str:
    """``metav1.Time`` text for now (second precision)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """``metav1.MicroTime`` text for now (microsecond precision)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
