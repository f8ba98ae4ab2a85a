"""The control plane's audit log: every request each user made of the API server, and its answer.

kube-apiserver writes one ``audit.k8s.io/v1`` Event per line (``e2e/audit-policy.yaml``: every
request at Metadata level, the ResponseStarted and ResponseComplete stages) to
``<state dir>/logs/audit.log``, rotated into ``audit-<time>.log`` files every 100 MB. A request
is a :class:`Permission` (verb and resource, as RBAC rules name them), so what a user did can be
compared with what its roles grant (``tests.support.rbac.rule_permissions``). ``audit_events``
reads a cluster's whole log.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.harness.cluster import Cluster
from tests.support.rbac import Permission


def event_permission(event: Mapping[str, Any]) -> Permission:
    """What an audit Event's request needed: its verb on its ``objectRef``, or on its URL path
    for a non-resource request."""
    ref = event.get("objectRef")
    if not ref:
        return Permission(str(event["verb"]), str(event["requestURI"]).split("?", 1)[0])
    res = str(ref["resource"]) + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return Permission.of(str(event["verb"]), str(ref.get("apiGroup") or ""), res)


def refused(event: Mapping[str, Any]) -> bool:
    """Whether the request was refused: not authenticated (401) or not authorized (403, or a
    ``forbid`` decision of the authorizer)."""
    code = int((event.get("responseStatus") or {}).get("code") or 0)
    decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
    return code in (401, 403) or decision == "forbid"


@dataclass(frozen=True)
class AuditLog:
    """The audit events under ``log_dir`` of requests received at or after ``since`` (UTC)."""

    log_dir: Path
    since: dt.datetime

    def files(self) -> list[Path]:
        """The rotated files, oldest first (their names end in a sortable time), then audit.log."""
        rotated = sorted(p for p in self.log_dir.glob("audit-*.log"))
        current = self.log_dir / "audit.log"
        return [*rotated, current] if current.exists() else rotated

    def events(self) -> Iterator[dict[str, Any]]:
        """Every event of every file, in the order written (both stages of a request; ``since``
        is not applied)."""
        for path in self.files():
            with path.open("rb") as f:
                for line in f:
                    if line.strip():
                        yield json.loads(line)

    def requests(self, username: str | None = None) -> list[dict[str, Any]]:
        """One Event per request (``username``'s only, when given): its ResponseComplete stage, or
        ResponseStarted for a watch still open. Requests received before ``since`` are left out."""
        last: dict[str, dict[str, Any]] = {}
        for ev in self.events():
            if username is not None and (ev.get("user") or {}).get("username") != username:
                continue
            if ev.get("stage") not in ("ResponseStarted", "ResponseComplete", "Panic"):
                continue
            if dt.datetime.fromisoformat(ev["requestReceivedTimestamp"]) < self.since:
                continue
            last[ev["auditID"]] = ev  # ResponseComplete follows ResponseStarted
        return list(last.values())


def permissions(events: Iterable[Mapping[str, Any]]) -> dict[Permission, int]:
    """How many of ``events`` needed each permission."""
    out: dict[Permission, int] = {}
    for ev in events:
        p = event_permission(ev)
        out[p] = out.get(p, 0) + 1
    return out


def audit_events(cluster: Cluster) -> list[dict[str, Any]]:
    """Every event of the apiserver's audit log (``Cluster.audit_log`` and its rotated files),
    in the order written (``audit.k8s.io/v1`` Event objects at Metadata level: ``verb``,
    ``user.username``, ``userAgent``, ``objectRef``, ``responseStatus``,
    ``requestReceivedTimestamp``...).

    Raises AssertionError when the cluster writes no audit log (benchmark mode, or a cluster
    started before audit logging was added: ``python -m e2e.harness down`` and start afresh).
    """
    log = cluster.audit_log
    assert log.exists(), f"no audit log at {log}: restart the cluster (python -m e2e.harness down)"
    return list(AuditLog(log.parent, dt.datetime.min.replace(tzinfo=dt.UTC)).events())
