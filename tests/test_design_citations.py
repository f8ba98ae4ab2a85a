"""The code's citations of the design resolve inside the repository.

Docstrings and comments in ``ome_scheduler/`` cite the design by number: a section (``§3.7``,
``§ 3.7``, ``spec §2.6``, ``§6``) or a product rule (``rule 9``, ``Rule 9:``, ``rules 1, 2``,
``rules 8 and 9``, ``product rule 5``). Each must name a heading under ``docs/design/``: a
heading whose text starts with ``3.7 `` (or ``6. `` for a whole section), or with ``Rule 9``.
A section cited right after a document on the same line (``docs/design/queue.md §2``) must be
a heading of that document.

Every documentation file the code names (a ``.md``, ``.rst`` or ``.txt`` path, or anything
under ``../shared/``) must be in the repository: at that path from the repository root, or
under ``docs/``. Upstream source paths (``pkg/scheduler/framework/runtime.go``) and URLs are
citations of other projects, not of this repository's documents, and are allowed. The word
"rule" without a number after it is prose, not a citation. A failure names the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = Path("docs") / "design"

SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")
"""``§3.7``, ``§ 3.7``, ``§6``: the number, without a sentence's closing dot."""
RULES = re.compile(r"\b[Rr]ules?\s+(\d+(?:\s*(?:,|and|or|to|&|–|-)\s*\d+)*)\b")
"""``rule 9``, ``Rule 9``, ``rules 1, 2``, ``rules 8 and 9``, ``rules 10–12``."""
DOC = re.compile(r"(?<![\w/.-])((?:\.\./)*[\w.-]+(?:/[\w.-]+)*\.(?:md|rst|txt))(?![\w/-])")
"""A path naming a documentation file (``spec/gangpack.md``, ``docs/python-stack.md``)."""
SHARED = re.compile(r"(?<![\w.-])(?:\.\./)+shared(?:/[\w.-]*)*")
"""The project's shared reference material, which lives outside the repository."""
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
HEADING_NUMBER = re.compile(r"(\d+(?:\.\d+)*)\.?\s")
HEADING_RULE = re.compile(r"Rule\s+(\d+)(?!\d)")
BETWEEN = re.compile(r"[\s`'\"(),;:§\d.–-]*")
"""What may stand between a document and the section numbers cited in it."""


@dataclass(frozen=True)
class Headings:
    """The section numbers and rule numbers that one set of documents has headings for."""

    sections: frozenset[str]
    rules: frozenset[str]


def headings(paths: list[Path]) -> Headings:
    """The numbered and ``Rule N`` headings of Markdown files (fenced code blocks skipped)."""
    sections: set[str] = set()
    rules: set[str] = set()
    for path in paths:
        fence = ""
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.lstrip()
            if stripped.startswith(("```", "~~~")):
                mark = stripped[:3]
                fence = "" if fence == mark else (fence or mark)
                continue
            m = HEADING.match(line)
            if fence or m is None:
                continue
            text = m.group(1) + " "
            if n := HEADING_NUMBER.match(text):
                sections.add(n.group(1))
            if r := HEADING_RULE.match(text):
                rules.add(r.group(1))
    return Headings(frozenset(sections), frozenset(rules))


def sources(root: Path) -> list[Path]:
    return sorted(p for p in (root / "ome_scheduler").rglob("*.py") if "__pycache__" not in p.parts)


def rule_numbers(cited: str) -> list[str]:
    """``"8 and 9"`` -> ``["8", "9"]``; ``"10–12"`` -> ``["10", "11", "12"]``."""
    out: list[str] = []
    for part in re.split(r"\s*(?:,|and|or|&)\s*", cited):
        ends = [int(x) for x in re.split(r"\s*(?:to|–|-)\s*", part) if x]
        out.extend(str(n) for n in range(ends[0], ends[-1] + 1))
    return out


def is_url(line: str, start: int) -> bool:
    """Whether the match at ``start`` is part of a URL (``https://...``)."""
    word = line.rfind(" ", 0, start) + 1
    return "://" in line[word:start]


def doc_path(root: Path, cited: str) -> Path | None:
    """The file inside the repository that ``cited`` names, from the root or under ``docs/``; or None."""
    for base in (root, root / "docs"):
        path = (base / cited).resolve()
        if path.is_relative_to(root.resolve()) and path.is_file():
            return path
    return None


