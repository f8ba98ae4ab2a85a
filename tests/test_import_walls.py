"""The walls between ome-scheduler's rooms, checked from the source's imports.

Like kube-scheduler's ``pkg/scheduler/.import-restrictions`` (checked by
``import-boss``): the scheduling engine (``framework/``, ``plugins/``, ``backend/``) does no
I/O, so it imports nothing from ``kube/`` (the API client, informers, recorder); plugins
depend on the framework's interfaces, never on its runtime; the typed API records
(``api/``) and the configuration (``config/``) sit below everything; no module imports
itself through a circle. Every import counts, including ``TYPE_CHECKING`` and
function-local ones. A breach fails naming the file, line and import.

The last test keeps ``pyproject.toml`` honest: every declared runtime dependency is imported
somewhere in ``ome_scheduler/``.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (importing room, imported room): forbidden. A room is a module path prefix below ome_scheduler.
WALLS: tuple[tuple[str, str, str], ...] = (
    ("framework", "kube", "the framework does no I/O"),
    ("plugins", "kube", "plugins do no I/O: they use Handle ports"),
    ("backend", "kube", "the cache and queue do no I/O"),
    ("plugins", "framework.runtime", "plugins depend on framework interfaces, not the runtime"),
    ("plugins", "scheduler", "plugins see the scheduler only as a Handle"),
    ("plugins", "schedule_one", "plugins see the scheduler only as a Handle"),
    ("plugins", "eventhandlers", "plugins see the scheduler only as a Handle"),
    ("plugins", "app", "plugins know nothing of the process"),
    ("framework", "plugins", "the framework knows plugins only through the registry it is given"),
    ("framework", "scheduler", "the framework is below the scheduler"),
    ("framework", "app", "the framework is below the process"),
    ("backend", "plugins", "the backend knows no plugin"),
    ("scheduler", "plugins.gangpack", "the core reaches OMEGangPack only through the registry and the Handle"),
    ("schedule_one", "plugins.gangpack", "the core reaches OMEGangPack only through the registry and the Handle"),
    ("generic_scheduler", "plugins.gangpack", "the core reaches OMEGangPack only through the registry"),
    ("eventhandlers", "plugins", "event handlers feed the backend, never a plugin"),
    ("app", "plugins.gangpack", "the process reaches OMEGangPack only through the registry"),
    ("backend", "scheduler", "the backend is below the scheduler"),
    ("api", "", "API records import only other API records"),
    ("config", "framework", "configuration is below the framework"),
    ("config", "plugins", "configuration is below the plugins"),
    ("config", "kube", "configuration does no I/O"),
    ("config", "backend", "configuration is below the backend"),
    ("util", "framework", "util is a leaf"),
    ("util", "plugins", "util is a leaf"),
    ("util", "backend", "util is a leaf"),
    ("util", "kube", "util is a leaf"),
    ("kube", "framework", "the API client knows nothing of scheduling"),
    ("kube", "plugins", "the API client knows nothing of scheduling"),
    ("kube", "backend", "the API client knows nothing of scheduling"),
    ("simulate", "kube", "the simulation reads files, never the API server (snapshot does)"),
    ("simreport", "kube", "the simulation report does no I/O"),
    ("domainmap", "kube", "the domain map draws a simulation result only"),
    *(
        (engine, tool, "the engine knows nothing of the offline tools")
        for engine in ("framework", "plugins", "backend", "scheduler", "schedule_one", "eventhandlers", "app")
        for tool in ("snapshot", "simulate", "simreport", "domainmap", "explain")
    ),
)
# Rooms an ``api`` module may still import (the ``("api", "")`` wall forbids everything else).
ALLOWED_FROM_API = ("api",)


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    me = module_name(path, root)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = me.split(".")
                if not path.name == "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for alias in node.names:
                # ``from pkg import module`` imports the module when one exists.
                sub = f"{mod}.{alias.name}"
                if (root / Path(*sub.split("."))).with_suffix(".py").exists():
                    yield node.lineno, sub
                else:
                    yield node.lineno, mod


def sources(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "ome_scheduler").rglob("*.py") if "__pycache__" not in p.parts)


def room(module: str) -> str:
    """``ome_scheduler.plugins.gangpack.plugin`` -> ``plugins.gangpack.plugin``."""
    return module.removeprefix("ome_scheduler.").removeprefix("ome_scheduler")


def in_room(module: str, prefix: str) -> bool:
    r = room(module)
    return prefix == "" or r == prefix or r.startswith(prefix + ".")


def breaches(root: Path = ROOT) -> list[str]:
    out = []
    for path in sources(root):
        me = module_name(path, root)
        for line, target in imports(path, root):
            if not target.startswith("ome_scheduler"):
                continue
            for src, dst, why in WALLS:
                if not in_room(me, src) or not in_room(target, dst):
                    continue
                if src == "api" and any(in_room(target, a) for a in ALLOWED_FROM_API):
                    continue
                if target in ("ome_scheduler",):
                    continue
                rel = path.relative_to(root)
                out.append(f"{rel}:{line}: imports {target} ({src}/ -> {dst or 'anything'}/: {why})")
    return out


def test_no_module_breaches_a_wall() -> None:
    found = breaches()
    assert not found, "import walls breached:\n" + "\n".join(found)


def test_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for path in sources():
        me = module_name(path)
        deps = graph.setdefault(me, set())
        for line, target in imports(path):
            if target.startswith("ome_scheduler.") and target != me:
                deps.add(target)
                where.setdefault((me, target), f"{path.relative_to(ROOT)}:{line}")
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    cycles.append(sorted(comp))
    lines = []
    for comp in cycles:
        members = set(comp)
        edges = [where[(a, b)] + f": {a} -> {b}" for a in comp for b in sorted(graph[a] & members)]
        lines.append("cycle among " + ", ".join(comp) + ":\n  " + "\n  ".join(edges))
    assert not cycles, "\n".join(lines)


def test_the_walls_catch_a_breach(tmp_path: Path) -> None:
    """The checker itself: a plugin importing the API client is reported with file and line."""
    probe = tmp_path / "ome_scheduler" / "plugins" / "probe.py"
    probe.parent.mkdir(parents=True)
    (tmp_path / "ome_scheduler" / "kube").mkdir()
    (tmp_path / "ome_scheduler" / "kube" / "client.py").write_text("", encoding="utf-8")
    probe.write_text("import os\n\n\ndef f() -> None:\n    from ome_scheduler.kube import client\n", encoding="utf-8")
    found = breaches(tmp_path)
    assert found == [
        "ome_scheduler/plugins/probe.py:5: imports ome_scheduler.kube.client "
        "(plugins/ -> kube/: plugins do no I/O: they use Handle ports)"
    ]


# Distribution name -> import name, where they differ.
IMPORT_NAMES = {"prometheus-client": "prometheus_client", "pydantic-settings": "pydantic_settings", "pyyaml": "yaml"}


def declared_runtime_dependencies() -> list[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    names = []
    for req in meta["project"]["dependencies"]:
        name = req
        for sep in "<>=!~[; ":
            name = name.split(sep)[0]
        names.append(name.strip().lower())
    return names


def imported_top_level_modules() -> set[str]:
    out: set[str] = set()
    for path in sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("dist", declared_runtime_dependencies())
def test_every_declared_dependency_is_imported(dist: str) -> None:
    module = IMPORT_NAMES.get(dist, dist.replace("-", "_"))
    assert module in imported_top_level_modules(), (
        f"pyproject.toml declares {dist!r} but nothing in ome_scheduler/ imports {module!r}: use it or remove it"
    )
