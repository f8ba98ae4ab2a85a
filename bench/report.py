"""The benchmark's report: ``<out>/<date>[-small].md`` with the machine and versions, one table
per kind of scenario (S1-S4 and the binding limit; S5 scale; S6 steady state), every run as
JSON, and PNGs next to it (``.png`` throughput and p99; ``-scale.png``; ``-steady.png``)."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import COSCHED, KUBE, OME, SCHEDULERS, RunResult
from e2e.harness.paths import REPO

NOT_COMPARED = [
    (
        "Volcano (volcano.sh/volcano cmd/scheduler)",
        "tried 2026-11-30 as a wrapper module with `go build -mod=mod`: the module proxy refuses the "
        "source: `volcano.sh/volcano@v1.13.0: reading https://proxy.golang.org/volcano.sh/volcano/@v/v1.13.0.zip: "
        "403 Forbidden` (`server response: This module version is not available.`); the same for v1.12.2; "
        "`@v/list` answers 403 and `@latest` 404. Tried again before the 2026-11-30 run: "
        "`go mod download -json volcano.sh/volcano@latest`: `module volcano.sh/volcano: reading "
        "https://proxy.golang.org/volcano.sh/volcano/@v/list: 403 Forbidden` (`server response: This module "
        "version is not available.`).",
    ),
    (
        "Apache YuniKorn (github.com/apache/yunikorn-k8shim pkg/cmd/shim)",
        "tried 2026-11-30 the same way: v1.7.0's go.mod is refused (403); v1.6.3's go.mod is served, but its "
        "source is not: `github.com/apache/yunikorn-k8shim@v1.6.3: reading "
        "https://proxy.golang.org/github.com/apache/yunikorn-k8shim/@v/v1.6.3.zip: 403 Forbidden` "
        "(`server response: This module version is not available.`). Tried again before the 2026-11-30 run: "
        "`go mod download -json github.com/apache/yunikorn-k8shim@latest`: `reading "
        "https://proxy.golang.org/github.com/apache/yunikorn-k8shim/@v/list: 403 Forbidden` (same response).",
    ),
]
"""Gang schedulers issue 14 asked for that could not be built here, with the exact errors."""

MAIN_SCENARIOS = ("limit", "S1", "S2", "S3", "S4")
LABEL = {OME: "ome-scheduler", COSCHED: "Coscheduling", KUBE: "kube-scheduler", "binding client": "binding client"}


@dataclass
class ReportContext:
    """What the report states besides the results: sizes, client limits, command, machine, versions."""

    command: str
    small: bool
    qps: float
    burst: int
    sizes: dict[str, Any]
    machine: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    loads: dict[str, str] = field(default_factory=dict)
    """Scenario label -> the machine's 1/5/15-minute load averages when it ended (others share the machine)."""


