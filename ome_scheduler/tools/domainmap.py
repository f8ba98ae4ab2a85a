"""The domain map: a simulation's domains before and after, drawn with matplotlib.

``ome-scheduler simulate --png FILE`` draws one topology key's domains side by side, before
(the snapshot) and after (the simulation): each domain is a row of its nodes, each node a
cell coloured by its free accelerators (the simulation's ``resource``), the gangs outlined
(the gangs the simulation placed in orange, gangs already bound in white, dashed) and each
row ends with the domain's room, the largest gang of the key's member shape it still fits.

Large clusters stay readable: when there are more than :data:`MAX_ROWS` domains, domains
that look the same (the same free amounts node by node, before and after, the same gang
outlines and room) share one row labelled ``×count``; if even that leaves too many rows,
each domain becomes one cell of a grid coloured by its free share, before and after.

matplotlib is an optional dependency (``pip install 'ome-scheduler[plot]'``); without it
:func:`draw_domain_map` raises :class:`PlotUnavailable` with that instruction.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ome_scheduler.tools.report import DomainRow, DomainTable, NodeCell, SimulationResult

MAX_ROWS = 40
"""Rows drawn per panel before domains are grouped (and, past that, gridded)."""
NEW_GANG = "#ff7f0e"
CELL_TOP, CELL_H = 0.32, 0.6
"""A row is one unit high: gang labels above, then the node cells."""
MID = CELL_TOP + CELL_H / 2
OLD_GANG = "#404040"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed, or there is nothing to draw; the message says what to do."""


@dataclass(frozen=True, order=True)
class _Outline:
    """A gang's nodes in one row: cells ``first``..``last`` (draw order), its label, and
    whether the simulation placed it (orange) or it was bound before (white, dashed)."""

    first: int
    last: int
    label: str
    new: bool


@dataclass
class _Row:
    """One drawn row: its label, its nodes (in draw order), the gang outlines and room per panel."""

    label: str
    cells: list[NodeCell]
    room_before: int | None
    room_after: int | None
    before: list[_Outline]
    after: list[_Outline]


def _outlines(cells: Sequence[NodeCell], after: bool, new: set[str]) -> list[_Outline]:
    """The span of each gang's nodes in ``cells``; a gang the simulation placed is new."""
    spans: dict[str, list[int]] = {}
    for i, c in enumerate(cells):
        for g in c.gangs_after if after else c.gangs_before:
            spans.setdefault(g, []).append(i)
    return sorted(_Outline(min(ix), max(ix), g.split("/")[-1], after and g in new) for g, ix in spans.items())


def _rows(table: DomainTable, domains: dict[str, list[NodeCell]], new: set[str]) -> list[_Row]:
    rooms = {r.domain: r for r in table.rows}
    rows = []
    for d in sorted(domains):
        # Nodes of one gang side by side (after), so each gang is one outlined span in both panels.
        cells = sorted(domains[d], key=lambda c: (min(c.gangs_after, default="~"), c.name))
        r: DomainRow | None = rooms.get(d)
        rows.append(
            _Row(
                d,
                cells,
                r.room_before if r else None,
                r.room_after if r else None,
                _outlines(cells, False, new),
                _outlines(cells, True, new),
            )
        )
    return rows


def _group(rows: list[_Row]) -> list[_Row]:
    """Merge rows that draw the same (gang names aside), largest groups first."""

    def sig(r: _Row) -> tuple[Any, ...]:
        return (
            tuple((c.capacity, c.free_before, c.free_after) for c in r.cells),
            tuple((o.first, o.last, o.new) for o in r.before),
            tuple((o.first, o.last, o.new) for o in r.after),
            r.room_before,
            r.room_after,
        )

    groups: dict[tuple[Any, ...], list[_Row]] = {}
    for r in rows:
        groups.setdefault(sig(r), []).append(r)
    out = []
    for members in sorted(groups.values(), key=lambda m: (-len(m), m[0].label)):
        first = members[0]
        if len(members) == 1:
            out.append(first)
            continue
        n = len(members)

        def relabel(os: list[_Outline], n: int = n) -> list[_Outline]:
            return [_Outline(o.first, o.last, f"{n} gangs", o.new) for o in os]

        out.append(
            _Row(
                f"×{n}  {members[0].label} … {members[-1].label}",
                first.cells,
                first.room_before,
                first.room_after,
                relabel(first.before),
                relabel(first.after),
            )
        )
    return out


def _load() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable(
            "--png needs matplotlib: pip install 'ome-scheduler[plot]' (or pip install matplotlib)"
        ) from None
    matplotlib.rcParams["font.size"] = 9
    return Figure


def draw_domain_map(result: SimulationResult, path: Path, *, topology_key: str | None = None) -> str:
    """Write the domain map of ``result`` (one topology key) to ``path`` (PNG, or any format
    matplotlib infers from the suffix). Returns how domains were drawn: ``rows`` (one per
    domain), ``grouped`` (identical domains share a row) or ``grid`` (one cell per domain).

    Raises:
        PlotUnavailable: matplotlib is missing, or the key has no domain to draw.
    """
    figure_cls = _load()
    tables = {t.topology_key: t for t in result.domains}
    if topology_key is None:
        with_gangs = [g.topology_key for g in result.gangs if g.topology_key in tables]
        topology_key = with_gangs[0] if with_gangs else next(iter(tables), None)
    if topology_key is None or topology_key not in tables or not result.node_map.get(topology_key):
        raise PlotUnavailable(f"no domains to draw under topology key {topology_key!r}")
    table = tables[topology_key]
    domains = result.node_map[topology_key]
    new = {g.gang for g in result.gangs if g.bound or g.waiting}
    rows = _rows(table, domains, new)
    mode = "rows"
    if len(rows) > MAX_ROWS:
        grouped = _group(rows)
        if len(grouped) <= MAX_ROWS:
            rows, mode = grouped, "grouped"
        else:
            mode = "grid"
    if mode == "grid":
        fig = _grid(figure_cls, table, domains, new)
    else:
        fig = _row_map(figure_cls, table, rows, grouped=mode == "grouped")
    pending = sum(1 for g in result.gangs if g.status == "pending")
    placed = sum(1 for g in result.gangs if g.status != "pending")
    fig.suptitle(
        f"Domains under {topology_key} ({len(domains)} domains): {placed} gang(s) placed, {pending} pending",
        fontsize=11,
    )
    fig.savefig(path, dpi=110)
    return mode


