"""A real local Kubernetes 1.35 control plane for end-to-end tests and the demo.

The soak (``bench/soak.py``) and the benchmark (``bench/run.py``, in benchmark mode) run on it
too. It runs etcd, kube-apiserver, kube-controller-manager, the stock kube-scheduler (the cluster's
default scheduler) and kwok (fake kubelets) as local processes on 127.0.0.1, each in its own
process group (session), with one log file per component. Everything lives in a state directory
(``OME_CLUSTER_DIR``, default ``<repo>/.local-cluster``) whose ``cluster.json`` records the ports,
paths and PIDs, so ``down`` and ``status`` work from another process. Its command line,
``python -m e2e.harness up|down|stop|status|env``, is ``e2e/harness/__main__.py``.

Binaries come from ``OME_K8S_BIN_DIR``, otherwise from ``e2e/build-binaries.sh`` (which builds
them once and prints their directory on its last stdout line). The pieces live next door:
``pki.py`` (certificates, kubeconfigs), ``components.py`` (each component's flags and readiness
check) and ``processes.py`` (starting, waiting for and stopping processes).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import yaml

from e2e.harness import components, tokens
from e2e.harness.components import COMPONENT_TIMEOUT, COMPONENTS, REQUIRED_BINARIES, STOP_ORDER, Component
from e2e.harness.paths import CRD_FILE, DEFAULT_STATE_DIR, DEMO_NODES_FILE
from e2e.harness.pki import admin_ssl_context, write_client_kubeconfig, write_pki, write_token_kubeconfig
from e2e.harness.processes import (
    STOP_TIMEOUT,
    ClusterError,
    ComponentStartError,
    ProcRecord,
    alive_check,
    free_ports,
    resolve_bin_dir,
    signal_group,
    spawn,
    stop_all,
    stop_group,
    wait_until,
)

CRD_NAME: Final = "podgroups.scheduling.x-k8s.io"
K8S_VERSION: Final = "v1.35.4"
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"
NODES_TIMEOUT: Final = 60.0

#: The kubeconfig of each component -> the client identity (``pki.CLIENT_IDENTITIES``) it uses.
KUBECONFIG_IDENTITIES: Final = {
    "kube-controller-manager": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "kwok": "admin",
}

#: Ports ``up`` picks: one per component, plus etcd's peer port.
PORT_NAMES: Final = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def node_not_ready(node: Mapping[str, Any]) -> str | None:
    """Why a Node object cannot take pods yet ("not Ready", "Ready but still tainted not-ready") or None."""
    conditions = node.get("status", {}).get("conditions", [])
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return "not Ready"
    if any(t.get("key") == NOT_READY_TAINT for t in node.get("spec", {}).get("taints") or []):
        return "Ready but still tainted not-ready"
    return None


class ClusterNotRunning(ClusterError):
    """No running cluster was found in the state directory."""


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; ``str()`` includes the command and its stderr."""

    def __str__(self) -> str:
        cmd = shlex.join(str(a) for a in self.cmd) if isinstance(self.cmd, list) else str(self.cmd)
        return f"kubectl failed with exit code {self.returncode}: {cmd}\n{self.stderr or ''}".rstrip()


