"""Label selectors and node selectors, compiled once and matched many times.

Mirrors ``k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go`` (``LabelSelectorAsSelector``:
a nil selector matches nothing, an empty one matches everything) and
``k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go`` (node selector
terms are ORed, the requirements of one term ANDed, ``Gt``/``Lt`` compare integers, and
``matchFields`` only knows ``metadata.name``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ome_scheduler.api.core import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from ome_scheduler.api.meta import LabelSelector

_INT64 = re.compile(r"[+-]?[0-9]+")


def _parse_int64(v: str) -> int | None:
    """``strconv.ParseInt(v, 10, 64)``: ASCII digits with an optional sign, in int64 range."""
    if not _INT64.fullmatch(v):
        return None
    n = int(v)
    return n if -(2**63) <= n < 2**63 else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One compiled ``key op values`` requirement."""

    key: str
    op: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy the requirement; an unknown operator matches nothing."""
        op = self.op
        if op == "In":
            v = labels.get(self.key)
            return v is not None and v in self.values
        if op == "NotIn":
            # As upstream: a missing key is "not in" any set (use Exists to require the key).
            v = labels.get(self.key)
            return v is None or v not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            # Gt/Lt take exactly one integer value; a value or label that is not an int64 fails
            # the requirement rather than raising, as upstream's ``Requirement.Matches`` does.
            v = labels.get(self.key)
            if v is None or len(self.values) != 1:
                return False
            have = _parse_int64(v)
            want = _parse_int64(next(iter(self.values)))
            if have is None or want is None:
                return False
            return have > want if op == "Gt" else have < want
        return False


class Selector:
    """A compiled label selector: all requirements must hold.

    ``Selector.nothing()`` never matches (upstream ``labels.Nothing()``);
    ``Selector(())`` always matches (``labels.Everything()``).
    """

    __slots__ = ("requirements", "_nothing")

    def __init__(self, requirements: Sequence[Requirement], *, nothing: bool = False) -> None:
        self.requirements = tuple(requirements)
        self._nothing = nothing

    @classmethod
    def nothing(cls) -> Selector:
        """A selector that matches no label set (a nil ``metav1.LabelSelector``)."""
        return cls((), nothing=True)

    @classmethod
    def everything(cls) -> Selector:
        """A selector that matches every label set (an empty ``metav1.LabelSelector``)."""
        return cls(())

    @classmethod
    def from_label_selector(cls, sel: LabelSelector | None) -> Selector:
        """Compile a ``metav1.LabelSelector``.

        Raises:
            ValueError: an unknown operator, or In/NotIn without values, as upstream's
                ``LabelSelectorAsSelector`` rejects them.
        """
        if sel is None:
            return cls.nothing()
        # Sorted so that equal selectors compile to equal requirement tuples (and index keys).
        reqs = [Requirement(k, "In", frozenset((v,))) for k, v in sorted(sel.match_labels.items())]
        for e in sel.match_expressions:
            if e.operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise ValueError(f"{e.operator!r} is not a valid label selector operator")
            if e.operator in ("In", "NotIn") and not e.values:
                raise ValueError(
                    f"values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty (key {e.key!r})"
                )
            reqs.append(Requirement(e.key, e.operator, frozenset(e.values)))
        return cls(reqs)

    @classmethod
    def from_map(cls, labels: Mapping[str, str]) -> Selector:
        """``labels.SelectorFromSet``: every key must equal its value (empty map: everything)."""
        return cls([Requirement(k, "In", frozenset((v,))) for k, v in sorted(labels.items())])

    def is_nothing(self) -> bool:
        """True for :meth:`nothing` selectors."""
        return self._nothing

    def required_pair(self) -> tuple[str, str] | None:
        """The first ``key=value`` every matching label set must contain (a ``matchLabels``
        entry or a one-value ``In``), or None; used to pick an index bucket."""
        if self._nothing:
            return None
        for r in self.requirements:
            if r.op == "In" and len(r.values) == 1:
                return (r.key, next(iter(r.values)))
        return None

    def is_empty(self) -> bool:
        """True for selectors without requirements that match everything."""
        return not self._nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether every requirement holds for ``labels`` (never for :meth:`nothing`)."""
        if self._nothing:
            return False
        for r in self.requirements:
            if not r.matches(labels):
                return False
        return True

    def with_requirements(self, extra: Sequence[Requirement]) -> Selector:
        """A copy with more requirements ANDed in (used for matchLabelKeys)."""
        if self._nothing:
            return self
        return Selector(self.requirements + tuple(extra))


def _node_requirement(r: NodeSelectorRequirement) -> Requirement:
    return Requirement(r.key, r.operator, frozenset(r.values))


class NodeSelectorMatcher:
    """A compiled ``v1.NodeSelector``: terms are ORed, an empty term matches no node."""

    __slots__ = ("terms",)

    def __init__(self, terms: Sequence[tuple[tuple[Requirement, ...], tuple[Requirement, ...]]]) -> None:
        self.terms = tuple(terms)

    @classmethod
    def from_node_selector(cls, ns: NodeSelector) -> NodeSelectorMatcher:
        """Compile every term of ``ns``; operators are checked at match time (unknown: no match)."""
        return cls([compile_term(t) for t in ns.node_selector_terms])

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Whether any term matches the node (``labels``; ``node_name`` for ``matchFields``)."""
        for exprs, fields in self.terms:
            if term_matches(exprs, fields, node_name, labels):
                return True
        return False


def compile_term(t: NodeSelectorTerm) -> tuple[tuple[Requirement, ...], tuple[Requirement, ...]]:
    """Compile one node selector term into (label requirements, field requirements)."""
    return (
        tuple(_node_requirement(r) for r in t.match_expressions),
        tuple(_node_requirement(r) for r in t.match_fields),
    )


def term_matches(
    exprs: tuple[Requirement, ...], fields: tuple[Requirement, ...], node_name: str, labels: Mapping[str, str]
) -> bool:
    """Whether a compiled term matches a node; a term with no requirements matches nothing."""
    if not exprs and not fields:
        return False
    for r in exprs:
        if not r.matches(labels):
            return False
    for r in fields:
        if r.key != "metadata.name":  # the only field upstream supports; others never match
            return False
        if not r.matches({"metadata.name": node_name}):
            return False
    return True