def unresolved_citations(root: Path = ROOT) -> list[str]:
    """``file:line: ...`` for every section or rule the code cites that has no heading."""
    design = headings(sorted((root / DESIGN).rglob("*.md")))
    per_doc: dict[Path, Headings] = {}
    out: list[str] = []
    for path in sources(root):
        rel = path.relative_to(root)
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            docs = [m for m in DOC.finditer(line) if not is_url(line, m.start())]
            for m in SECTION.finditer(line):
                number = m.group(1)
                before = [d for d in docs if d.end() <= m.start()]
                cited_in = before[-1] if before else None
                if cited_in is not None:
                    between = re.sub(r"\b(?:and|or|to)\b", "", line[cited_in.end() : m.start()])
                    if BETWEEN.fullmatch(between) is None:
                        cited_in = None
                if cited_in is None:
                    if number not in design.sections:
                        out.append(f"{rel}:{lineno}: §{number} has no heading under {DESIGN.as_posix()}/")
                    continue
                doc = doc_path(root, cited_in.group(1))
                if doc is None or doc.suffix != ".md":
                    continue  # a missing document is reported by unresolved_documents
                if doc not in per_doc:
                    per_doc[doc] = headings([doc])
                if number not in per_doc[doc].sections:
                    out.append(f"{rel}:{lineno}: §{number} has no heading in {doc.relative_to(root.resolve())}")
            for m in RULES.finditer(line):
                for number in rule_numbers(m.group(1)):
                    if number not in design.rules:
                        out.append(
                            f"{rel}:{lineno}: rule {number} has no heading 'Rule {number}' under {DESIGN.as_posix()}/"
                        )
    return out


def unresolved_documents(root: Path = ROOT) -> list[str]:
    """``file:line: ...`` for every documentation file the code names that the repository lacks."""
    out: list[str] = []
    for path in sources(root):
        rel = path.relative_to(root)
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            named: list[str] = []
            for m in SHARED.finditer(line):
                named.append(m.group(0))
            for m in DOC.finditer(line):
                if not is_url(line, m.start()) and doc_path(root, m.group(1)) is None:
                    if not any(m.group(1).startswith(s) or s.startswith(m.group(1)) for s in named):
                        named.append(m.group(1))
            for cited in named:
                out.append(f"{rel}:{lineno}: cites {cited}, which is not in the repository")
    return out


def test_every_design_citation_resolves() -> None:
    found = unresolved_citations()
    assert not found, "citations without a heading under docs/design/:\n" + "\n".join(found)


def test_every_cited_document_is_in_the_repository() -> None:
    found = unresolved_documents()
    assert not found, "documents cited but not in the repository:\n" + "\n".join(found)


def _repo(tmp_path: Path, code: str) -> Path:
    """A repository with one source file and a small design document."""
    (tmp_path / "ome_scheduler").mkdir()
    (tmp_path / "ome_scheduler" / "probe.py").write_text(code, encoding="utf-8")
    (tmp_path / "docs" / "design").mkdir(parents=True)
    (tmp_path / "docs" / "design" / "gang.md").write_text(
        "# Gang\n\n### Rule 8: holds\n\n### Rule 9: follow\n\n## 3. Planning\n\n### 3.7 pin_gang\n\n"
        "```text\n## 99.9 not a heading: inside a code block\n```\n",
        encoding="utf-8",
    )
    (tmp_path / "docs" / "design" / "queue.md").write_text("# Queue\n\n## 2. States\n", encoding="utf-8")
    return tmp_path


def test_the_checker_reports_a_made_up_citation_and_file(tmp_path: Path) -> None:
    """A section nobody wrote and a document the repository lacks are both named, with line."""
    root = _repo(tmp_path, '"""Planning.\n\nSee spec/nope.md §3.7; the gang waits (§99.9, rule 12)."""\n')
    assert unresolved_citations(root) == [
        "ome_scheduler/probe.py:3: §99.9 has no heading under docs/design/",
        "ome_scheduler/probe.py:3: rule 12 has no heading 'Rule 12' under docs/design/",
    ]
    assert unresolved_documents(root) == [
        "ome_scheduler/probe.py:3: cites spec/nope.md, which is not in the repository"
    ]


def test_the_checker_reads_citations_as_written(tmp_path: Path) -> None:
    """Lists, spaces, documents named before their sections, prose, upstream paths and URLs."""
    code = (
        "# §3.7, § 3.7 and §3. close a sentence; rules 8 and 9, Rule 9: and product rule 8 resolve\n"
        "# the rule of kube-scheduler, the rules of the framework: prose without a number\n"
        "# pkg/scheduler/framework/runtime/framework.go and https://example.com/x/README.md are upstream\n"
        "# docs/design/gang.md §3.7, §3 and design/queue.md §2 resolve in the document they follow\n"
        "# docs/design/queue.md §3.7 does not: that section is in the gang page\n"
        "# ../shared/spec/gangpack.md is outside the repository\n"
    )
    root = _repo(tmp_path, code)
    assert unresolved_citations(root) == ["ome_scheduler/probe.py:5: §3.7 has no heading in docs/design/queue.md"]
    assert unresolved_documents(root) == [
        "ome_scheduler/probe.py:6: cites ../shared/spec/gangpack.md, which is not in the repository"
    ]