@dataclass
class ClusterState:
    """The content of ``cluster.json``."""

    state_dir: str
    bin_dir: str
    server: str
    ports: dict[str, int]
    status: str = "starting"
    started_at: str = ""
    components: dict[str, ProcRecord] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialise to JSON text."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        """Parse ``cluster.json`` text. Raises ValueError/KeyError/TypeError if malformed."""
        raw = json.loads(text)
        comps = {k: ProcRecord(**v) for k, v in raw.pop("components", {}).items()}
        return cls(components=comps, **raw)


class Cluster:
    """A local control plane rooted at a state directory.

    ``Cluster().up()`` starts one; ``Cluster.attach()`` returns a handle on a running one;
    ``down()`` stops it. Timeouts are in seconds.
    """

    def __init__(
        self, state_dir: Path | str | None = None, bin_dir: Path | str | None = None, *, bench: bool = False
    ) -> None:
        """Bind to ``state_dir`` (default ``OME_CLUSTER_DIR`` or ``<repo>/.local-cluster``).

        ``bin_dir`` overrides binary discovery (see ``resolve_bin_dir``); nothing starts here.
        """
        if state_dir is None:
            state_dir = os.environ.get("OME_CLUSTER_DIR") or DEFAULT_STATE_DIR
        self.state_dir = Path(state_dir).expanduser().resolve()
        self.bench = bench
        """Benchmark mode: no KCM, no stock scheduler, no kwok; API server limits off."""
        self._bin_dir = Path(bin_dir).resolve() if bin_dir is not None else None
        self._state: ClusterState | None = None
        self._popen: dict[str, subprocess.Popen[bytes]] = {}
        self.verbose = True
        self._t0 = time.monotonic()
        if self.state_file.exists():
            with contextlib.suppress(ValueError, KeyError, TypeError, OSError):
                self._state = ClusterState.from_json(self.state_file.read_text())
                if self._bin_dir is None:
                    self._bin_dir = Path(self._state.bin_dir)

    # -- paths ---------------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        """``<state_dir>/cluster.json``."""
        return self.state_dir / "cluster.json"

    @property
    def pki_dir(self) -> Path:
        """``<state_dir>/pki``: certificates and keys."""
        return self.state_dir / "pki"

    @property
    def log_dir(self) -> Path:
        """``<state_dir>/logs``: one ``<component>.log`` per component."""
        return self.state_dir / "logs"

    @property
    def audit_log(self) -> Path:
        """``<state_dir>/logs/audit.log``: kube-apiserver's audit events (not in benchmark mode;
        older ones rotated into ``logs/audit-<time>.log``)."""
        return self.log_dir / "audit.log"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user ``admin``, group ``system:masters``)."""
        return self.state_dir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The cluster CA certificate (PEM); it signed the apiserver's serving certificate."""
        return self.pki_dir / "ca.crt"

    def component_kubeconfig(self, name: str) -> Path:
        """The kubeconfig a component uses: ``<state_dir>/kubeconfigs/<name>.kubeconfig``."""
        return self.state_dir / "kubeconfigs" / f"{name}.kubeconfig"

    @property
    def bin_dir(self) -> Path:
        """The binary directory, resolved (and built if needed) on first use."""
        if self._bin_dir is None:
            self._bin_dir = resolve_bin_dir(REQUIRED_BINARIES)
        return self._bin_dir

    @property
    def server(self) -> str:
        """The apiserver URL, ``https://127.0.0.1:<port>``. Raises ClusterNotRunning before ``up``."""
        return self._require_state().server

    @property
    def timings(self) -> dict[str, float]:
        """Seconds from the start of ``up`` at which each phase finished."""
        return dict(self._state.timings) if self._state else {}

    @property
    def state(self) -> ClusterState | None:
        """What ``cluster.json`` records (ports, PIDs, status), or None when there is no cluster."""
        return self._state

    def _require_state(self) -> ClusterState:
        if self._state is None:
            raise ClusterNotRunning(f"no cluster state in {self.state_dir}")
        return self._state

    def _save_state(self) -> None:
        state = self._require_state()
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.state_file)

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"[cluster {time.monotonic() - self._t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    # -- attach / health -----------------------------------------------------------------------

    @classmethod
    def attach(cls, state_dir: Path | str | None = None, *, check: bool = True) -> Cluster:
        """Return a handle on the cluster recorded in ``state_dir``.

        With ``check`` (default) it must be healthy (all processes alive, apiserver ``/readyz``
        ok); otherwise raises ClusterNotRunning.
        """
        c = cls(state_dir)
        if c._state is None:
            raise ClusterNotRunning(f"no cluster state in {c.state_dir}")
        if check and not c.is_running():
            raise ClusterNotRunning(f"the cluster in {c.state_dir} is not running or not healthy")
        return c

    @classmethod
    def attach_if_running(cls, state_dir: Path | str | None = None) -> Cluster | None:
        """Like ``attach`` but returns None instead of raising."""
        try:
            return cls.attach(state_dir)
        except ClusterNotRunning:
            return None

    def is_running(self) -> bool:
        """True if every control-plane component is alive and the apiserver answers ``/readyz`` with ok.

        Extra processes (``start_process``: the demo's ome-scheduler) do not count: stopping one
        leaves the cluster running.
        """
        if self._state is None or self._state.status != "up":
            return False
        comps = self._state.components
        if any(name not in comps or not comps[name].alive() for name in COMPONENTS):
            return False
        try:
            return self._api_get("/readyz", timeout=5.0).text == "ok"
        except (httpx.HTTPError, OSError, ssl.SSLError):
            return False

    # -- HTTP to the apiserver -----------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        return admin_ssl_context(self.pki_dir)

    def _api_get(self, path: str, timeout: float = 10.0) -> httpx.Response:
        """GET ``path`` from the apiserver as admin. Raises httpx errors."""
        with httpx.Client(verify=self._ssl_context(), timeout=timeout) as client:
            return client.get(self.server + path)

    def api_json(self, path: str, timeout: float = 10.0) -> Any:
        """GET ``path`` as admin and return the decoded JSON. Raises httpx.HTTPStatusError on >= 400."""
        r = self._api_get(path, timeout)
        r.raise_for_status()
        return r.json()

    # -- up ------------------------------------------------------------------------------------

    def up(
        self, *, fresh: bool = False, nodes: Path | str | Sequence[Mapping[str, Any]] | None = DEMO_NODES_FILE
    ) -> bool:
        """Start the control plane, install the PodGroup CRD and create ``nodes`` (None: no nodes).

        Returns False if it was already running (and ``fresh`` is False), True if it started one.
        With ``fresh`` a running cluster is stopped and wiped first. A stale state directory (nothing
        running) is wiped. On failure the processes started so far are stopped, the state directory
        (logs included) is kept, and ComponentStartError/ClusterError is raised. A port clash at
        start-up is retried once with new ports.
        """
        self._t0 = time.monotonic()
        if self.is_running():
            if not fresh:
                self._log(f"already up: {self.server} (state {self.state_dir})")
                return False
            self._log("--fresh: stopping the running cluster")
            self.down()
        elif self._state is not None or self.state_dir.exists():
            self._log(f"removing stale state in {self.state_dir}")
            self._stop_processes()
            self._wipe()
        for attempt in (1, 2):
            try:
                self._start_all(nodes)
                return True
            except ComponentStartError as e:
                self._stop_processes()
                if attempt == 1 and "address already in use" in e.log_tail:
                    self._log(f"{e.component}: port clash, retrying once with new ports")
                    self._wipe()
                    continue
                raise
            except BaseException:
                self._stop_processes()
                raise
        raise AssertionError("unreachable")

    def _wipe(self) -> None:
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self._state = None

    def _start_all(self, nodes: Path | str | Sequence[Mapping[str, Any]] | None) -> None:
        bin_dir, pki, t0 = self.bin_dir, self.pki_dir, self._t0
        for d in (self.state_dir, self.log_dir, self.state_dir / "kubeconfigs"):
            d.mkdir(parents=True, exist_ok=True)
        ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
        self._state = ClusterState(
            state_dir=str(self.state_dir),
            bin_dir=str(bin_dir),
            server=f"https://127.0.0.1:{ports['kube-apiserver']}",
            ports=ports,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        timings = self._state.timings
        write_pki(pki)
        write_client_kubeconfig(self.kubeconfig, self.server, pki, "admin")
        for comp_name, ident in KUBECONFIG_IDENTITIES.items():
            write_client_kubeconfig(self.component_kubeconfig(comp_name), self.server, pki, ident)
        self._save_state()
        timings["pki"] = time.monotonic() - t0
        self._log(f"PKI and kubeconfigs written to {self.state_dir}")

        self._start(components.etcd(bin_dir, self.state_dir / "etcd", ports["etcd"], ports["etcd-peer"]))
        self._log("etcd healthy")
        timings["etcd"] = time.monotonic() - t0
        # The benchmark's request rates would make auditing the bottleneck; everything else is audited.
        audit_log = None if self.bench else self.audit_log
        self._start(
            components.apiserver(
                bin_dir, pki, ports["kube-apiserver"], ports["etcd"], bench=self.bench, audit_log=audit_log
            )
        )
        version = self.api_json("/version").get("gitVersion")
        if version != K8S_VERSION:
            log_file = self.log_dir / "kube-apiserver.log"
            raise ComponentStartError("kube-apiserver", f"/version says {version!r}, expected {K8S_VERSION}", log_file)
        self._log(f"kube-apiserver ready ({version})")
        timings["kube-apiserver"] = time.monotonic() - t0

        if self.bench:
            self.install_crd()
            timings["crd"] = time.monotonic() - t0
            self._mark_up()
            self._log(f"up (benchmark mode) in {timings['total']:.1f} s: {self.server}")
            return
        kc = self.component_kubeconfig
        rest = (
            components.controller_manager(
                bin_dir, kc("kube-controller-manager"), pki, ports["kube-controller-manager"]
            ),
            components.scheduler(bin_dir, kc("kube-scheduler"), ports["kube-scheduler"]),
            components.kwok(bin_dir, kc("kwok"), ports["kwok"]),
        )
        for comp in rest:
            self._start(comp, wait=False)
        self.install_crd()
        timings["crd"] = time.monotonic() - t0
        for comp in rest:
            self._wait(comp.name, comp.ready_what, comp.ready, comp.timeout, comp.interval)
            self._log(f"{comp.name} healthy")
        timings["components"] = time.monotonic() - t0

        if nodes is not None:
            names_created = self.create_nodes(nodes)
            self.wait_nodes_ready(names_created)
            timings["nodes"] = time.monotonic() - t0
        # Pods are admitted only once KCM has created ServiceAccount default/default.
        sa = "/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(
            "kube-controller-manager", "ServiceAccount default/default", lambda: self._api_get(sa).status_code == 200
        )
        self._mark_up()
        self._log(f"up in {timings['total']:.1f} s: {self.server}; export KUBECONFIG={self.kubeconfig}")

    def _mark_up(self) -> None:
        """Record status "up" and the seconds ``up`` took (``timings["total"]``)."""
        state = self._require_state()
        state.status = "up"
        state.timings["total"] = time.monotonic() - self._t0
        self._save_state()

    def _spawn(self, name: str, argv: list[str], port: int | None) -> ProcRecord:
        """Start ``argv`` in a new session (own process group), output to ``logs/<name>.log``."""
        proc, rec = spawn(name, argv, log_file=self.log_dir / f"{name}.log", cwd=self.state_dir, port=port)
        self._popen[name] = proc
        self._require_state().components[name] = rec
        self._save_state()
        self._log(f"started {name} (pid {proc.pid}{f', port {port}' if port else ''})")
        return rec

    def _start(self, comp: Component, *, wait: bool = True) -> None:
        """Start ``comp`` and (with ``wait``) wait until it is ready."""
        self._spawn(comp.name, comp.argv, comp.port)
        if wait:
            self._wait(comp.name, comp.ready_what, comp.ready, comp.timeout, comp.interval)

    def _wait(
        self, name: str, what: str, check: Callable[[], bool], timeout: float = COMPONENT_TIMEOUT, interval: float = 0.2
    ) -> None:
        """Poll ``check`` until it passes; ComponentStartError with ``name``'s log tail if it exits or times out."""
        rec = self._require_state().components[name]
        alive = alive_check(rec, self._popen.get(name))
        wait_until(what, check, timeout, component=name, log_file=Path(rec.log), alive=alive, interval=interval)

    def start_process(self, name: str, argv: list[str]) -> ProcRecord:
        """Start an extra process (e.g. ome-scheduler) that ``down`` stops before the control plane.

        Its output goes to ``logs/<name>.log``. Raises ClusterNotRunning when the cluster is not up.
        """
        if not self.is_running():
            raise ClusterNotRunning(f"no running cluster in {self.state_dir}")
        old = self._require_state().components.get(name)
        if old is not None and old.alive():
            stop_group([old], self._popen, self._log)
        return self._spawn(name, argv, None)

    def stop_process(self, name: str) -> bool:
        """Stop an extra process started with ``start_process`` (SIGTERM, then SIGKILL).

        Returns False when no such process runs. Control-plane components cannot be stopped
        this way (ValueError): use ``down``.
        """
        if name in COMPONENTS:
            raise ValueError(f"{name} is part of the control plane; stop the whole cluster with down")
        st = self._require_state()
        rec = st.components.get(name)
        if rec is None or not rec.alive():
            return False
        stop_group([rec], self._popen, self._log)
        return True

    # -- faults --------------------------------------------------------------------------------

    def _component(self, name: str) -> Component:
        """The component ``name`` as ``up`` started it (same ports, paths and flags)."""
        st = self._require_state()
        ports, bin_dir, pki, kc = st.ports, self.bin_dir, self.pki_dir, self.component_kubeconfig
        builders: dict[str, Callable[[], Component]] = {
            "etcd": lambda: components.etcd(bin_dir, self.state_dir / "etcd", ports["etcd"], ports["etcd-peer"]),
            "kube-apiserver": lambda: components.apiserver(
                bin_dir,
                pki,
                ports["kube-apiserver"],
                ports["etcd"],
                bench=self.bench,
                audit_log=None if self.bench else self.audit_log,
            ),
            "kube-controller-manager": lambda: components.controller_manager(
                bin_dir, kc("kube-controller-manager"), pki, ports["kube-controller-manager"]
            ),
            "kube-scheduler": lambda: components.scheduler(bin_dir, kc("kube-scheduler"), ports["kube-scheduler"]),
            "kwok": lambda: components.kwok(bin_dir, kc("kwok"), ports["kwok"]),
        }
        if name not in builders:
            raise ValueError(f"{name} is not a control-plane component ({', '.join(builders)})")
        return builders[name]()

    def restart_component(self, name: str, stop_timeout: float = STOP_TIMEOUT) -> float:
        """Stop control-plane component ``name`` (SIGTERM, then SIGKILL after ``stop_timeout``
        seconds) and start it again with the same command line; return once it is ready, with
        the seconds it was away.

        Raises ValueError for an unknown name and ComponentStartError if it does not come back.
        """
        st = self._require_state()
        t0 = time.monotonic()
        rec = st.components.get(name)
        if rec is not None:
            stop_group([rec], self._popen, self._log, timeout=stop_timeout)
        self._start(self._component(name))
        self._log(f"{name} restarted")
        if name == "etcd":
            self.ensure_apiserver_serves(stop_timeout=stop_timeout)
        return time.monotonic() - t0

    #: Reads that reach etcd through the per-resource etcd clients the tests lean on (a GET
    #: without resourceVersion, or a consistent list, asks that resource's client for etcd's
    #: current revision).
    PROBE_PATHS: Final = (
        "/api/v1/namespaces/default",
        "/api/v1/nodes?limit=1",
        "/api/v1/pods?limit=1",
        "/api/v1/events?limit=1",
        "/apis/coordination.k8s.io/v1/leases?limit=1",
        "/apis/scheduling.x-k8s.io/v1alpha1/podgroups?limit=1",
    )

    def _apiserver_serves(self, timeout: float = 5.0) -> bool:
        """True if kube-apiserver answers every :data:`PROBE_PATHS` read (any status below 500)
        and a ConfigMap create and delete in ``default``, each within ``timeout`` seconds."""
        probe = f"harness-etcd-probe-{os.getpid()}-{time.monotonic_ns()}"
        cms = f"{self.server}/api/v1/namespaces/default/configmaps"
        try:
            with httpx.Client(verify=self._ssl_context(), timeout=timeout) as c:
                if any(c.get(self.server + path).status_code >= 500 for path in self.PROBE_PATHS):
                    return False
                body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": probe}}
                if c.post(cms, json=body).status_code != 201:
                    return False
                return c.delete(f"{cms}/{probe}").status_code == 200
        except (httpx.HTTPError, OSError, ssl.SSLError):
            return False

    def ensure_apiserver_serves(self, *, within: float = 30.0, stop_timeout: float = 5.0) -> None:
        """Play the kubelet's liveness probe of a static-pod kube-apiserver (after an etcd
        restart, and before each e2e module).

        kube-apiserver's etcd clients (one per resource) usually reconnect within seconds of an
        etcd restart, but one can stay stuck, so that every request on its resource times out
        until the apiserver restarts
        (kubernetes/kubernetes#66312); on a real control plane the kubelet restarts it. If the
        apiserver does not serve :meth:`_apiserver_serves` within ``within`` seconds, restart it
        once (logged); ComponentStartError if it still does not serve after another 60 s.
        """
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self._apiserver_serves():
                return
            time.sleep(0.5)
        self._log(f"kube-apiserver served no requests for {within:g} s; restarting it")
        self.restart_component("kube-apiserver", stop_timeout=stop_timeout)
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            if self._apiserver_serves():
                return
            time.sleep(0.5)
        log_file = self.log_dir / "kube-apiserver.log"
        raise ComponentStartError("kube-apiserver", "serves no requests, even after its restart", log_file)

    def pause_component(self, name: str) -> None:
        """SIGSTOP control-plane component ``name`` (its process group): it keeps its sockets and
        answers nothing until :meth:`resume_component`."""
        self._signal_component(name, signal.SIGSTOP)

    def resume_component(self, name: str) -> None:
        """SIGCONT a component paused by :meth:`pause_component`."""
        self._signal_component(name, signal.SIGCONT)

    def _signal_component(self, name: str, sig: signal.Signals) -> None:
        rec = self._require_state().components.get(name)
        if name not in COMPONENTS or rec is None:
            raise ValueError(f"{name} is not a running control-plane component")
        signal_group(rec, sig)
        self._log(f"{sig.name} {name} (pid {rec.pid})")

    # -- down ----------------------------------------------------------------------------------

    def down(self, *, keep: bool = False, keep_logs: bool = False) -> None:
        """Stop every process we started and remove the state directory.

        Each process group gets SIGTERM, then SIGKILL after ``STOP_TIMEOUT`` (20 s). Order: kwok,
        kube-scheduler and kube-controller-manager together, then kube-apiserver, then etcd.
        ``keep`` keeps the whole directory; ``keep_logs`` removes all but ``logs/``.
        """
        self._stop_processes()
        if keep:
            if self._state is not None and self.state_dir.exists():
                self._state.status = "stopped"
                self._save_state()
            return
        if keep_logs and self.log_dir.exists():
            for child in self.state_dir.iterdir():
                if child != self.log_dir:
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
            self._state = None
            return
        self._wipe()

    def _stop_processes(self) -> None:
        if self._state is not None:
            stop_all(self._state.components, STOP_ORDER, self._popen, self._log)

    # -- kubectl and API helpers ----------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig=<admin> *args`` and return the completed process (text).

        Raises KubectlError (with stderr) on a non-zero exit when ``check``, and
        subprocess.TimeoutExpired after ``timeout`` seconds.
        """
        cmd = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def kubectl_json(self, *args: str, timeout: float = 60.0) -> Any:
        """Run ``kubectl <args> -o json`` and return the decoded JSON. Raises KubectlError."""
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def apply(self, yaml_text: str, *, server_side: bool = False) -> str:
        """``kubectl apply -f -`` the given YAML (client-side by default); return kubectl's stdout."""
        args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
        return self.kubectl(*args, input=yaml_text).stdout

    def install_crd(self, path: Path = CRD_FILE, name: str = CRD_NAME, timeout: float = 30.0) -> None:
        """Apply a CRD file (server-side) and wait ≤ ``timeout`` seconds for it to be Established.

        Polls the CRD's conditions itself: ``kubectl wait`` fails at once ("status.conditions
        accessor error") when it reads the CRD before the API server has written any condition.
        Raises ComponentStartError (naming kube-apiserver) on timeout.
        """
        self.apply(path.read_text(), server_side=True)

        def established() -> bool:
            crd = self.api_json(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = crd.get("status", {}).get("conditions") or []
            return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)

        wait_until(
            f"CRD {name} Established",
            established,
            timeout,
            component="kube-apiserver",
            log_file=self.log_dir / "kube-apiserver.log",
            interval=0.2,
        )
        self._log(f"CRD {name} Established")

    def create_nodes(self, path_or_docs: Path | str | Sequence[Mapping[str, Any]]) -> list[str]:
        """Create the Nodes in a YAML file (path) or a list of Node dicts; return their names.

        Status (capacity, allocatable) given in the documents is kept: the apiserver accepts node
        status on create, and the status subresource is patched too for nodes that already existed.
        Raises ValueError for non-Node documents and KubectlError if kubectl fails.
        """
        if isinstance(path_or_docs, (str, Path)):
            docs = [d for d in yaml.safe_load_all(Path(path_or_docs).read_text()) if d]
        else:
            docs = [dict(d) for d in path_or_docs]
        for d in docs:
            if d.get("kind") != "Node":
                raise ValueError(f"not a Node document: {d.get('kind')!r}")
        self.apply(yaml.safe_dump_all(docs, sort_keys=False))
        names = [str(d["metadata"]["name"]) for d in docs]
        for d in docs:
            status = d.get("status")
            if status:
                name = str(d["metadata"]["name"])
                self.kubectl(
                    "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})
                )
        self._log(f"created nodes {', '.join(names)}")
        return names

    def wait_nodes_ready(self, names: Sequence[str], timeout: float = NODES_TIMEOUT) -> None:
        """Wait ≤ ``timeout`` seconds until the named nodes are Ready with no not-ready taint.

        Raises ComponentStartError naming kwok (or kube-controller-manager if only the taint stays).
        """
        last: dict[str, str] = {}

        def done() -> bool:
            items = {n["metadata"]["name"]: n for n in self.api_json("/api/v1/nodes")["items"]}
            last.clear()
            for name in names:
                reason = node_not_ready(items[name]) if name in items else "missing"
                if reason is not None:
                    last[name] = reason
            return not last

        try:
            wait_until(
                "nodes Ready", done, timeout, component="kwok", log_file=self.log_dir / "kwok.log", interval=0.25
            )
        except ComponentStartError:
            only_taint = last and all(v.startswith("Ready but") for v in last.values())
            comp = "kube-controller-manager" if only_taint else "kwok"
            raise ComponentStartError(
                comp, f"nodes not ready within {timeout:.0f} s: {last}", self.log_dir / f"{comp}.log"
            ) from None
        self._log(f"nodes Ready and untainted: {', '.join(names)}")

    def create_token(self, service_account: str, namespace: str = "default", duration: str = "1h") -> str:
        """Return a bound token for ``namespace/service_account`` via TokenRequest (kubectl create token).

        The token is recorded in ``e2e.harness.tokens`` (no log may hold it)."""
        out = self.kubectl("create", "token", service_account, "-n", namespace, f"--duration={duration}")
        return tokens.remember(out.stdout.strip())

    def token_kubeconfig(self, path: Path, token: str) -> Path:
        """Write a kubeconfig at ``path`` that authenticates with a bearer ``token``; return ``path``."""
        return write_token_kubeconfig(path, self.server, self.ca_file, token)
