"""A real local Kubernetes 1.35 control plane for end-to-end tests and the demo.

It runs etcd, kube-apiserver, kube-controller-manager, the stock kube-scheduler (the cluster's
default scheduler) and kwok (fake kubelets) as local processes on 127.0.0.1, each in its own
process group (session), with one log file per component. Everything lives in a state directory
(``OME_CLUSTER_DIR``, default ``<repo>/.local-cluster``) whose ``cluster.json`` records the ports,
paths and PIDs, so ``down`` and ``status`` work from another process.

Command line (from the repository root)::

    python -m e2e.cluster up [--fresh] [--nodes FILE | --no-nodes]
    python -m e2e.cluster status
    eval "$(python -m e2e.cluster env)"
    python -m e2e.cluster stop [ome-scheduler]   # stop the demo's scheduler, keep the cluster
    python -m e2e.cluster down [--keep]

Binaries come from ``OME_K8S_BIN_DIR``, otherwise from ``e2e/build-binaries.sh`` (which builds
them once and prints their directory on its last stdout line).

Admission: the apiserver keeps its default admission plugins. ``ServiceAccount`` stays on because
kube-controller-manager creates the default ServiceAccounts; ``TaintNodesByCondition`` stays on
because kwok reports nodes Ready and kube-controller-manager's node-lifecycle controller then
removes the ``node.kubernetes.io/not-ready`` taint, as on a real cluster.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
E2E_DIR: Final = REPO_ROOT / "e2e"
DEFAULT_STATE_DIR: Final = REPO_ROOT / ".local-cluster"
BUILD_SCRIPT: Final = E2E_DIR / "build-binaries.sh"
CRD_FILE: Final = E2E_DIR / "crds" / "scheduling.x-k8s.io_podgroups.yaml"
CRD_NAME: Final = "podgroups.scheduling.x-k8s.io"
KWOK_STAGES_FILE: Final = E2E_DIR / "kwok-stages.yaml"
DEMO_NODES_FILE: Final = E2E_DIR / "nodes" / "demo.yaml"
K8S_VERSION: Final = "v1.35.4"
SERVICE_CIDR: Final = "10.0.0.0/24"
SA_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"
ALWAYS_ALLOW_PATHS: Final = "/healthz,/readyz,/livez,/metrics"

#: Components in start order; ``down`` stops them in reverse, the last two one at a time.
COMPONENTS: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
REQUIRED_BINARIES: Final = (*COMPONENTS, "kubectl")

ETCD_TIMEOUT: Final = 15.0
APISERVER_TIMEOUT: Final = 90.0
COMPONENT_TIMEOUT: Final = 60.0
NODES_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 20.0
LOG_TAIL_LINES: Final = 50


# ----------------------------------------------------------------------------------------------
# Errors


class ClusterError(RuntimeError):
    """Any failure of the local control plane harness."""


class ComponentStartError(ClusterError):
    """A component exited or did not become healthy in time; the message ends with its log tail."""

    def __init__(self, component: str, reason: str, log_file: Path | None) -> None:
        self.component = component
        self.reason = reason
        self.log_file = log_file
        self.log_tail = tail_lines(log_file, LOG_TAIL_LINES) if log_file is not None else ""
        where = f" (log: {log_file})" if log_file is not None else ""
        super().__init__(
            f"{component} failed to start: {reason}{where}\n"
            f"--- last {LOG_TAIL_LINES} lines of the {component} log ---\n{self.log_tail}"
        )


class ClusterNotRunning(ClusterError):
    """No running cluster was found in the state directory."""


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; ``str()`` includes the command and its stderr."""

    def __str__(self) -> str:
        cmd = shlex.join(str(a) for a in self.cmd) if isinstance(self.cmd, list) else str(self.cmd)
        return f"kubectl failed with exit code {self.returncode}: {cmd}\n{self.stderr or ''}".rstrip()


# ----------------------------------------------------------------------------------------------
# Small helpers


