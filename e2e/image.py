"""The Dockerfile's image, built and run without a Docker engine (buildah, mmdebstrap, crun).

``e2e/test_image.py`` uses this; ``python -m e2e.image build`` builds the image the same way and
prints its figures. Three pieces, each a thin layer over a Debian tool run as root:

* :func:`debian_base_tar` makes the base image's root filesystem with ``mmdebstrap``: Debian
  bookworm's Python 3.11 arranged like ``python:3.11-slim`` (pip and setuptools installed by
  pip under ``/usr/local``, no ``EXTERNALLY-MANAGED`` marker, documentation and locales left
  out as in Debian's slim images), from Debian's packages only. The tarball is cached under
  ``~/.cache/ome-scheduler/image-base/``, keyed by everything that goes into it (suite,
  mirrors, packages, hooks); delete the directory to refresh it.
* :class:`Buildah` imports that tarball as a local image and builds the repository's
  ``Dockerfile`` on it (``--build-arg PYTHON_IMAGE=<local base>``), with the ``vfs`` storage
  driver and ``chroot`` isolation, in a storage directory of its own (no daemon, no
  ``/var/lib/containers``). RUN steps use the host's network; the host's CA bundle is
  bind-mounted over the base's during the build only (the base's ``/etc/pip.conf`` makes pip
  use it), so pip reaches PyPI through a TLS-intercepting proxy too, and nothing of it is
  committed.
* :class:`CrunContainer` runs the image's root filesystem with ``crun`` (the OCI runtime
  that ``buildah`` brings along) as a kubelet would run the chart's container: the image's
  user, a read-only root, no capabilities, ``no_new_privs``, the runtime's default seccomp
  profile (containers-common's ``seccomp.json``, converted), its own PID, IPC, UTS and mount
  namespaces, and the host's network (the local control plane listens on 127.0.0.1).

On a host whose cgroup v2 hierarchy is mounted next to v1 controllers with a controller enabled
in it (this machine: ``/sys/fs/cgroup/unified`` with ``hugetlb``), crun refuses every container
with ``cgroups in hybrid mode not supported, drop all controllers from cgroupv2`` (so does
``buildah run --isolation oci``, which uses it), even with ``--cgroup-manager=disabled``. The
container is therefore started in a private mount namespace in which that cgroup v2 mount is
detached; crun runs with ``--cgroup-manager=disabled`` and creates no cgroup (no resource
limits: the chart sets none either). Nothing outside that namespace changes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import resource
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parent.parent
CACHE_DIR: Final = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ome-scheduler" / "image-base"

#: The tools this module runs, and the Debian packages that bring them.
TOOLS: Final = {"buildah": "buildah", "mmdebstrap": "mmdebstrap", "crun": "crun", "unshare": "util-linux"}
SECCOMP_PROFILE: Final = Path("/usr/share/containers/seccomp.json")  # golang-github-containers-common

SUITE: Final = "bookworm"
#: The base's packages: Python 3.11 and what ``python:3.11-slim`` adds to Debian (CA certificates,
#: /etc/services and /etc/protocols, time zones). python3-venv only lends its pip and setuptools
#: wheels to the hook below and is purged again.
BASE_PACKAGES: Final = ("python3", "python-is-python3", "python3-venv", "ca-certificates", "netbase", "tzdata")
#: What Debian's slim images leave out (debuerreotype's list), as dpkg path filters.
DPKG_OPTIONS: Final = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
#: mmdebstrap customize hooks (``$1`` is the root filesystem), in order.
CUSTOMIZE_HOOKS: Final = (
    # python:3.11-slim's pip may install into the system Python: no PEP 668 marker.
    'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
    # pip and setuptools installed by pip under /usr/local, from Debian's own wheels, as
    # python:3.11-slim has them, so the Dockerfile's `pip uninstall` can remove them (Debian's
    # python3-pip would be refused: "Not uninstalling pip at /usr/lib/python3/dist-packages,
    # outside environment /usr", exit status 0).
    'chroot "$1" sh -ec \'for w in /usr/share/python-wheels/pip-*.whl; do python3 "$w/pip" install -q '
    "--no-cache-dir --no-index --find-links /usr/share/python-wheels pip setuptools; done'",
    'chroot "$1" apt-get purge -q -y --autoremove python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl',
    # pip trusts the system CA bundle (as Debian's own pip does), not the copy vendored in pip.
    "printf '[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n' > \"$1\"/etc/pip.conf",
)
#: The base image's configuration (python:3.11-slim's ENV and CMD).
BASE_ENV: Final = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
BASE_CMD: Final = "python3"

#: Where a hybrid cgroup host mounts cgroup v2 (see the module docstring).
_HYBRID_CGROUP2: Final = "/sys/fs/cgroup/unified"


class ImageError(RuntimeError):
    """A tool failed; ``str()`` has the command, its exit status and the end of its output."""


class ToolsMissing(ImageError):
    """A tool this module needs is not installed, or the process is not root."""


def missing_tools() -> list[str]:
    """Why the image cannot be built here, one line per reason ([] when it can).

    Needs root (buildah with chroot isolation, mmdebstrap's root mode and crun all do) and the
    executables of :data:`TOOLS` plus containers-common's seccomp profile.
    """
    problems = []
    if os.geteuid() != 0:
        problems.append(f"not root (euid {os.geteuid()}): buildah, mmdebstrap and crun run as root here")
    for tool, package in TOOLS.items():
        if shutil.which(tool) is None:
            problems.append(f"{tool} not found on PATH (Debian package {package})")
    if not SECCOMP_PROFILE.is_file():
        problems.append(f"{SECCOMP_PROFILE} missing (Debian package golang-github-containers-common)")
    return problems


def _run(argv: Sequence[str], *, timeout: float, log: Path | None = None, what: str = "") -> str:
    """Run ``argv``; return its stdout+stderr text. Raises ImageError (with the output's last
    4,000 characters) on a non-zero exit or after ``timeout`` seconds. ``log`` gets a copy."""
    try:
        proc = subprocess.run(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise ImageError(
            f"{what or argv[0]} timed out after {timeout:.0f} s: {' '.join(argv)}\n{out[-4000:]}"
        ) from None
    if log is not None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(argv)}\n{proc.stdout}\n")
    if proc.returncode != 0:
        raise ImageError(
            f"{what or argv[0]} failed with exit status {proc.returncode}: {' '.join(argv)}\n{proc.stdout[-4000:]}"
        )
    return proc.stdout


# ---- the base image ------------------------------------------------------------------------


def mirrors() -> list[str]:
    """The apt sources of the base: ``OME_DEBIAN_MIRROR`` (default deb.debian.org/debian) for the
    suite and its updates, ``OME_DEBIAN_SECURITY_MIRROR`` for security updates."""
    main = os.environ.get("OME_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    security = os.environ.get("OME_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
    return [f"deb {main} {SUITE} main", f"deb {main} {SUITE}-updates main", f"deb {security} {SUITE}-security main"]


def mmdebstrap_argv(output: Path) -> list[str]:
    """The mmdebstrap command that writes the base's root filesystem to ``output`` (a tarball)."""
    argv = ["mmdebstrap", "--mode=root", "--format=tar", "--variant=apt"]
    argv.append("--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr")  # merged /usr without usrmerge (and perl)
    argv.append("--include=" + ",".join(BASE_PACKAGES))
    argv += [f"--dpkgopt={opt}" for opt in DPKG_OPTIONS]
    argv += [f"--customize-hook={hook}" for hook in CUSTOMIZE_HOOKS]
    return [*argv, SUITE, str(output), *mirrors()]


def base_cache_key() -> str:
    """16 hex digits of SHA-256 over the mmdebstrap command (suite, mirrors, packages, options,
    hooks) and the base's configuration: what decides the tarball's content."""
    spec = {"argv": mmdebstrap_argv(Path("OUT")), "env": BASE_ENV, "cmd": BASE_CMD}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def debian_base_tar(log: Path | None = None, timeout: float = 900.0) -> tuple[Path, bool]:
    """The base's root filesystem tarball and whether it came from the cache.

    Built once per :func:`base_cache_key` under :data:`CACHE_DIR` (30-70 s here, packages from
    the Debian mirror; the tarball is about 145 MB); a tarball is written under a temporary name
    and renamed, so concurrent runs never see half of one. Raises ImageError.
    """
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tar = CACHE_DIR / f"debian-{SUITE}-python3-{base_cache_key()}.tar"
    if tar.is_file():
        return tar, True
    fd, tmp_name = tempfile.mkstemp(prefix=tar.name + ".", suffix=".tmp", dir=CACHE_DIR)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _run(mmdebstrap_argv(tmp), timeout=timeout, log=log, what="mmdebstrap")
        tmp.replace(tar)
    finally:
        tmp.unlink(missing_ok=True)
    return tar, False


def host_ca_bundle() -> Path | None:
    """The CA bundle the host's own pip trusts (``PIP_CERT``, ``SSL_CERT_FILE``,
    ``REQUESTS_CA_BUNDLE``, then OpenSSL's default file), or None."""
    candidates = [os.environ.get(v) for v in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")]
    candidates += [ssl.get_default_verify_paths().cafile, "/etc/ssl/certs/ca-certificates.crt"]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    return None


# ---- buildah -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image configuration a runtime needs (``config`` of the image JSON)."""

    user: str
    entrypoint: list[str]
    cmd: list[str]
    env: list[str]
    working_dir: str
    labels: dict[str, str]

    @classmethod
    def from_oci(cls, config: Mapping[str, Any]) -> ImageConfig:
        """From the ``config`` object of an OCI image configuration (missing fields: empty)."""
        return cls(
            user=str(config.get("User") or ""),
            entrypoint=list(config.get("Entrypoint") or []),
            cmd=list(config.get("Cmd") or []),
            env=list(config.get("Env") or []),
            working_dir=str(config.get("WorkingDir") or "/"),
            labels=dict(config.get("Labels") or {}),
        )

    def uid_gid(self) -> tuple[int, int]:
        """The numeric ``(uid, gid)`` of ``User`` (``"uid"`` or ``"uid:gid"``; no user: root).

        Raises ImageError for a user name: as with Kubernetes' ``runAsNonRoot``, only a numeric
        user can be checked without reading the image's /etc/passwd."""
        if not self.user:
            return 0, 0
        uid, _, gid = self.user.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            raise ImageError(f"image user {self.user!r} is not numeric")
        return int(uid), int(gid or uid)


@dataclass(frozen=True)
class LayerSize:
    """One layer: bytes as stored in a registry (gzip) and unpacked (the tar stream)."""

    compressed: int
    uncompressed: int


class Buildah:
    """``buildah`` with a storage directory of its own (``<root>/storage``, ``vfs`` driver).

    Every method raises ImageError when buildah fails. :meth:`cleanup` removes the storage.
    """

    def __init__(self, root: Path, log: Path | None = None) -> None:
        """Use ``root`` (created) for storage and run state; append every command's output to ``log``."""
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.log = log
        self._global = ["buildah", f"--root={root / 'storage'}", f"--runroot={root / 'run'}", "--storage-driver=vfs"]

    def __call__(self, *args: str, timeout: float = 300.0) -> str:
        """Run ``buildah <global options> *args``; return its output."""
        return _run([*self._global, *args], timeout=timeout, log=self.log, what=f"buildah {args[0]}")

    def import_rootfs(self, tar: Path, ref: str, env: Sequence[str] = BASE_ENV, cmd: str = BASE_CMD) -> None:
        """Commit the root filesystem tarball ``tar`` as the one-layer image ``ref``."""
        ctr = self("from", "scratch").strip()
        try:
            self("add", ctr, str(tar), "/")
            self("config", *(f"--env={e}" for e in env), f"--cmd={cmd}", ctr)
            self("commit", "--quiet", ctr, ref)
        finally:
            self("rm", ctr)

    def build(
        self,
        context: Path,
        ref: str,
        *,
        build_args: Mapping[str, str] = {},
        volumes: Sequence[str] = (),
        timeout: float = 1200.0,
    ) -> None:
        """``buildah build`` the ``Dockerfile`` of ``context`` as ``ref``: chroot isolation, the
        host's network, no pulls (the base must be local), ``volumes`` bind-mounted into RUN steps."""
        argv = ["build", "--isolation=chroot", "--network=host", "--pull-never", "--layers=false", f"--tag={ref}"]
        argv += [f"--build-arg={k}={v}" for k, v in build_args.items()]
        argv += [f"--volume={v}" for v in volumes]
        self(*argv, str(context), timeout=timeout)

    def inspect(self, ref: str) -> dict[str, Any]:
        """``buildah inspect --type image``: the image's JSON (``OCIv1``, ``Docker``, ``History``...)."""
        return dict(json.loads(self("inspect", "--type=image", ref)))

    def config(self, ref: str) -> ImageConfig:
        """The image's OCI configuration."""
        return ImageConfig.from_oci(self.inspect(ref)["OCIv1"].get("config") or {})

    def layer_sizes(self, ref: str, workdir: Path) -> list[LayerSize]:
        """Each layer's size, base first: pushed to an OCI layout in ``workdir`` with gzip (what a
        registry stores and a node pulls), then each blob decompressed and counted."""
        layout = workdir / "oci-layout"
        shutil.rmtree(layout, ignore_errors=True)
        self("push", "--quiet", "--compression-format=gzip", ref, f"oci:{layout}", timeout=600.0)
        blobs = layout / "blobs" / "sha256"
        index = json.loads((layout / "index.json").read_text())
        manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":", 1)[1]).read_text())
        sizes = []
        for layer in manifest["layers"]:
            path = blobs / layer["digest"].split(":", 1)[1]
            unpacked = 0
            with gzip.open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    unpacked += len(chunk)
            sizes.append(LayerSize(compressed=int(layer["size"]), uncompressed=unpacked))
        shutil.rmtree(layout, ignore_errors=True)
        return sizes

    def mount(self, ref: str) -> tuple[str, Path]:
        """A working container of ``ref`` and the directory holding its root filesystem."""
        ctr = self("from", "--pull-never", ref).strip().splitlines()[-1]
        return ctr, Path(self("mount", ctr).strip())

    def cleanup(self) -> None:
        """Remove every container and image, then the storage directory itself."""
        for args in (("umount", "--all"), ("rm", "--all"), ("rmi", "--all", "--force")):
            try:
                self(*args)
            except ImageError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


