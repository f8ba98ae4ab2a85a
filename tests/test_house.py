"""House rules checked from the source: no class in ``ome_scheduler/`` is longer than
:data:`MAX_CLASS_LINES` lines (issue 23: split by concept, one framework concept per module).

A class's length is its ``ClassDef`` from the ``class`` line to its last line
(``end_lineno - lineno + 1``), docstrings and comments included.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_CLASS_LINES = 450


def class_lengths(root: Path = ROOT) -> list[tuple[int, str]]:
    """(lines, ``path:line Class``) of every class under ``root / "ome_scheduler"``, nested ones too."""
    out = []
    for path in sorted((root / "ome_scheduler").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                where = f"{path.relative_to(root)}:{node.lineno} {node.name}"
                out.append((node.end_lineno - node.lineno + 1, where))
    return out


def test_no_class_is_longer_than_the_limit() -> None:
    long = sorted((n, where) for n, where in class_lengths() if n > MAX_CLASS_LINES)
    assert not long, f"classes over {MAX_CLASS_LINES} lines (split them by concept):\n" + "\n".join(
        f"  {where}: {n} lines" for n, where in long
    )


def test_the_count_catches_a_long_class(tmp_path: Path) -> None:
    pkg = tmp_path / "ome_scheduler"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    (pkg / "big.py").write_text(f"class Big:\n{body}\n\n\nclass Small:\n    pass\n", encoding="utf-8")
    assert class_lengths(tmp_path) == [
        (MAX_CLASS_LINES + 1, "ome_scheduler/big.py:1 Big"),
        (2, "ome_scheduler/big.py:454 Small"),
    ]
