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
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (importing room, imported room): forbidden. A room is a module path prefix below ome_scheduler.
# These are the finer walls; the coarse ones are each subpackage's "May import:" line (below).
TOOLS_WITHOUT_IO = (
    "snapshot",
    "anonymize",
    "simulate",
    "simulation",
    "virtualtime",
    "standins",
    "inputs",
    "report",
    "domainmap",
    "explain",
    "explainer",
)
WALLS: tuple[tuple[str, str, str], ...] = (
    ("plugins", "framework.runtime", "plugins depend on framework interfaces, not the runtime"),
    ("backend", "framework.runtime", "the backend depends on framework interfaces, not the runtime"),
    ("scheduler", "plugins.gangpack", "the core reaches OMEGangPack only through the registry and the Handle"),
    ("schedule_one", "plugins", "the scheduling cycle reaches plugins only through the framework"),
    ("generic_scheduler", "plugins", "node selection reaches plugins only through the framework"),
    ("eventhandlers", "plugins", "event handlers feed the backend, never a plugin"),
    ("app", "plugins", "the process reaches plugins only through the scheduler's registry"),
    ("app.debugger", "plugins", "the cache debugger reads plugin state only through Plugin.check_state"),
    ("controllers", "plugins", "controllers read the backend's state, never a plugin's"),
    ("controllers", "scheduler", "controllers run beside the scheduler, not inside it"),
    ("serving", "scheduler", "the endpoint reads health and metrics, never scheduling state"),
    ("app.informers", "app.run", "the informer table is read by snapshot without the server stack"),
    ("app.informers", "serving", "the informer table is read by snapshot without the server stack"),
    *((f"tools.{t}", "kube", "only tools/listing.py talks to the API server") for t in TOOLS_WITHOUT_IO),
    ("tools", "app.run", "the offline tools never load the server stack"),
    ("tools", "serving", "the offline tools never load the server stack"),
    *(
        (engine, "tools", "the engine knows nothing of the offline tools")
        for engine in ("scheduler", "schedule_one", "generic_scheduler", "eventhandlers", "metrics", "logs")
    ),
    ("metrics", "", "metrics families are a leaf below everything"),
    ("logs", "", "logging is a leaf below everything"),
    ("cli", "framework", "the command reaches the engine only through app/ and tools/"),
    ("cli", "scheduler", "the command reaches the engine only through app/ and tools/"),
)
ROOT_MODULES_AT_MOST = 10
"""Modules beside the subpackages in ``ome_scheduler/`` (issue 23: ``ls`` shows the architecture)."""


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
                if target in ("ome_scheduler",):
                    continue
                rel = path.relative_to(root)
                out.append(f"{rel}:{line}: imports {target} ({src}/ -> {dst or 'anything'}/: {why})")
    return out


def subpackages(root: Path = ROOT) -> list[Path]:
    """The top-level subpackages of ``ome_scheduler/`` (each a room)."""
    return sorted(p.parent for p in (root / "ome_scheduler").glob("*/__init__.py"))


def may_import(package: Path) -> tuple[str, ...] | str:
    """The rooms ``package``'s docstring says it may import (its "May import:" line), or why
    the docstring does not say (no docstring, no "Lives here:", no "May import:")."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    if "Lives here" not in doc:
        return "its docstring does not say what lives there (a 'Lives here' paragraph)"
    for para in doc.split("\n\n"):
        flat = " ".join(para.split())
        if flat.startswith("May import:"):
            return tuple(r.strip() for r in flat.removeprefix("May import:").rstrip(".").split(",") if r.strip())
    return "its docstring does not say what it may import (a 'May import:' line)"


def top_room(module: str) -> str:
    """``ome_scheduler.plugins.gangpack.plugin`` -> ``plugins``; a root module is its own room."""
    return room(module).split(".")[0]


def allowlist_breaches(root: Path = ROOT) -> list[str]:
    """Imports that leave a subpackage for a room its docstring does not allow."""
    out = []
    allowed = {p.name: may_import(p) for p in subpackages(root)}
    for name, rooms in allowed.items():
        if isinstance(rooms, str):
            out.append(f"ome_scheduler/{name}/__init__.py: {rooms}")
    for path in sources(root):
        me = module_name(path, root)
        mine = top_room(me)
        rooms = allowed.get(mine)
        if not isinstance(rooms, tuple):
            continue
        for line, target in imports(path, root):
            if not target.startswith("ome_scheduler.") or top_room(target) == mine:
                continue
            if top_room(target) not in rooms:
                rel = path.relative_to(root)
                out.append(f"{rel}:{line}: imports {target} ({mine}/ may import only {', '.join(rooms)})")
    return out


def test_every_subpackage_says_what_lives_there_and_what_it_may_import() -> None:
    found = allowlist_breaches()
    assert not found, "subpackage walls breached:\n" + "\n".join(found)


def test_the_package_root_shows_the_architecture() -> None:
    """``ls ome_scheduler``: the modules that mirror ``pkg/scheduler``'s root, beside the rooms."""
    modules = sorted(p.name for p in (ROOT / "ome_scheduler").glob("*.py"))
    assert len(modules) <= ROOT_MODULES_AT_MOST, modules


