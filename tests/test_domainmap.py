"""The domain map PNG of ``simulate --png``: one row per domain, grouped rows, or a grid."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.snapshot import ClusterSnapshot
from ome_scheduler.config.load import parse_config
from ome_scheduler.tools.domainmap import PlotUnavailable, draw_domain_map
from ome_scheduler.tools.report import SimulationResult
from ome_scheduler.tools.simulation import Simulation
from tests.support.manifests import HOSTNAME, chart_config, node, pod, pod_group

DK = "example.com/clique"
PNG = b"\x89PNG\r\n\x1a\n"


def simulate(domain_sizes: list[int], gangs: int, size: int) -> SimulationResult:
    nodes = [
        msgspec.convert(node(f"n{d:03d}-{i}", {DK: f"d{d:03d}"}, gpu=8), Node)
        for d, n in enumerate(domain_sizes)
        for i in range(n)
    ]
    added: list[Any] = []
    for g in range(gangs):
        added.append(msgspec.convert(pod_group(f"g{g:03d}", "t", size, topology_key=DK), PodGroup))
        added += [
            msgspec.convert(pod(f"g{g:03d}-{i}", "t", gang=f"g{g:03d}", gpu=8, anti_affinity_on=HOSTNAME), Pod)
            for i in range(size)
        ]
    return Simulation(parse_config(chart_config()), ClusterSnapshot(nodes=nodes), added).run()


def test_few_domains_one_row_each(tmp_path: Path) -> None:
    r = simulate([3, 4, 4], gangs=2, size=3)
    assert draw_domain_map(r, tmp_path / "m.png") == "rows"
    assert (tmp_path / "m.png").read_bytes()[:8] == PNG


def test_many_alike_domains_share_rows(tmp_path: Path) -> None:
    r = simulate([8] * 120, gangs=60, size=8)
    assert draw_domain_map(r, tmp_path / "m.png") == "grouped"  # two rows: 60 full, 60 empty


def test_many_different_domains_become_a_grid(tmp_path: Path) -> None:
    r = simulate(list(range(1, 61)), gangs=5, size=2)
    assert draw_domain_map(r, tmp_path / "m.png") == "grid"


def test_without_matplotlib_the_message_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = simulate([2], gangs=1, size=2)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailable, match=r"pip install 'ome-scheduler\[plot\]'"):
        draw_domain_map(r, tmp_path / "m.png")
    assert not (tmp_path / "m.png").exists()


def test_unknown_topology_key(tmp_path: Path) -> None:
    r = simulate([2], gangs=1, size=2)
    with pytest.raises(PlotUnavailable, match="no domains to draw under topology key 'nope'"):
        draw_domain_map(r, tmp_path / "m.png", topology_key="nope")
