"""How the read-only subcommands (``explain``, ``simulate``) print what they found."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec


def write_result(output: str, document: Callable[[], Any], text: Callable[[], str]) -> None:
    """Write one result to stdout: ``document()`` as indented JSON when ``output`` is ``"json"``,
    else ``text()`` (the human report). Either is computed only when asked for."""
    if output == "json":
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(document()), indent=2).decode() + "\n")
    else:
        sys.stdout.write(text())