def test_the_allowlist_catches_a_breach(tmp_path: Path) -> None:
    """A serving module importing the scheduler is reported; a package without the lines too."""
    pkg = tmp_path / "ome_scheduler"
    (pkg / "serving").mkdir(parents=True)
    (pkg / "serving" / "__init__.py").write_text('"""x\n\nLives here: y.\n\nMay import: logs."""\n', encoding="utf-8")
    (pkg / "serving" / "endpoints.py").write_text("from ome_scheduler import scheduler\n", encoding="utf-8")
    (pkg / "scheduler.py").write_text("", encoding="utf-8")
    (pkg / "kube").mkdir()
    (pkg / "kube" / "__init__.py").write_text('"""No lines."""\n', encoding="utf-8")
    assert allowlist_breaches(tmp_path) == [
        "ome_scheduler/kube/__init__.py: its docstring does not say what lives there (a 'Lives here' paragraph)",
        "ome_scheduler/serving/endpoints.py:1: imports ome_scheduler.scheduler (serving/ may import only logs)",
    ]


def test_explain_help_loads_no_engine_and_no_server_stack() -> None:
    """``ome-scheduler explain --help`` (and ``simulate --help``, ``snapshot --help``) imports
    only the command line: the engine, the API client and the server stack load after the
    arguments parse, when they are used."""
    probe = (
        "import sys\n"
        "from ome_scheduler.cli import main\n"
        "try:\n"
        "    main([sys.argv[1], '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('ome_scheduler.scheduler', 'ome_scheduler.kube', 'ome_scheduler.app.run', 'ome_scheduler.serving',\n"
        "         'aiohttp', 'cryptography', 'pydantic', 'kr8s', 'prometheus_client', 'msgspec')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    for tool in ("explain", "simulate", "snapshot"):
        r = subprocess.run([sys.executable, "-c", probe, tool], capture_output=True, text=True, check=True)
        assert r.stdout.splitlines()[-1] == "[]", (tool, r.stdout[-2000:])


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
    """The checker itself: a plugin importing the framework runtime is reported with file and line."""
    probe = tmp_path / "ome_scheduler" / "plugins" / "probe.py"
    probe.parent.mkdir(parents=True)
    (tmp_path / "ome_scheduler" / "framework").mkdir()
    (tmp_path / "ome_scheduler" / "framework" / "runtime.py").write_text("", encoding="utf-8")
    probe.write_text(
        "import os\n\n\ndef f() -> None:\n    from ome_scheduler.framework import runtime\n", encoding="utf-8"
    )
    found = breaches(tmp_path)
    assert found == [
        "ome_scheduler/plugins/probe.py:5: imports ome_scheduler.framework.runtime "
        "(plugins/ -> framework.runtime/: plugins depend on framework interfaces, not the runtime)"
    ]


# Distribution name -> import name, where they differ.
IMPORT_NAMES = {
    "prometheus-client": "prometheus_client",
    "pydantic-settings": "pydantic_settings",
    "pyyaml": "yaml",
    "protobuf": "google",
}


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