# ---- crun ------------------------------------------------------------------------------------

_ARCHES: Final = {"x86_64": ("amd64", "SCMP_ARCH_X86_64"), "aarch64": ("arm64", "SCMP_ARCH_AARCH64")}


def _kernel_at_least(version: str) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in v.split("-")[0].split(".")[:2])

    return parts(platform.release()) >= parts(version)


def runtime_default_seccomp(caps: Sequence[str] = (), profile: Path = SECCOMP_PROFILE) -> dict[str, Any]:
    """containers-common's default seccomp profile (what ``RuntimeDefault`` means for CRI-O and
    podman) as an OCI runtime-spec ``linux.seccomp`` object, for this machine's architecture and a
    container holding ``caps``: rules are kept or dropped by their ``includes``/``excludes`` of
    architectures, capabilities and kernel version, as containers/common does.
    Raises ImageError on an architecture the profile does not map."""
    arch_name, scmp_arch = _ARCHES.get(platform.machine(), ("", ""))
    doc = json.loads(profile.read_text())
    arch_map = {a["architecture"]: a.get("subArchitectures") or [] for a in doc.get("archMap") or []}
    if scmp_arch not in arch_map:
        raise ImageError(f"{profile} has no rules for architecture {platform.machine()}")
    syscalls = []
    for rule in doc["syscalls"]:
        inc, exc = rule.get("includes") or {}, rule.get("excludes") or {}
        if inc.get("arches") and arch_name not in inc["arches"]:
            continue
        if arch_name in (exc.get("arches") or []):
            continue
        if any(c not in caps for c in inc.get("caps") or []):
            continue
        if any(c in caps for c in exc.get("caps") or []):
            continue
        if inc.get("minKernel") and not _kernel_at_least(inc["minKernel"]):
            continue
        out: dict[str, Any] = {"names": rule["names"], "action": rule["action"]}
        if rule.get("args"):
            out["args"] = [{k: a[k] for k in ("index", "value", "valueTwo", "op")} for a in rule["args"]]
        if rule.get("errnoRet") is not None:
            out["errnoRet"] = rule["errnoRet"]
        syscalls.append(out)
    seccomp: dict[str, Any] = {
        "defaultAction": doc["defaultAction"],
        "architectures": [scmp_arch, *arch_map[scmp_arch]],
        "syscalls": syscalls,
    }
    if doc.get("defaultErrnoRet") is not None:
        seccomp["defaultErrnoRet"] = doc["defaultErrnoRet"]
    return seccomp