def tail_lines(path: Path, n: int = LOG_TAIL_LINES) -> str:
    """Return the last ``n`` lines of a text file ('' if it is missing), reading at most 256 KiB."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-n:])


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def proc_start_ticks(pid: int) -> int | None:
    """Return the start time of ``pid`` in clock ticks since boot (/proc/<pid>/stat field 22).

    Returns None if the process does not exist. Used with the PID to recognise our own processes
    and never signal a recycled PID.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def proc_state(pid: int) -> str | None:
    """Return the one-letter state of ``pid`` (R, S, Z, ...) or None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def proc_rss_bytes(pid: int) -> int | None:
    """Return the resident set size of ``pid`` in bytes (VmRSS), or None if unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    *,
    component: str,
    log_file: Path | None,
    alive: Callable[[], bool] | None = None,
    interval: float = 0.1,
) -> None:
    """Call ``check`` every ``interval`` seconds until it returns True.

    Raises ComponentStartError (with the component's log tail) if ``alive`` reports the process
    gone, or after ``timeout`` seconds. Exceptions from ``check`` count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError, ValueError, subprocess.SubprocessError) as e:
            last_error = f" (last error: {e})"
        if alive is not None and not alive():
            raise ComponentStartError(component, f"process exited while waiting for {what}", log_file)
        if time.monotonic() > deadline:
            raise ComponentStartError(component, f"{what} not reached within {timeout:.0f} s{last_error}", log_file)
        time.sleep(interval)


# ----------------------------------------------------------------------------------------------
# Binaries


def resolve_bin_dir() -> Path:
    """Return the directory holding etcd, kube-apiserver, ..., kwok and kubectl.

    Uses ``OME_K8S_BIN_DIR`` if set; otherwise runs ``e2e/build-binaries.sh`` (its progress on
    stderr goes to the terminal; it can take 30+ minutes when cold) and takes the last line it
    prints. Raises ClusterError if the build fails or a binary is missing.
    """
    env_dir = os.environ.get("OME_K8S_BIN_DIR")
    if env_dir:
        bin_dir = Path(env_dir).expanduser().resolve()
    else:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        if proc.returncode != 0 or not lines:
            raise ClusterError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}); see its output above")
        bin_dir = Path(lines[-1].strip())
    missing = [b for b in REQUIRED_BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise ClusterError(f"missing binaries in {bin_dir}: {', '.join(missing)}")
    return bin_dir


# ----------------------------------------------------------------------------------------------
# PKI


_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class _KeyPair:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(cn: str, orgs: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _make_ca(cn: str) -> _KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _KeyPair(cert, key)


def _make_leaf(
    ca: _KeyPair,
    cn: str,
    *,
    orgs: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
) -> _KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if dns or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return _KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def _write_pair(pki: Path, name: str, pair: _KeyPair) -> None:
    (pki / f"{name}.crt").write_bytes(pair.cert.public_bytes(serialization.Encoding.PEM))
    key_path = pki / f"{name}.key"
    key_path.write_bytes(
        pair.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)


#: Client identities: file name -> (CN, O). kwok uses the admin identity.
CLIENT_IDENTITIES: Final[Mapping[str, tuple[str, tuple[str, ...]]]] = {
    "admin": ("admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
}


def write_pki(pki: Path) -> None:
    """Write a fresh PKI into ``pki``.

    Files: ``ca.{crt,key}`` (cluster CA, also KCM's CSR signer); ``apiserver.{crt,key}`` (serving,
    SANs 127.0.0.1, localhost, kubernetes[.default[.svc[.cluster.local]]], 10.0.0.1);
    ``<client>.{crt,key}`` for admin (O=system:masters), kube-controller-manager and kube-scheduler;
    ``front-proxy-ca.crt`` and ``front-proxy-client.{crt,key}`` (request-header auth);
    ``sa.key`` (RSA 2048, TraditionalOpenSSL PEM) and ``sa.pub``. Keys are EC P-256 except sa.key.
    Certificates are valid for 365 days.
    """
    pki.mkdir(parents=True, exist_ok=True)
    ca = _make_ca("ome-local-ca")
    _write_pair(pki, "ca", ca)
    _write_pair(
        pki,
        "apiserver",
        _make_leaf(
            ca,
            "kube-apiserver",
            server=True,
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ips=("127.0.0.1", "10.0.0.1"),
        ),
    )
    for fname, (cn, orgs) in CLIENT_IDENTITIES.items():
        _write_pair(pki, fname, _make_leaf(ca, cn, orgs=orgs, client=True))
    front_ca = _make_ca("ome-local-front-proxy-ca")
    _write_pair(pki, "front-proxy-ca", front_ca)
    _write_pair(pki, "front-proxy-client", _make_leaf(front_ca, "front-proxy-client", client=True))
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "sa.key").write_bytes(
        sa.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    (pki / "sa.key").chmod(0o600)
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def kubeconfig_dict(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict[str, Any]:
    """Return a one-context kubeconfig (named ``ome-local``) with base64-embedded credentials."""

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "ome-local", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": "ome-local", "context": {"cluster": "ome-local", "user": user}}],
        "current-context": "ome-local",
        "preferences": {},
    }


# ----------------------------------------------------------------------------------------------
# State


@dataclass
class ProcRecord:
    """A process we started: its PID, its start time (clock ticks since boot) and its log."""

    name: str
    pid: int
    start_ticks: int
    log: str
    argv: list[str]
    port: int | None = None

    def alive(self) -> bool:
        """True if this exact process (same PID and start time) exists and is not a zombie."""
        return proc_start_ticks(self.pid) == self.start_ticks and proc_state(self.pid) not in (None, "Z")


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


# ----------------------------------------------------------------------------------------------
# The cluster


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
            self._bin_dir = resolve_bin_dir()
        return self._bin_dir

    @property
    def server(self) -> str:
        """The apiserver URL, ``https://127.0.0.1:<port>``. Raises ClusterNotRunning before ``up``."""
        return self._require_state().server

    @property
    def timings(self) -> dict[str, float]:
        """Seconds from the start of ``up`` at which each phase finished."""
        return dict(self._state.timings) if self._state else {}

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
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return ctx

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
        self,
        *,
        fresh: bool = False,
        nodes: Path | str | Sequence[Mapping[str, Any]] | None = DEMO_NODES_FILE,
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
        bin_dir = self.bin_dir
        t0 = self._t0
        for d in (self.state_dir, self.log_dir, self.state_dir / "kubeconfigs"):
            d.mkdir(parents=True, exist_ok=True)
        names = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        self._state = ClusterState(
            state_dir=str(self.state_dir),
            bin_dir=str(bin_dir),
            server=f"https://127.0.0.1:{ports['kube-apiserver']}",
            ports=ports,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        timings = self._state.timings
        write_pki(self.pki_dir)
        self._write_kubeconfigs()
        self._save_state()
        timings["pki"] = time.monotonic() - t0
        self._log(f"PKI and kubeconfigs written to {self.state_dir}")

        self._start_etcd()
        timings["etcd"] = time.monotonic() - t0
        self._start_apiserver()
        timings["kube-apiserver"] = time.monotonic() - t0

        if self.bench:
            self.install_crd()
            timings["crd"] = time.monotonic() - t0
            self._state.status = "up"
            timings["total"] = time.monotonic() - t0
            self._save_state()
            self._log(f"up (benchmark mode) in {timings['total']:.1f} s: {self.server}")
            return
        self._start_kcm()
        self._start_scheduler()
        self._start_kwok()
        self.install_crd()
        timings["crd"] = time.monotonic() - t0
        self._wait_secure_healthz("kube-controller-manager")
        self._wait_secure_healthz("kube-scheduler")
        self._wait_kwok()
        timings["components"] = time.monotonic() - t0

        if nodes is not None:
            names_created = self.create_nodes(nodes)
            self.wait_nodes_ready(names_created)
            timings["nodes"] = time.monotonic() - t0
        self._wait_default_service_account()
        self._state.status = "up"
        timings["total"] = time.monotonic() - t0
        self._save_state()
        self._log(f"up in {timings['total']:.1f} s: {self.server}; export KUBECONFIG={self.kubeconfig}")

    def _write_kubeconfigs(self) -> None:
        ca_pem = self.ca_file.read_bytes()
        server = self.server

        def write(path: Path, ident: str, user: str) -> None:
            cfg = kubeconfig_dict(
                server,
                ca_pem,
                (self.pki_dir / f"{ident}.crt").read_bytes(),
                (self.pki_dir / f"{ident}.key").read_bytes(),
                user,
            )
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            path.chmod(0o600)

        write(self.kubeconfig, "admin", "admin")
        for comp, ident in (
            ("kube-controller-manager", "kube-controller-manager"),
            ("kube-scheduler", "kube-scheduler"),
            ("kwok", "admin"),
        ):
            write(self.component_kubeconfig(comp), ident, CLIENT_IDENTITIES[ident][0])

    def _spawn(self, name: str, argv: list[str], port: int | None) -> ProcRecord:
        """Start ``argv`` in a new session (own process group), output to ``logs/<name>.log``."""
        log_file = self.log_dir / f"{name}.log"
        with log_file.open("ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,
            )
        ticks = proc_start_ticks(proc.pid) or 0
        rec = ProcRecord(name=name, pid=proc.pid, start_ticks=ticks, log=str(log_file), argv=argv, port=port)
        self._popen[name] = proc
        self._require_state().components[name] = rec
        self._save_state()
        self._log(f"started {name} (pid {proc.pid}{f', port {port}' if port else ''})")
        return rec

    def start_process(self, name: str, argv: list[str]) -> ProcRecord:
        """Start an extra process (e.g. ome-scheduler) that ``down`` stops before the control plane.

        Its output goes to ``logs/<name>.log``. Raises ClusterNotRunning when the cluster is not up.
        """
        if not self.is_running():
            raise ClusterNotRunning(f"no running cluster in {self.state_dir}")
        old = self._require_state().components.get(name)
        if old is not None and old.alive():
            self._stop_group([old])
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
        self._stop_group([rec])
        return True

    def _alive_fn(self, name: str) -> Callable[[], bool]:
        proc = self._popen.get(name)
        rec = self._require_state().components[name]
        if proc is not None:
            return lambda: proc.poll() is None
        return rec.alive

    def _start_etcd(self) -> None:
        st = self._require_state()
        ep, pp = st.ports["etcd"], st.ports["etcd-peer"]
        argv = [
            str(self.bin_dir / "etcd"),
            "--name=node0",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{ep}",
            f"--advertise-client-urls=http://127.0.0.1:{ep}",
            f"--listen-peer-urls=http://127.0.0.1:{pp}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{pp}",
            f"--initial-cluster=node0=http://127.0.0.1:{pp}",
            "--unsafe-no-fsync=true",
            "--auto-compaction-retention=1",
            "--log-level=warn",
        ]
        rec = self._spawn("etcd", argv, ep)

        def healthy() -> bool:
            r = httpx.get(f"http://127.0.0.1:{ep}/health", timeout=2.0)
            return r.status_code == 200 and r.json().get("health") == "true"

        _wait_until(
            "/health", healthy, ETCD_TIMEOUT, component="etcd", log_file=Path(rec.log), alive=self._alive_fn("etcd")
        )
        self._log("etcd healthy")

    def _start_apiserver(self) -> None:
        st = self._require_state()
        pki = self.pki_dir
        port = st.ports["kube-apiserver"]
        argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{st.ports['etcd']}",
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
        if self.bench:
            # scheduler_perf's settings: no request limits, and nodes usable without KCM.
            argv += [
                "--max-requests-inflight=0",
                "--max-mutating-requests-inflight=0",
                "--enable-priority-and-fairness=false",
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,Priority",
            ]
        rec = self._spawn("kube-apiserver", argv, port)
        log_file = Path(rec.log)

        def ready() -> bool:
            return self._api_get("/readyz", timeout=5.0).text == "ok"

        _wait_until(
            "/readyz = ok",
            ready,
            APISERVER_TIMEOUT,
            component="kube-apiserver",
            log_file=log_file,
            alive=self._alive_fn("kube-apiserver"),
            interval=0.25,
        )
        version = self.api_json("/version").get("gitVersion")
        if version != K8S_VERSION:
            raise ComponentStartError("kube-apiserver", f"/version says {version!r}, expected {K8S_VERSION}", log_file)
        self._log(f"kube-apiserver ready ({version})")

    def _start_kcm(self) -> None:
        st = self._require_state()
        pki = self.pki_dir
        kc = self.component_kubeconfig("kube-controller-manager")
        port = st.ports["kube-controller-manager"]
        argv = [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authorization-always-allow-paths={ALWAYS_ALLOW_PATHS}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--use-service-account-credentials=true",
            "--controllers=*",
            "--leader-elect=false",
            "--v=1",
        ]
        self._spawn("kube-controller-manager", argv, port)

    def _start_scheduler(self) -> None:
        port = self._require_state().ports["kube-scheduler"]
        kc = self.component_kubeconfig("kube-scheduler")
        argv = [
            str(self.bin_dir / "kube-scheduler"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authorization-always-allow-paths={ALWAYS_ALLOW_PATHS}",
            "--leader-elect=false",
            "--v=1",
        ]
        self._spawn("kube-scheduler", argv, port)

    def _start_kwok(self) -> None:
        port = self._require_state().ports["kwok"]
        argv = [
            str(self.bin_dir / "kwok"),
            f"--kubeconfig={self.component_kubeconfig('kwok')}",
            f"--config={KWOK_STAGES_FILE}",
            "--manage-all-nodes=true",
            f"--server-address=127.0.0.1:{port}",
            "--node-ip=127.0.0.1",
            "--cidr=10.244.0.1/16",
            "--node-lease-duration-seconds=40",
        ]
        self._spawn("kwok", argv, port)

    def _wait_default_service_account(self, timeout: float = COMPONENT_TIMEOUT) -> None:
        """Wait until KCM has created ServiceAccount default/default (pods need it to be admitted)."""

        def exists() -> bool:
            return self._api_get("/api/v1/namespaces/default/serviceaccounts/default").status_code == 200

        _wait_until(
            "ServiceAccount default/default",
            exists,
            timeout,
            component="kube-controller-manager",
            log_file=self.log_dir / "kube-controller-manager.log",
            alive=self._alive_fn("kube-controller-manager"),
            interval=0.2,
        )

    def _wait_secure_healthz(self, name: str, timeout: float = COMPONENT_TIMEOUT) -> None:
        """Wait until ``https://127.0.0.1:<port>/healthz`` of KCM or the scheduler says ok."""
        rec = self._require_state().components[name]

        def ok() -> bool:
            return httpx.get(f"https://127.0.0.1:{rec.port}/healthz", verify=False, timeout=2.0).text == "ok"

        _wait_until(
            "/healthz = ok",
            ok,
            timeout,
            component=name,
            log_file=Path(rec.log),
            alive=self._alive_fn(name),
            interval=0.2,
        )
        self._log(f"{name} healthy")

    def _wait_kwok(self, timeout: float = COMPONENT_TIMEOUT) -> None:
        rec = self._require_state().components["kwok"]

        def ok() -> bool:
            return httpx.get(f"http://127.0.0.1:{rec.port}/healthz", timeout=2.0).status_code == 200

        _wait_until(
            "/healthz",
            ok,
            timeout,
            component="kwok",
            log_file=Path(rec.log),
            alive=self._alive_fn("kwok"),
            interval=0.2,
        )
        self._log("kwok healthy")

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
        if self._state is None:
            return
        comps = self._state.components
        groups = [["kwok", "kube-scheduler", "kube-controller-manager"], ["kube-apiserver"], ["etcd"]]
        extra = [n for n in comps if not any(n in g for g in groups)]
        groups.insert(0, extra)  # processes added with start_process (ome-scheduler) stop first
        for group in groups:
            recs = [comps[n] for n in group if n in comps]
            self._stop_group(recs)
        for n in list(comps):
            self._popen.pop(n, None)

    def _stop_group(self, recs: Iterable[ProcRecord]) -> None:
        """SIGTERM each record's process group, wait ≤ STOP_TIMEOUT seconds, then SIGKILL."""
        live = [r for r in recs if r.alive()]
        for r in live:
            self._signal(r, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        pending = list(live)
        while pending and time.monotonic() < deadline:
            self._reap()
            pending = [r for r in pending if r.alive()]
            if pending:
                time.sleep(0.05)
        for r in pending:
            self._log(f"{r.name} (pid {r.pid}) ignored SIGTERM for {STOP_TIMEOUT:.0f} s; SIGKILL")
            self._signal(r, signal.SIGKILL)
        end = time.monotonic() + 5.0
        while any(r.alive() for r in pending) and time.monotonic() < end:
            self._reap()
            time.sleep(0.05)
        self._reap()

    def _signal(self, rec: ProcRecord, sig: signal.Signals) -> None:
        """Signal the process group of ``rec`` if it is still the process we started (never a reused PID)."""
        if not rec.alive():
            return
        try:
            if os.getpgid(rec.pid) == rec.pid:
                os.killpg(rec.pid, sig)
            else:
                os.kill(rec.pid, sig)
        except ProcessLookupError:
            pass

    def _reap(self) -> None:
        for p in self._popen.values():
            p.poll()

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
        """Apply a CRD file (server-side) and wait ≤ ``timeout`` seconds for it to be Established."""
        self.apply(path.read_text(), server_side=True)
        self.kubectl(
            "wait", "--for=condition=Established", f"crd/{name}", f"--timeout={int(timeout)}s", timeout=timeout + 10
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
                self.kubectl(
                    "patch",
                    "node",
                    str(d["metadata"]["name"]),
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    json.dumps({"status": status}),
                )
        self._log(f"created nodes {', '.join(names)}")
        return names

    def wait_nodes_ready(self, names: Sequence[str], timeout: float = NODES_TIMEOUT) -> None:
        """Wait ≤ ``timeout`` seconds until the named nodes are Ready with no not-ready taint.

        Raises ComponentStartError naming kwok (or kube-controller-manager if only the taint stays).
        """
        wanted = set(names)
        last: dict[str, str] = {}

        def done() -> bool:
            items = self.api_json("/api/v1/nodes")["items"]
            last.clear()
            for n in items:
                name = n["metadata"]["name"]
                if name not in wanted:
                    continue
                ready = any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
                tainted = any(t.get("key") == NOT_READY_TAINT for t in n.get("spec", {}).get("taints") or [])
                if not ready:
                    last[name] = "not Ready"
                elif tainted:
                    last[name] = "Ready but still tainted not-ready"
            missing = wanted - {n["metadata"]["name"] for n in items}
            for m in missing:
                last[m] = "missing"
            return not last

        try:
            _wait_until(
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
        """Return a bound token for ``namespace/service_account`` via TokenRequest (kubectl create token)."""
        out = self.kubectl("create", "token", service_account, "-n", namespace, f"--duration={duration}")
        return out.stdout.strip()

    def token_kubeconfig(self, path: Path, token: str) -> Path:
        """Write a kubeconfig at ``path`` that authenticates with a bearer ``token``; return ``path``."""
        cfg = kubeconfig_dict(self.server, self.ca_file.read_bytes(), b"", b"", "token-user")
        cfg["users"] = [{"name": "token-user", "user": {"token": token}}]
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)
        return path

    def status(self) -> dict[str, Any]:
        """Return a JSON-able summary: server, health and per-component pid/alive/port/RSS (MiB)."""
        if self._state is None:
            return {"state_dir": str(self.state_dir), "running": False, "components": {}}
        comps: dict[str, Any] = {}
        for name, rec in self._state.components.items():
            alive = rec.alive()
            rss = proc_rss_bytes(rec.pid) if alive else None
            comps[name] = {
                "pid": rec.pid,
                "alive": alive,
                "port": rec.port,
                "rss_mib": round(rss / 2**20, 1) if rss is not None else None,
                "log": rec.log,
            }
        return {
            "state_dir": str(self.state_dir),
            "status": self._state.status,
            "running": self.is_running(),
            "server": self._state.server,
            "kubeconfig": str(self.kubeconfig),
            "bin_dir": self._state.bin_dir,
            "started_at": self._state.started_at,
            "timings": self._state.timings,
            "components": comps,
        }

    def env_lines(self) -> list[str]:
        """Shell ``export`` lines: KUBECONFIG, OME_CLUSTER_DIR, OME_K8S_BIN_DIR and PATH (bin dir first)."""
        q = shlex.quote
        return [
            f"export KUBECONFIG={q(str(self.kubeconfig))}",
            f"export OME_CLUSTER_DIR={q(str(self.state_dir))}",
            f"export OME_K8S_BIN_DIR={q(str(self.bin_dir))}",
            f'export PATH={q(str(self.bin_dir))}:"$PATH"',
        ]


# ----------------------------------------------------------------------------------------------
# CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m e2e.cluster up|down|stop|status|env``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--dir", help="state directory (default: $OME_CLUSTER_DIR or <repo>/.local-cluster)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the control plane (no-op if already up)")
    p_up.add_argument("--fresh", action="store_true", help="stop and wipe a running cluster first")
    g = p_up.add_mutually_exclusive_group()
    g.add_argument("--nodes", default=str(DEMO_NODES_FILE), help="Node YAML to create (default: %(default)s)")
    g.add_argument("--no-nodes", action="store_true", help="create no nodes")
    p_down = sub.add_parser("down", help="stop the control plane and remove its state")
    p_down.add_argument("--keep", action="store_true", help="keep the state directory (logs, pki, etcd data)")
    p_stop = sub.add_parser("stop", help="stop one extra process (default: the demo's ome-scheduler)")
    p_stop.add_argument("name", nargs="?", default="ome-scheduler")
    p_status = sub.add_parser("status", help="show components, PIDs, ports and RSS")
    p_status.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("env", help="print export lines for KUBECONFIG and friends")
    args = parser.parse_args(argv)

    cluster = Cluster(args.dir)
    try:
        if args.cmd == "up":
            t = time.monotonic()
            started = cluster.up(fresh=args.fresh, nodes=None if args.no_nodes else Path(args.nodes))
            if started:
                print(f"# cluster up in {time.monotonic() - t:.1f} s", file=sys.stderr)
            print("\n".join(cluster.env_lines()))
            return 0
        if args.cmd == "down":
            if cluster._state is None and not cluster.state_dir.exists():
                print(f"no cluster in {cluster.state_dir}", file=sys.stderr)
                return 0
            t = time.monotonic()
            cluster.down(keep=args.keep)
            print(f"# cluster down in {time.monotonic() - t:.1f} s", file=sys.stderr)
            return 0
        if args.cmd == "stop":
            if cluster._state is None:
                print(f"no cluster in {cluster.state_dir}", file=sys.stderr)
                return 0
            try:
                stopped = cluster.stop_process(args.name)
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                return 1
            print(f"{args.name}: {'stopped' if stopped else 'not running'}", file=sys.stderr)
            return 0
        if args.cmd == "status":
            st = cluster.status()
            if args.json:
                print(json.dumps(st, indent=2))
            else:
                print(f"state dir: {st['state_dir']}")
                print(f"running:   {st['running']}")
                if "server" in st:
                    print(f"server:    {st['server']}")
                    print(f"kubeconfig: {st['kubeconfig']}")
                for name, c in st["components"].items():
                    print(
                        f"  {name:24} pid={c['pid']:<8} alive={c['alive']!s:5} port={c['port']!s:6} "
                        f"rss={c['rss_mib']} MiB"
                    )
            return 0 if st["running"] else 1
        if args.cmd == "env":
            if cluster._state is None:
                print(f"no cluster in {cluster.state_dir}; run: python -m e2e.cluster up", file=sys.stderr)
                return 1
            print("\n".join(cluster.env_lines()))
            return 0
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KubectlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
