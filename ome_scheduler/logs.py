"""Structured logging with klog-style verbosity, rendered by structlog.

``--v=N`` works as in kube-scheduler: a call ``log.info("event", v=4, ...)`` is dropped
unless the configured verbosity is at least 4. ``--logging-format=text`` renders klog's
text layout (``I1129 16:21:06.123456 4242 scheduler] "msg" key="value"``) and ``json``
renders one JSON object per line (``ts`` in seconds, ``v``, ``msg``, then the keys), as
``k8s.io/component-base/logs`` does. Output goes to stderr; nothing is written to disk.
Exceptions are rendered without frame locals, so tokens never reach logs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

import orjson
import structlog


class _State:
    """The process-wide logging settings (``configure`` writes them)."""

    verbosity = 2
    format = "text"


_state = _State()
_PID = os.getpid()


def verbosity() -> int:
    """The configured ``--v`` level."""
    return _state.verbosity


def enabled(v: int) -> bool:
    """Whether a ``V(v)`` log line would be emitted; guard expensive arguments with it."""
    return v <= _state.verbosity


def _drop_by_verbosity(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: drop a ``v=N`` call above the configured verbosity."""
    v = event.get("v", 0)
    if v > _state.verbosity:
        raise structlog.DropEvent
    return event


def _fmt_value(v: Any) -> str:
    """One value as klog's text format prints it: quoted strings, ``<nil>``, ``map[k:v]``."""
    if isinstance(v, str):
        return orjson.dumps(v).decode()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float) or v is None:
        return "<nil>" if v is None else str(v)
    if isinstance(v, Mapping):
        return "map[" + " ".join(f"{k}:{v2}" for k, v2 in sorted(v.items())) + "]"
    return orjson.dumps(v, default=str).decode()


def _render_text(_: Any, level: str, event: MutableMapping[str, Any]) -> str:
    """klog's header (``Lmmdd hh:mm:ss.uuuuuu pid ome-scheduler]``), the quoted message, key=value."""
    ts = event.pop("_ts", time.time())
    lt = time.localtime(ts)
    sev = {"error": "E", "warning": "W", "critical": "E"}.get(level, "I")
    head = f"{sev}{time.strftime('%m%d %H:%M:%S', lt)}.{int((ts % 1) * 1e6):06d} {_PID:7d} ome-scheduler]"
    msg = event.pop("event", "")
    event.pop("v", None)
    exc = event.pop("exception", None)
    parts = [head, orjson.dumps(str(msg)).decode()]
    parts.extend(f"{k}={_fmt_value(v)}" for k, v in event.items())
    line = " ".join(parts)
    if exc:
        line += "\n" + str(exc)
    return line


def _render_json(_: Any, level: str, event: MutableMapping[str, Any]) -> str:
    """component-base's JSON line: ``ts`` (epoch seconds), ``err`` for errors, ``msg``, ``v``, keys."""
    out: dict[str, Any] = {"ts": round(event.pop("_ts", time.time()), 6)}
    if level in ("error", "critical"):
        out["err"] = event.pop("error", None)
    out["msg"] = event.pop("event", "")
    out["v"] = event.pop("v", 0)
    out.update(event)
    return orjson.dumps(out, default=str).decode()


def _stamp(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Record the wall-clock time of the call (rendered later, after filtering)."""
    event["_ts"] = time.time()
    return event


def format_line(level: str, msg: str, **kv: Any) -> str:
    """One log line in the configured format, without structlog (no locks, no verbosity
    filter): for a thread that must write while the event loop may hold the logging machinery
    (the loop watchdog). ``level`` is ``"info"``, ``"warning"`` or ``"error"``."""
    event: MutableMapping[str, Any] = {"event": msg, **kv}
    render = _render_json if _state.format == "json" else _render_text
    return render(None, level, event)


def configure(level: int = 2, fmt: str = "text") -> None:
    """Set verbosity and format (``text`` or ``json``).

    Raises:
        ValueError: an unknown format.
    """
    if fmt not in ("text", "json"):
        raise ValueError(f'--logging-format: Invalid value: "{fmt}": supported values: "text", "json"')
    _state.verbosity = level
    _state.format = fmt
    structlog.configure(
        processors=[
            _drop_by_verbosity,
            structlog.contextvars.merge_contextvars,
            _stamp,
            structlog.processors.ExceptionRenderer(structlog.tracebacks.ExceptionDictTransformer(show_locals=False))
            if fmt == "json"
            else structlog.processors.format_exc_info,
            _render_json if fmt == "json" else _render_text,
        ],
        # Level filtering stays open (0): verbosity, not level, decides, in _drop_by_verbosity.
        wrapper_class=structlog.make_filtering_bound_logger(0),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        # Modules bind their loggers at import, before the CLI calls configure(); no caching
        # lets those loggers pick up the final settings.
        cache_logger_on_first_use=False,
    )


def get_logger(**initial: Any) -> Any:
    """A bound logger; call ``.info(msg, v=N, key=value)``."""
    return structlog.get_logger(**initial)


configure()  # usable defaults (--v=2, text) for imports, tests and tools that never call it