@dataclass
class CrunContainer:
    """One container run by crun from a root filesystem, as a kubelet runs a restricted pod's.

    ``args`` replaces the image's entrypoint and command (as a pod's ``command`` + ``args``);
    ``env`` is added to the image's; ``binds`` maps host paths to read-only mount points. The
    process gets the image's user, a read-only root, no capabilities, ``no_new_privs``, the
    runtime-default seccomp profile and the host's network. Timeouts are in seconds.
    """

    rootfs: Path
    image: ImageConfig
    args: list[str]
    bundle: Path
    env: Mapping[str, str] = field(default_factory=dict)
    binds: Mapping[Path, str] = field(default_factory=dict)
    hostname: str = "ome-scheduler"
    name: str = ""
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"ome-image-{os.getpid()}-{time.monotonic_ns()}"
        self.bundle.mkdir(parents=True, exist_ok=True)
        self.log_path = self.bundle / "container.log"

    def spec(self) -> dict[str, Any]:
        """The OCI runtime configuration (``config.json``) this container runs with."""
        uid, gid = self.image.uid_gid()
        nofile = min(1048576, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        env = dict(e.split("=", 1) for e in self.image.env)
        env.update(self.env)
        env.setdefault("HOSTNAME", self.hostname)
        no_caps: dict[str, list[str]] = {
            k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")
        }
        mounts: list[dict[str, Any]] = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
            },
            {
                "destination": "/dev/mqueue",
                "type": "mqueue",
                "source": "mqueue",
                "options": ["nosuid", "noexec", "nodev"],
            },
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        ]
        mounts += [
            {"destination": dst, "type": "bind", "source": str(src), "options": ["rbind", "ro", "nosuid", "nodev"]}
            for src, dst in self.binds.items()
        ]
        return {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": uid, "gid": gid, "additionalGids": []},
                "args": self.args,
                "env": [f"{k}={v}" for k, v in env.items()],
                "cwd": self.image.working_dir,
                "capabilities": no_caps,
                # containerd gives containers soft = hard = 1048576 descriptors; the host may allow fewer.
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": nofile, "soft": nofile}],
                "noNewPrivileges": True,
            },
            "root": {"path": str(self.rootfs), "readonly": True},
            "hostname": self.hostname,
            "mounts": mounts,
            "linux": {
                "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
                "seccomp": runtime_default_seccomp(),
                "maskedPaths": [
                    "/proc/acpi",
                    "/proc/kcore",
                    "/proc/keys",
                    "/proc/latency_stats",
                    "/proc/timer_list",
                    "/proc/sched_debug",
                    "/proc/scsi",
                    "/sys/firmware",
                ],
                "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
            },
        }

    def argv(self) -> list[str]:
        """``crun run`` in a private mount namespace without the hybrid cgroup v2 mount."""
        # (cgroupfs files report size 0: read the controllers, do not test the size.)
        detach = f"if grep -qs . {_HYBRID_CGROUP2}/cgroup.controllers; then umount -l {_HYBRID_CGROUP2}; fi"
        crun = ["crun", "--cgroup-manager=disabled", "run", f"--bundle={self.bundle}", self.name]
        return ["unshare", "--mount", "--propagation=private", "--", "sh", "-c", f'{detach}; exec "$@"', "sh", *crun]

    def start(self) -> CrunContainer:
        """Write ``config.json`` and start the container; its output goes to :attr:`log_path`."""
        (self.bundle / "config.json").write_text(json.dumps(self.spec(), indent=1))
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def log(self) -> str:
        """Everything the container (and crun) wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def state(self) -> dict[str, Any]:
        """``crun state``: ``status`` and, while it runs, the ``pid`` of its process (host PID namespace)."""
        return dict(json.loads(_run(["crun", "state", self.name], timeout=30.0)))

    def kill(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the container's process (PID 1 of its PID namespace)."""
        _run(["crun", "kill", self.name, str(int(sig))], timeout=30.0)

    def wait(self, timeout: float) -> int:
        """Wait for the container to exit; return its exit status (crun's, if crun failed)."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit status (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.kill(signal.SIGTERM)
                return self.wait(timeout)
            except (ImageError, subprocess.TimeoutExpired):
                try:
                    self.kill(signal.SIGKILL)
                except ImageError:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                return self.wait(10.0)
        return self.proc.returncode

    def run(self, timeout: float = 60.0) -> tuple[int, str]:
        """Start, wait at most ``timeout`` and return ``(exit status, output)``."""
        self.start()
        try:
            rc = self.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = self.stop(5.0) or -1
        return rc, self.log()


# ---- python -m e2e.image build ----------------------------------------------------------------


def build_image(workdir: Path, ref: str, log: Path | None = None) -> dict[str, Any]:
    """Build the repository's Dockerfile on the Debian base as ``ref`` in ``workdir``'s storage.

    Returns ``{"buildah": Buildah, "base": base ref, "cached_base": bool, "seconds": {phase: s}}``.
    Raises ToolsMissing or ImageError.
    """
    problems = missing_tools()
    if problems:
        raise ToolsMissing("; ".join(problems))
    seconds: dict[str, float] = {}
    t = time.monotonic()
    tar, cached = debian_base_tar(log=log)
    seconds["base (cached)" if cached else "base (mmdebstrap)"] = time.monotonic() - t
    b = Buildah(workdir, log=log)
    base_ref = f"localhost/ome-scheduler-base:{SUITE}-{base_cache_key()}"
    t = time.monotonic()
    b.import_rootfs(tar, base_ref)
    seconds["import base"] = time.monotonic() - t
    ca = host_ca_bundle()
    volumes = [f"{ca}:/etc/ssl/certs/ca-certificates.crt:ro"] if ca else []
    t = time.monotonic()
    b.build(REPO, ref, build_args={"PYTHON_IMAGE": base_ref}, volumes=volumes)
    seconds["buildah build"] = time.monotonic() - t
    return {"buildah": b, "base": base_ref, "cached_base": cached, "seconds": seconds}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m e2e.image build [--tag REF] [--storage DIR] [--oci-archive FILE]``."""
    p = argparse.ArgumentParser(prog="python -m e2e.image", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    bp = sub.add_parser("build", help="build the Dockerfile's image on a Debian base made by mmdebstrap")
    bp.add_argument("--tag", default="localhost/ome-scheduler:dev")
    bp.add_argument("--storage", type=Path, default=CACHE_DIR.parent / "image-storage", help="buildah storage (vfs)")
    bp.add_argument("--oci-archive", type=Path, help="also write the image to this OCI archive")
    ns = p.parse_args(argv)
    try:
        built = build_image(ns.storage, ns.tag, log=None)
        b: Buildah = built["buildah"]
        sizes = b.layer_sizes(ns.tag, ns.storage)
        if ns.oci_archive:
            b("push", "--quiet", ns.tag, f"oci-archive:{ns.oci_archive.resolve()}:{ns.tag}", timeout=600.0)
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    mb = 1e6
    print(f"built {ns.tag} on {built['base']} (storage {ns.storage}; buildah --root={ns.storage / 'storage'})")
    print(
        f"size: {sum(s.uncompressed for s in sizes) / mb:.1f} MB unpacked, "
        f"{sum(s.compressed for s in sizes) / mb:.1f} MB compressed, in {len(sizes)} layers"
    )
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in built["seconds"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
