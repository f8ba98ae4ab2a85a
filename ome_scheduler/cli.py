"""The ``ome-scheduler`` command: parse the flags, then run the scheduler.

Mirrors ``cmd/kube-scheduler/app/server.go``'s ``NewSchedulerCommand``: flags come from
:mod:`ome_scheduler.options`; a usage error exits with status 2, an invalid configuration
with 1 (``ome_scheduler.app``), a clean shutdown with 0.
"""

from __future__ import annotations

import sys

from pydantic import ValidationError
from pydantic_settings import SettingsError

from ome_scheduler.app import run
from ome_scheduler.options import parse


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ome-scheduler`` console script and ``python -m ome_scheduler``."""
    args = sys.argv[1:] if argv is None else argv
    try:
        opts = parse(args)
    except SettingsError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        raise SystemExit(2) from None
    except ValidationError as exc:
        e = exc.errors()[0]
        flag = "--" + str(e["loc"][0]).replace("_", "-") if e["loc"] else "?"
        sys.stderr.write(f'Error: invalid argument "{e.get("input")}" for "{flag}" flag: {e["msg"]}\n')
        raise SystemExit(2) from None
    raise SystemExit(run(opts))
