"""The documentation's links resolve, and README.md stays an index.

README.md is the package's long description and the index of the pages under ``docs/``; the
chart and the benchmarks have their own README. Every relative link in those pages must name a
file or directory of the repository, and a ``#fragment`` into a markdown file must name one of
its headings, with GitHub's anchors (lower case, punctuation dropped, spaces as hyphens,
``-1``, ``-2``... for repeated headings).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

PAGES = sorted(
    [
        REPO / "README.md",
        REPO / "bench/README.md",
        REPO / "helm/ome-scheduler/README.md",
        *(REPO / "docs").rglob("*.md"),
    ]
)

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(2).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The targets of the links and images outside code (a link's text may wrap lines)."""
    return LINK.findall(CODE_SPAN.sub("", "\n".join(prose(path.read_text(encoding="utf-8")))))


def broken(page: Path, root: Path = REPO) -> list[str]:
    out = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, fragment = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            out.append(f"{target}: no such file")
            continue
        if not dest.is_relative_to(root):
            out.append(f"{target}: outside the repository")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            out.append(f"{target}: no heading #{fragment} in {dest.relative_to(root)}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    reached, todo = set(), [REPO / "README.md"]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        for target in links(page):
            file = target.partition("#")[0]
            dest = (page.parent / file).resolve() if file else page
            if file and dest.suffix == ".md" and dest.exists():
                todo.append(dest)
    assert [str(p.relative_to(REPO)) for p in PAGES if p not in reached] == []


def test_the_readme_stays_an_index() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_the_checker_finds_what_it_should(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "# Title: `code` and more\n\n## Twice\n\n## Twice\n\n```sh\n# not a heading\n[x](gone.md)\n```\n"
    )
    assert anchors(tmp_path / "a.md") == {"title-code-and-more", "twice", "twice-1"}
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#twice-1) [self](#here) ![img](a.md) `[code](gone.md)` [web](https://example.com)\n"
        "[missing](gone.md) [bad\nanchor](a.md#nope) `a code span\n[over two](lines.md)`\n\n## Here\n"
    )
    assert links(page) == ["a.md#twice-1", "#here", "a.md", "https://example.com", "gone.md", "a.md#nope"]
    assert broken(page, tmp_path) == ["gone.md: no such file", "a.md#nope: no heading #nope in a.md"]


TEST_ID = re.compile(r"`((?:tests|bench|e2e)/[\w/]+\.py)(?:::(\w+))?")


def test_the_feature_gate_table_cites_tests_that_exist() -> None:
    """docs/feature-gates.md names its evidence as pytest ids: each file exists and defines the test."""
    text = (REPO / "docs" / "feature-gates.md").read_text()
    cited = TEST_ID.findall(text)
    assert len(cited) > 10
    for path, name in cited:
        src = REPO / path
        assert src.is_file(), f"{path} does not exist"
        if name:
            assert re.search(rf"^def {name}\(", src.read_text(), re.M), f"{path} has no test {name}"
