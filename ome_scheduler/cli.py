"""The ``ome-scheduler`` command: parse the flags, then run the scheduler.

Mirrors ``cmd/kube-scheduler/app/server.go``'s ``NewSchedulerCommand``: flags come from
:mod:`ome_scheduler.app.options`; a usage error exits with status 2, an invalid configuration
with 1 (:mod:`ome_scheduler.app.run`), a clean shutdown with 0.

Three subcommands, chosen by the first argument, run offline tools instead of the scheduler:
``ome-scheduler snapshot FILE`` (:mod:`ome_scheduler.tools.snapshot`), ``ome-scheduler simulate
--snapshot FILE ...`` (:mod:`ome_scheduler.tools.simulate`) and ``ome-scheduler explain pod|podgroup
NS/NAME`` (:mod:`ome_scheduler.tools.explain`). Anything else, flags included, is the
scheduler's command line, unchanged.
"""

from __future__ import annotations

import sys

SUBCOMMANDS = ("snapshot", "simulate", "explain")
"""First arguments that select an offline tool instead of the scheduler."""


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ome-scheduler`` console script and ``python -m ome_scheduler``."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in SUBCOMMANDS:
        # Every import is local: the scheduler's start-up loads no offline tool, and a tool
        # loads nothing of the server stack (flags, TLS, HTTPS, leader election).
        if args[0] == "snapshot":
            from ome_scheduler.tools.snapshot import main as tool
        elif args[0] == "explain":
            from ome_scheduler.tools.explain import main as tool
        else:
            from ome_scheduler.tools.simulate import main as tool
        raise SystemExit(tool(args[1:]))
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from ome_scheduler.app.options import given_on_command_line, origin_of, parse
    from ome_scheduler.app.run import run

    try:
        opts = parse(args)
    except SettingsError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        raise SystemExit(2) from None
    except ValidationError as exc:
        e = exc.errors()[0]
        where = origin_of(str(e["loc"][0]), given_on_command_line(args)) if e["loc"] else "?"
        sys.stderr.write(f'Error: invalid argument "{e.get("input")}" for {where}: {e["msg"]}\n')
        raise SystemExit(2) from None
    raise SystemExit(run(opts))