def median_result(rs: Sequence[RunResult]) -> RunResult:
    """The run with the median pods/s (the upper one of an even count)."""
    s = sorted(rs, key=lambda r: r.pods_per_s)
    return s[len(s) // 2]


def machine_info() -> dict[str, str]:
    """CPU model and count, memory, kernel, Python, load average now."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kb = next(
            int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")
        )
        mem = f"{mem_kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        mem = "?"
    return {
        "cpu": f"{model or platform.processor()} x {os.cpu_count()}",
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def _run(argv: Sequence[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError as e:
        return f"? ({e})"
    return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr).strip() else "?"


def versions(bin_dir: Path) -> dict[str, str]:
    """Versions of everything in the comparison (binaries asked with --version)."""
    try:
        ome = importlib.metadata.version("ome-scheduler")
    except importlib.metadata.PackageNotFoundError:
        ome = "?"
    commit = _run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    dirty = _run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    sp_mod = (REPO / "e2e" / "tools" / "scheduler-plugins" / "go.mod").read_text()
    m = re.search(r"sigs\.k8s\.io/scheduler-plugins (v\S+)", sp_mod)
    return {
        "ome-scheduler": f"{ome} (commit {commit}{', uncommitted changes' if dirty not in ('', '?') else ''})",
        "kube-apiserver": _run([str(bin_dir / "kube-apiserver"), "--version"]),
        "kube-scheduler": _run([str(bin_dir / "kube-scheduler"), "--version"]),
        "Coscheduling": f"sigs.k8s.io/scheduler-plugins {m.group(1) if m else '?'} cmd/scheduler, "
        + _run([str(bin_dir / "scheduler-plugins"), "--version"]),
        "etcd": _run([str(bin_dir / "etcd"), "--version"]),
    }


def _f(v: float | None, nd: int = 2) -> str:
    return "" if v is None else f"{v:.{nd}f}"


def _cpu_ms_per_pod(r: RunResult) -> float:
    done = r.pods if r.bound < 0 else r.bound
    return r.cpu_s / done * 1000 if done and r.cpu_s else 0.0


def _sched_order(key: tuple[str, str]) -> tuple[int, str]:
    order = {s: i for i, s in enumerate(("binding client", *SCHEDULERS))}
    return order.get(key[1], 9), key[1]


def main_table(results: dict[tuple[str, str], list[RunResult]]) -> list[str]:
    """S1-S4 and the binding limit, one row per scenario and scheduler (medians)."""
    limit = results.get(("limit", "binding client"))
    limit_rate = median_result(limit).pods_per_s if limit else None
    lines = [
        "| scenario | scheduler | nodes | pods | pods/s | p50 s | p99 s | skew p50 s | skew p99 s | CPU ms / pod "
        "| peak RSS MiB | gangs in one clique | vs kube-scheduler | vs Coscheduling | vs limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scen in MAIN_SCENARIOS:
        for key in sorted((k for k in results if k[0] == scen), key=_sched_order):
            r = median_result(results[key])
            vs = {}
            for other in (KUBE, COSCHED):
                o = results.get((scen, other))
                vs[other] = f"{r.pods_per_s / median_result(o).pods_per_s:.2f}x" if o and key[1] == OME else ""
            vs_limit = f"{r.pods_per_s / limit_rate:.2f}x" if limit_rate and key[1] != "binding client" else ""
            pods = f"{r.pods}" if r.bound < 0 else f"{r.bound}/{r.pods} bound"
            lines.append(
                f"| {scen} | {LABEL.get(key[1], key[1])} | {r.nodes} | {pods} | {r.pods_per_s:.1f} | {_f(r.lat_p50)} "
                f"| {_f(r.lat_p99)} | {_f(r.skew_p50)} | {_f(r.skew_p99)} | {_cpu_ms_per_pod(r):.2f} | {r.rss_mb:.0f} "
                f"| {r.gangs_in_one_domain} | {vs[KUBE]} | {vs[COSCHED]} | {vs_limit} |"
            )
    return lines


def scale_points(results: dict[tuple[str, str], list[RunResult]]) -> dict[tuple[str, str], list[RunResult]]:
    """(base scenario S1/S2, scheduler) -> median results ordered by node count (S5 plus S1/S2)."""
    pts: dict[tuple[str, str], list[RunResult]] = {}
    for (scen, sched), rs in results.items():
        base = scen.split()[1].split("@")[0] if scen.startswith("S5 ") else scen
        if base in ("S1", "S2") and sched in SCHEDULERS:
            pts.setdefault((base, sched), []).append(median_result(rs))
    has_s5 = any(k[0].startswith("S5 ") for k in results)
    if not has_s5:
        return {}
    return {k: sorted(v, key=lambda r: r.nodes) for k, v in sorted(pts.items(), key=lambda kv: (kv[0][0], kv[0][1]))}


def scale_table(results: dict[tuple[str, str], list[RunResult]]) -> list[str]:
    """S5: pods/s, CPU ms per pod and peak RSS of S1 and S2 by node count."""
    pts = scale_points(results)
    if not pts:
        return []
    lines = [
        "| scenario | scheduler | nodes | pods | pods/s | CPU ms / pod | peak RSS MiB | gangs in one clique |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (base, sched), rs in pts.items():
        for r in rs:
            pods = f"{r.pods}" if r.bound < 0 else f"{r.bound}/{r.pods} bound"
            lines.append(
                f"| {base} | {LABEL[sched]} | {r.nodes:,} | {pods} | {r.pods_per_s:.1f} | {_cpu_ms_per_pod(r):.2f} "
                f"| {r.rss_mb:.0f} | {r.gangs_in_one_domain} |"
            )
    return lines


def steady_table(results: dict[tuple[str, str], list[RunResult]]) -> list[str]:
    """S6: highest sustained rate per ramp and their median; the steady run at that rate."""
    rows = [(k, rs) for k, rs in results.items() if k[0] == "S6"]
    if not rows:
        return []
    lines = [
        "| scheduler | sustained pods/s per ramp | median | ramp stopped | steady run pods/s | p50 s | p99 s "
        "| max pending | bound/s | unbound after drain | gangs in one clique | CPU ms / pod | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (_, sched), rs in sorted(rows, key=lambda kv: _sched_order(kv[0])):
        r = rs[0]
        ramps = r.notes.get("ramps", [])
        st = r.notes.get("steady", {})
        per = ", ".join(f"{x['sustained']:.0f}" for x in ramps)
        stopped = "; ".join(sorted({x["stopped"] for x in ramps}))
        lines.append(
            f"| {LABEL[sched]} | {per} | {r.pods_per_s:.0f} | {stopped} | {st.get('rate', 0):.0f} | {_f(r.lat_p50)} "
            f"| {_f(r.lat_p99)} | {st.get('max_pending', '')} | {st.get('bound_rate', 0):.1f} "
            f"| {st.get('unbound_after_drain', '')} | {r.gangs_in_one_domain} | {_cpu_ms_per_pod(r):.2f} "
            f"| {r.rss_mb:.0f} |"
        )
    return lines


def write_report(out: Path, results: dict[tuple[str, str], list[RunResult]], ctx: ReportContext) -> Path:
    """Write the markdown and PNGs; return the markdown's path."""
    date = dt.date.today().isoformat()
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{date}{'-small' if ctx.small else ''}"
    md = out / f"{stem}.md"
    lines = [
        f"# Benchmark {date}{' (small: correctness, not timing)' if ctx.small else ''}",
        "",
        f"Command: `{ctx.command}`; client QPS {ctx.qps:g}, burst {ctx.burst} for every scheduler; "
        f"medians of runs by pods/s; one API server (etcd + kube-apiserver, no kubelets) on this machine."
        + (f" Wall time {ctx.elapsed_s / 60:.0f} min." if ctx.elapsed_s else ""),
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in ctx.machine.items()) + ".",
        "",
        "Versions: " + "; ".join(f"{k}: {v}" for k, v in ctx.versions.items()) + ".",
        "",
        *(
            [
                "Load average (1/5/15 min) when each scenario ended: "
                + "; ".join(f"{k} {v}" for k, v in ctx.loads.items())
                + ".",
                "",
            ]
            if ctx.loads
            else []
        ),
        "Sizes: `" + json.dumps(ctx.sizes) + "`",
        "",
        "## S1-S4 and the binding limit",
        "",
        "Throughput is pods / (last bind - first bind); latency from the scheduler's start to each bind; "
        "all pods exist before the scheduler starts. kube-scheduler has no gangs; Coscheduling has gangs but "
        "no topology domains.",
        "",
        *main_table(results),
        "",
        f"![throughput and p99]({stem}.png)",
        "",
    ]
    if st := scale_table(results):
        lines += [
            "## S5 scale",
            "",
            "S1 and S2 by node count (cliques of 8); the 5,000-node rows are S1 and S2 above. The workload "
            "grows with the nodes up to the 5,000-node size and stays there (20,000 nodes: the same pods, "
            "four times the nodes to filter and score).",
            "",
            *st,
            "",
            f"![scale]({stem}-scale.png)",
            "",
        ]
    if st := steady_table(results):
        lines += [
            "## S6 steady state",
            "",
            "Open-loop arrival (see `bench/steady.py`): a ramp from the start rate in steps, each sustained "
            "when p99 creation-to-bound <= 5 s and the pending depth <= 2 s of arrivals; then one steady run "
            "at the median highest sustained rate. p50/p99 and pending depth are of the steady run.",
            "",
            *st,
            "",
            f"![steady state]({stem}-steady.png)",
            "",
        ]
    lines += ["## Not compared", ""]
    lines += [f"* **{name}**: {why}" for name, why in NOT_COMPARED]
    lines += [
        "",
        "## All runs",
        "",
        "```",
        json.dumps({f"{k[0]}/{k[1]}": [r.__dict__ for r in v] for k, v in results.items()}, indent=1),
        "```",
        "",
    ]
    md.write_text("\n".join(lines))
    plots(out, stem, results)
    return md


