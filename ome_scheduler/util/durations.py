"""Go ``time.Duration`` text, both ways: messages quote durations exactly as Go prints them."""

from __future__ import annotations

import re

# Seconds per unit; Go accepts both ``us`` and ``µs`` for microseconds.
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def format_go_duration(seconds: float) -> str:
    """``time.Duration.String()``: ``10s``, ``5m0s``, ``1h0m0s``, ``1.5s``, ``250ms``, ``0s``."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    # Go prints sub-second durations in the largest unit that keeps a non-zero integer part
    # (``1.5ms``), and longer ones as h/m/s with the zero leading parts left out.
    if ns < 1_000_000_000:
        for unit, div in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= div:
                return sign + _trim(ns / div) + unit
    h, rem = divmod(ns, 3_600_000_000_000)
    m, rem = divmod(rem, 60_000_000_000)
    s = rem / 1e9
    out = ""
    if h:
        out += f"{h}h"
    if h or m:
        out += f"{m}m"
    return sign + out + _trim(s) + "s"


def _trim(v: float) -> str:
    """A float as Go formats a duration part: up to 9 decimals, trailing zeros removed."""
    text = f"{v:.9f}".rstrip("0").rstrip(".")
    return text or "0"


def parse_go_duration(text: str) -> float:
    """Parse ``15s``, ``1m30s``, ``500ms`` or a bare number of seconds into seconds.

    Raises:
        ValueError: the text is not a Go duration.
    """
    t = text.strip()
    if not t:
        raise ValueError("empty duration")
    try:
        return float(t)  # a bare number is seconds (YAML numbers); Go itself accepts only "0"
    except ValueError:
        pass
    sign = -1.0 if t.startswith("-") else 1.0
    t = t.lstrip("+-")
    pos = 0
    total = 0.0
    for m in _PART.finditer(t):
        if m.start() != pos:  # something that is not a number+unit sits between two parts
            raise ValueError(f"time: invalid duration {text!r}")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(t) or pos == 0:
        raise ValueError(f"time: invalid duration {text!r}")
    return sign * total
