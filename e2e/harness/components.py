"""The control-plane components of the local cluster: their command lines and readiness checks.

One function per component (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)
returns a ``Component``: the argv to run, its port and how to tell that it is ready. Everything
listens on 127.0.0.1 and leader election is off. ``cluster.py`` decides the ports, paths and
start order; nothing here starts a process.

Admission: the apiserver keeps its default admission plugins. ``ServiceAccount`` stays on because
kube-controller-manager creates the default ServiceAccounts; ``TaintNodesByCondition`` stays on
because kwok reports nodes Ready and kube-controller-manager's node-lifecycle controller then
removes the ``node.kubernetes.io/not-ready`` taint, as on a real cluster. Benchmark mode turns
them off instead, with the request limits (scheduler_perf's settings).

Audit: outside benchmark mode the apiserver writes an audit log (``e2e/audit-policy.yaml``: every
request at ``Metadata`` level, JSON lines, ``<state>/logs/audit.log``) so tests can prove who sent
what and when (``audit.py``: ``AuditLog``, ``audit_events``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx

from e2e.harness.paths import AUDIT_POLICY_FILE, KWOK_STAGES_FILE
from e2e.harness.pki import admin_ssl_context

SERVICE_CIDR: Final = "10.0.0.0/24"
SA_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
ALWAYS_ALLOW_PATHS: Final = "/healthz,/readyz,/livez,/metrics"

#: Components in start order.
COMPONENTS: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
REQUIRED_BINARIES: Final = (*COMPONENTS, "kubectl")
#: ``down`` stops other processes (ome-scheduler) first, then these groups in turn.
STOP_ORDER: Final = (("kwok", "kube-scheduler", "kube-controller-manager"), ("kube-apiserver",), ("etcd",))

ETCD_TIMEOUT: Final = 15.0
APISERVER_TIMEOUT: Final = 90.0
COMPONENT_TIMEOUT: Final = 60.0


@dataclass(frozen=True)
class Component:
    """A process to start and the check that says it is ready.

    ``ready`` may raise (httpx errors, OSError, ValueError): ``processes.wait_until`` counts that
    as "not yet". ``ready_what`` names the check in errors; ``timeout`` and ``interval`` are seconds.
    """

    name: str
    argv: list[str]
    port: int
    ready_what: str
    ready: Callable[[], bool]
    timeout: float = COMPONENT_TIMEOUT
    interval: float = 0.2


def etcd(bin_dir: Path, data_dir: Path, port: int, peer_port: int) -> Component:
    """etcd on ``http://127.0.0.1:<port>``, one member, no fsync; ready when ``/health`` says true."""
    argv = [
        str(bin_dir / "etcd"),
        "--name=node0",
        f"--data-dir={data_dir}",
        f"--listen-client-urls=http://127.0.0.1:{port}",
        f"--advertise-client-urls=http://127.0.0.1:{port}",
        f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-cluster=node0=http://127.0.0.1:{peer_port}",
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
        "--log-level=warn",
    ]

    def healthy() -> bool:
        r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0)
        return r.status_code == 200 and r.json().get("health") == "true"

    return Component("etcd", argv, port, "/health", healthy, timeout=ETCD_TIMEOUT, interval=0.1)


def apiserver(
    bin_dir: Path, pki: Path, port: int, etcd_port: int, *, bench: bool = False, audit_log: Path | None = None
) -> Component:
    """kube-apiserver on ``https://127.0.0.1:<port>`` with the PKI in ``pki`` (see ``pki.write_pki``).

    Ready when ``/readyz`` answers ``ok`` to the admin user. ``bench`` removes the request limits
    and the admission plugins that need KCM (scheduler_perf's settings). ``audit_log``: write the
    audit events of :data:`AUDIT_POLICY_FILE` there (one JSON object per line, rotated into
    ``audit-<time>.log`` files next to it every 100 MB, none deleted).
    """
    argv = [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki / 'sa.key'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--allow-privileged=true",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--v=1",
    ]
    if audit_log is not None:
        argv += [f"--audit-policy-file={AUDIT_POLICY_FILE}", f"--audit-log-path={audit_log}", "--audit-log-maxsize=100"]
    if bench:
        # scheduler_perf's settings: no request limits, and nodes usable without KCM.
        argv += [
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--enable-priority-and-fairness=false",
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,Priority",
        ]

    def ready() -> bool:
        with httpx.Client(verify=admin_ssl_context(pki), timeout=5.0) as client:
            return client.get(f"https://127.0.0.1:{port}/readyz").text == "ok"

    return Component("kube-apiserver", argv, port, "/readyz = ok", ready, timeout=APISERVER_TIMEOUT, interval=0.25)


def _secure_flags(kubeconfig: Path, port: int) -> list[str]:
    """Client and serving flags KCM and kube-scheduler share: one kubeconfig for all, 127.0.0.1:<port>."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--authorization-always-allow-paths={ALWAYS_ALLOW_PATHS}",
    ]


def _secure_healthz(name: str, argv: list[str], port: int) -> Component:
    """A component serving HTTPS on ``port`` (self-signed): ready when ``/healthz`` says ok."""

    def ok() -> bool:
        return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2.0).text == "ok"

    return Component(name, argv, port, "/healthz = ok", ok)


def controller_manager(bin_dir: Path, kubeconfig: Path, pki: Path, port: int) -> Component:
    """kube-controller-manager with every controller, signing CSRs with the cluster CA in ``pki``."""
    argv = [
        str(bin_dir / "kube-controller-manager"),
        *_secure_flags(kubeconfig, port),
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--use-service-account-credentials=true",
        "--controllers=*",
        "--leader-elect=false",
        "--v=1",
    ]
    return _secure_healthz("kube-controller-manager", argv, port)


def scheduler(bin_dir: Path, kubeconfig: Path, port: int) -> Component:
    """The stock kube-scheduler: the cluster's ``default-scheduler``."""
    argv = [str(bin_dir / "kube-scheduler"), *_secure_flags(kubeconfig, port), "--leader-elect=false", "--v=1"]
    return _secure_healthz("kube-scheduler", argv, port)


def kwok(bin_dir: Path, kubeconfig: Path, port: int) -> Component:
    """kwok managing every node (fake kubelets) with the Stages in ``e2e/kwok-stages.yaml``.

    Ready when its ``/healthz`` on ``http://127.0.0.1:<port>`` answers 200.
    """
    argv = [
        str(bin_dir / "kwok"),
        f"--kubeconfig={kubeconfig}",
        f"--config={KWOK_STAGES_FILE}",
        "--manage-all-nodes=true",
        f"--server-address=127.0.0.1:{port}",
        "--node-ip=127.0.0.1",
        "--cidr=10.244.0.1/16",
        "--node-lease-duration-seconds=40",
    ]

    def ok() -> bool:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0).status_code == 200

    return Component("kwok", argv, port, "/healthz", ok)