def _free_colour(cmap: Any, free: int, cap: int) -> Any:
    return cmap(free / cap) if cap > 0 else (0.85, 0.85, 0.85, 1.0)


def _row_map(figure_cls: Any, table: DomainTable, rows: list[_Row], *, grouped: bool) -> Any:
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    cmap = colormaps["viridis"]
    width = max((len(r.cells) for r in rows), default=1)
    label_w = max((len(r.label) for r in rows), default=8)
    fig = figure_cls(
        figsize=(2 * (0.42 * width + 1.2) + 0.09 * label_w + 1.6, 2.2 + 0.46 * len(rows)), layout="constrained"
    )
    axes = fig.subplots(1, 2, sharey=True)
    for ax, after in zip(axes, (False, True), strict=True):
        for y, r in enumerate(rows):
            for x, c in enumerate(r.cells):
                free = c.free_after if after else c.free_before
                ax.add_patch(
                    Rectangle((x, y + CELL_TOP), 0.92, CELL_H, facecolor=_free_colour(cmap, free, c.capacity), lw=0)
                )
                if len(rows) <= 24 and width <= 16:
                    ax.text(
                        x + 0.46, y + MID, str(free), ha="center", va="center", fontsize=7,
                        color="white" if c.capacity and free / c.capacity < 0.6 else "black",
                    )  # fmt: skip
            for o in r.after if after else r.before:
                ax.add_patch(
                    Rectangle(
                        (o.first - 0.05, y + CELL_TOP - 0.05), o.last - o.first + 1.02, CELL_H + 0.1, fill=False,
                        edgecolor=NEW_GANG if o.new else OLD_GANG, linewidth=2.0 if o.new else 1.4,
                        linestyle="-" if o.new else "--",
                    )
                )  # fmt: skip
                if len(rows) <= 24:
                    colour = "#b35900" if o.new else "#404040"
                    ax.text(o.first, y + CELL_TOP - 0.08, o.label, fontsize=6.5, color=colour, va="bottom")
            room = r.room_after if after else r.room_before
            if room is not None:
                ax.text(width + 0.15, y + MID, f"room {room}", va="center", fontsize=7.5)
        ax.set_xlim(-0.2, width + 1.6)
        ax.set_ylim(len(rows) + 0.1, -0.1)
        ax.set_xticks([])
        ax.set_title("after (simulated)" if after else "before (snapshot)")
        for side in ("top", "right", "bottom"):
            ax.spines[side].set_visible(False)
    axes[0].set_yticks([y + MID for y in range(len(rows))], [r.label for r in rows])
    what = "rows group identical domains" if grouped else "one row per domain"
    shape = f"; room: members like {table.shape_of}'s" if table.shape_of else ""
    caption = (
        f"cells: nodes, coloured by free {table.resource} (the number); orange: gangs placed by the simulation, "
        f"dashed: gangs bound before; {what}{shape}"
    )
    fig.supxlabel(textwrap.fill(caption, int(fig.get_figwidth() * 14)), fontsize=7.5)
    fig.colorbar(
        ScalarMappable(Normalize(0, 1), cmap),
        ax=list(axes),
        fraction=0.025,
        pad=0.02,
        label=f"free share of {table.resource}",
    )
    return fig


def _grid(figure_cls: Any, table: DomainTable, domains: dict[str, list[NodeCell]], new: set[str]) -> Any:
    """One cell per domain, coloured by the share of its ``resource`` that is free; domains
    where the simulation placed a gang are outlined."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    cmap = colormaps["viridis"]
    names = sorted(domains)
    cols = math.ceil(math.sqrt(len(names)))
    nrows = math.ceil(len(names) / cols)
    fig = figure_cls(figsize=(12, 6.5), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, after in zip(axes, (False, True), strict=True):
        for i, d in enumerate(names):
            cells = domains[d]
            cap = sum(c.capacity for c in cells)
            free = sum(c.free_after if after else c.free_before for c in cells)
            x, y = i % cols, i // cols
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=_free_colour(cmap, free, cap), edgecolor="white", lw=0.5))
            if after and any(g in new for c in cells for g in c.gangs_after):
                ax.add_patch(Rectangle((x + 0.08, y + 0.08), 0.84, 0.84, fill=False, edgecolor=NEW_GANG, lw=1.2))
        ax.set_xlim(0, cols)
        ax.set_ylim(nrows, 0)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(("after (simulated)" if after else "before (snapshot)") + f": {len(names)} domains")
    mappable = ScalarMappable(Normalize(0, 1), cmap)
    fig.colorbar(mappable, ax=list(axes), fraction=0.025, pad=0.02, label=f"free share of {table.resource}")
    fig.supxlabel(
        f"each cell one domain ({names[0]} top left, then by name), coloured by its free share of {table.resource}; "
        "orange: domains where the simulation placed a gang",
        fontsize=8,
    )
    return fig
