"""S2 (5,000 nodes, 625 gangs of 8) through ``ome-scheduler simulate`` in under a minute (issue 16)."""

from __future__ import annotations

from pathlib import Path

from bench.run import Sizes
from bench.simulate import LIMIT_S, check, run_once, write_inputs


def test_simulating_s2_binds_every_gang_in_its_own_clique_within_a_minute(tmp_path: Path) -> None:
    sz = Sizes()
    snapshot, add = write_inputs(sz, tmp_path)
    wall, report = run_once(snapshot, add, tmp_path / "map.png")
    check(report, sz)
    assert report["settled"]
    assert wall < LIMIT_S, f"simulate took {wall:.1f} s end to end"
    assert (tmp_path / "map.png").stat().st_size > 10_000
