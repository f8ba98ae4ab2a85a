"""RBAC permissions as data: what a PolicyRule grants, and what the chart documents as rarely used.

A :class:`Permission` is one verb on one resource, as ``kubectl auth can-i`` takes it. The chart
test (``tests/test_chart.py``) compares the rules the chart renders with what the scheduler
needs; the e2e RBAC test (``e2e/test_rbac.py``) compares them with what the scheduler did, read
from the API server's audit log (``e2e/harness/audit.py``). Nothing here talks to a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple


class Permission(NamedTuple):
    """One verb on one resource, written as ``kubectl auth can-i`` takes it.

    ``resource`` is ``<resource>[/<subresource>][.<group>]`` (``pods``, ``pods/binding``,
    ``leases.coordination.k8s.io``), or a non-resource URL path (``/metrics``).
    """

    verb: str
    resource: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}"

    @classmethod
    def of(cls, verb: str, group: str, resource: str) -> Permission:
        """The permission for ``verb`` on ``resource`` (with its ``/subresource``) in API ``group``."""
        return cls(verb, f"{resource}.{group}" if group else resource)

    @classmethod
    def parse(cls, text: str) -> Permission:
        """``"get pods"`` -> Permission("get", "pods"). Raises ValueError when not two words."""
        verb, resource = text.split()
        return cls(verb, resource)


RARELY_USED = re.compile(r"^\s*#\s*rarely used: (\S+) (\S+): (.+)$", re.M)
"""A ``# rarely used: <verb> <resource>: <why>`` comment in the chart's RBAC template."""


def rarely_used(manifest: str) -> dict[Permission, str]:
    """The permissions a rendered chart documents as needed but rarely used, with why."""
    return {Permission(m.group(1), m.group(2)): m.group(3) for m in RARELY_USED.finditer(manifest)}


def rule_permissions(rule: Mapping[str, Any]) -> set[Permission]:
    """Every permission an RBAC PolicyRule grants (``resourceNames`` narrow a rule but do not
    change which verbs on which resources it is about)."""
    verbs = rule.get("verbs") or []
    out = {Permission(v, url) for v in verbs for url in rule.get("nonResourceURLs") or []}
    for group in rule.get("apiGroups") or []:
        for res in rule.get("resources") or []:
            out |= {Permission.of(v, group, res) for v in verbs}
    return out