def plots(out: Path, stem: str, results: dict[tuple[str, str], list[RunResult]]) -> None:
    """The PNGs (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    colors = {OME: "tab:blue", COSCHED: "tab:orange", KUBE: "tab:green"}
    scen = [s for s in MAIN_SCENARIOS[1:] if any(k[0] == s for k in results)]
    if scen:
        limit = results.get(("limit", "binding client"))
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
        w = 0.27
        for i, s in enumerate(SCHEDULERS):
            xs = [x + i * w for x in range(len(scen))]
            rate = [median_result(results[(c, s)]).pods_per_s if (c, s) in results else 0 for c in scen]
            p99 = [median_result(results[(c, s)]).lat_p99 if (c, s) in results else 0 for c in scen]
            ax1.bar(xs, rate, w, label=LABEL[s], color=colors[s])
            ax2.bar(xs, p99, w, label=LABEL[s], color=colors[s])
        if limit:
            ax1.axhline(median_result(limit).pods_per_s, color="grey", linestyle="--", label="binding limit")
        for ax, title in ((ax1, "throughput (pods/s)"), (ax2, "p99 start-to-bound latency (s)")):
            ax.set_xticks([x + w for x in range(len(scen))], scen)
            ax.set_title(title)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{stem}.png", dpi=100)
        plt.close(fig)
    pts = scale_points(results)
    if pts:
        fig, axes = plt.subplots(1, 3, figsize=(14, 4))
        for (base, sched), rs in pts.items():
            xs = [r.nodes for r in rs]
            style = "-o" if base == "S1" else "--s"
            for ax, ys in zip(
                axes,
                ([r.pods_per_s for r in rs], [_cpu_ms_per_pod(r) for r in rs], [r.rss_mb for r in rs]),
                strict=True,
            ):
                ax.plot(xs, ys, style, color=colors[sched], label=f"{base} {LABEL[sched]}")
        for ax, title in zip(axes, ("pods/s", "scheduler CPU ms per pod", "scheduler peak RSS MiB"), strict=True):
            ax.set_xscale("log")
            ax.set_xlabel("nodes")
            ax.set_title(title)
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"{stem}-scale.png", dpi=100)
        plt.close(fig)
    s6 = {k[1]: rs[0] for k, rs in results.items() if k[0] == "S6"}
    if s6:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
        for sched, r in s6.items():
            for j, ramp in enumerate(r.notes.get("ramps", [])):
                steps = ramp["steps"]
                ax1.plot(
                    [s["rate"] for s in steps],
                    [s["p99"] for s in steps],
                    "-o",
                    color=colors[sched],
                    alpha=0.5 + 0.5 * (j == 0),
                    label=LABEL[sched] if j == 0 else None,
                )
            pend = r.notes.get("steady", {}).get("pending", [])
            rate = r.notes.get("steady", {}).get("rate", 0)
            ax2.plot(
                [t for t, _ in pend], [p for _, p in pend], color=colors[sched], label=f"{LABEL[sched]} at {rate:.0f}/s"
            )
        ax1.axhline(5.0, color="grey", linestyle="--", label="5 s")
        ax1.set_xlabel("offered pods/s")
        ax1.set_title("ramp: p99 creation-to-bound (s)")
        ax1.set_yscale("log")
        ax2.set_xlabel("s since arrivals began")
        ax2.set_title("steady run: pending pods")
        for ax in (ax1, ax2):
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{stem}-steady.png", dpi=100)
        plt.close(fig)
