"""End-to-end: the Dockerfile's image, built and run for real, schedules the demo gang.

There is no Docker engine here, so ``e2e/image.py`` does what one would: it builds the
repository's ``Dockerfile`` with ``buildah`` (vfs storage, chroot isolation) on a Debian bookworm
Python 3.11 base made by ``mmdebstrap`` (passed as ``--build-arg PYTHON_IMAGE``; users keep the
Dockerfile's default ``python:3.11`` slim image), then runs the image's root filesystem with
``crun`` the way a kubelet runs the chart's pod: the image's user, read-only root, no
capabilities, ``no_new_privs``, the runtime's default seccomp profile, the chart's command, args
and ConfigMap, and in-cluster credentials (a token of the chart's ServiceAccount bound by the
chart's RBAC, ``KUBERNETES_SERVICE_HOST``/``PORT``). The host's network stands in for the pod's,
so the chart is rendered with ``bindAddress: 127.0.0.1`` and a free ``securePort``.

Checked: the image's user is 65532 and its entrypoint ``/ome-scheduler``; nothing of pip
(module, scripts, dist-info, wheels) and no compiler, assembler or linker is in it; writes to
its root fail; the size figures (printed); the scheduler in it takes the Lease, answers the
chart's probes and an authorised ``/metrics`` scrape, schedules the documented demo gang into
one clique, and exits 0 on SIGTERM, releasing the Lease.

When buildah, mmdebstrap or crun are missing (``.ci/run`` installs them on Debian), or the run is
not root, the module **fails** with the exact reason: a skipped image test would let CI pass
without an image ever having been built. ``OME_IMAGE_TEST=skip`` turns that failure into a skip
with the same reason, for machines that knowingly cannot build images.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
import yaml

from e2e.harness.api import Api
from e2e.harness.cluster import K8S_VERSION, Cluster
from e2e.harness.gangs import run_demo_gang
from e2e.harness.paths import REPO
from e2e.harness.processes import free_ports
from e2e.harness.waits import wait_for
from e2e.image import (
    Buildah,
    CrunContainer,
    ImageConfig,
    ImageError,
    LayerSize,
    build_image,
    host_ca_bundle,
    missing_tools,
)
from tests.support.manifests import unique


def _cannot_build(problems: list[str]) -> str:
    return (
        "cannot build the container image here: "
        + "; ".join(problems)
        + ". On Debian or Ubuntu, as root: apt-get install buildah mmdebstrap crun (.ci/run does)."
        " Set OME_IMAGE_TEST=skip to skip this module knowingly."
    )


PROBLEMS = missing_tools()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        bool(PROBLEMS) and os.environ.get("OME_IMAGE_TEST") == "skip", reason=_cannot_build(PROBLEMS) + " (skipped)"
    ),
]

IMAGE = "localhost/ome-scheduler:e2e"
UID = 65532
CHART = REPO / "helm" / "ome-scheduler"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SIZE_LIMIT_MB = 300.0
"""Upper bound on the unpacked image (about 230 MB on the Debian base today): a regression such
as a build toolchain or pip cache left in the final stage adds tens of MB."""

#: Executables of a C toolchain (compilers, preprocessor, assembler, linker, gcc's back ends).
TOOLCHAIN = re.compile(
    r"^(cc|c\+\+|c89|c99|gcc|g\+\+|cpp|clang|clang\+\+|tcc|as|ld|ld\.(bfd|gold|lld)|gold|cc1|cc1plus|collect2|lto1)"
    r"(-[0-9.]+)?$|^[a-z0-9_]+-linux-gnu[a-z]*-(gcc|g\+\+|cpp|as|ld)(-[0-9.]+)?$"
)
#: Debian packages of a toolchain, headers for building extensions, or pip.
TOOLCHAIN_PACKAGES = re.compile(
    r"^(gcc|g\+\+|cpp|clang|binutils|build-essential|libc6-dev|libgcc-[0-9]+-dev|python3(\.[0-9]+)?-dev|python3-pip)"
    r"([-0-9.]*|-x86-64-linux-gnu|-aarch64-linux-gnu)$"
)
#: pip, setuptools and wheel installed, as scripts, or as wheels waiting to be installed.
PIP_FILES = re.compile(
    r"^(pip|pip3(\.[0-9]+)?|easy_install(-[0-9.]+)?|wheel)$"
    r"|^(pip|setuptools|wheel)-[^/]*\.(dist-info|egg-info|whl)$"
)


@dataclass
class Built:
    """The built image: its storage, a working container's root filesystem and its figures."""

    buildah: Buildah
    rootfs: Path
    config: ImageConfig
    layers: list[LayerSize]
    seconds: dict[str, float]
    workdir: Path

    def container(self, name: str, args: list[str], **kw: Any) -> CrunContainer:
        """A container of the image with its own bundle directory under the work directory."""
        return CrunContainer(rootfs=self.rootfs, image=self.config, args=args, bundle=self.workdir / name, **kw)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """The Dockerfile's image, built once for the module (about 1.5 minutes; see docs/operations/security.md)."""
    if PROBLEMS:
        pytest.fail(_cannot_build(PROBLEMS), pytrace=False)
    work = tmp_path_factory.mktemp("image")
    log = work / "build.log"
    start = time.monotonic()
    try:
        info = build_image(work / "buildah", IMAGE, log=log)
    except ImageError as exc:
        pytest.fail(f"image build failed ({exc.__class__.__name__}), full log in {log}:\n{exc}", pytrace=False)
    b: Buildah = info["buildah"]
    try:
        seconds = dict(info["seconds"])
        t = time.monotonic()
        layers = b.layer_sizes(IMAGE, work)
        seconds["layer sizes (push, gzip)"] = time.monotonic() - t
        _, rootfs = b.mount(IMAGE)
        seconds["build total"] = time.monotonic() - start
        yield Built(b, rootfs, b.config(IMAGE), layers, seconds, work)
    finally:
        b.cleanup()


def _walk(rootfs: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` over the image's files (not /proc, /sys or /dev, not following links)."""
    for top, dirs, files in os.walk(rootfs):
        if top == str(rootfs):
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
        yield top, dirs, files


def test_image_user_contents_and_size(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = built.config
    assert cfg.user == f"{UID}:{UID}" and cfg.uid_gid() == (UID, UID)
    assert cfg.entrypoint == ["/ome-scheduler"]
    assert (built.rootfs / "ome-scheduler").is_symlink()

    pip_hits, toolchain_hits = [], []
    for top, dirs, files in _walk(built.rootfs):
        rel = "/" + os.path.relpath(top, built.rootfs)
        for name in dirs + files:
            if PIP_FILES.match(name) or (name == "pip" and (Path(top) / name / "__init__.py").exists()):
                pip_hits.append(f"{rel}/{name}")
        for name in files:
            path = Path(top) / name
            if TOOLCHAIN.match(name) and os.access(path, os.X_OK) and not path.is_dir():
                toolchain_hits.append(f"{rel}/{name}")
    assert pip_hits == [], f"pip in the final image: {pip_hits}"
    assert toolchain_hits == [], f"toolchain executables in the final image: {toolchain_hits}"
    status = (built.rootfs / "var/lib/dpkg/status").read_text()
    installed = re.findall(r"^Package: (\S+)\nStatus: install ok installed$", status, flags=re.M)
    assert len(installed) > 50, "dpkg status not read"
    assert [p for p in installed if TOOLCHAIN_PACKAGES.match(p)] == []

    # The same, seen from inside a container of the image.
    rc, out = built.container(
        "probe-id", ["python", "-c", "import os, pathlib; print(os.getuid(), pathlib.Path.home())"]
    ).run()
    assert (rc, out.strip()) == (0, f"{UID} /nonexistent"), out  # the user's passwd entry gives it a HOME
    rc, out = built.container("probe-pip", ["python", "-c", "import pip"]).run()
    assert rc == 1 and "No module named 'pip'" in out, out
    rc, out = built.container("probe-rw", ["touch", "/tmp/probe"]).run()  # /tmp is world-writable in the image
    assert rc == 1 and "Read-only file system" in out, out
    assert not (built.rootfs / "tmp/probe").exists()

    mb = 1e6
    unpacked = sum(layer.uncompressed for layer in built.layers)
    compressed = sum(layer.compressed for layer in built.layers)
    base, app = built.layers[0], built.layers[1:]
    figures = (
        f"\nimage {IMAGE}: {unpacked / mb:.1f} MB unpacked, {compressed / mb:.1f} MB compressed (gzip, as pulled); "
        f"base layer {base.uncompressed / mb:.1f} MB ({base.compressed / mb:.1f} MB), the Dockerfile's "
        f"{len(app)} layer(s) {sum(a.uncompressed for a in app) / mb:.1f} MB "
        f"({sum(a.compressed for a in app) / mb:.1f} MB); built in "
        + ", ".join(f"{k} {v:.1f} s" for k, v in built.seconds.items())
        + f"; host CA bundle for pip: {host_ca_bundle()}"
    )
    with capsys.disabled():  # the figures belong in the run's output, pass or fail
        print(figures)
    assert unpacked < SIZE_LIMIT_MB * mb, figures


# ---- the image as the chart runs it -----------------------------------------------------------


def _render_chart(cluster: Cluster, namespace: str, port: int) -> list[dict[str, Any]]:
    """``helm template`` with the chart's defaults, bound to loopback on ``port`` (host network)."""
    cmd = [
        str(cluster.bin_dir / "helm"),
        "template",
        "ome-scheduler",
        str(CHART),
        f"--namespace={namespace}",
        f"--kube-version={K8S_VERSION}",
        "--set=scheduler.metrics.bindAddress=127.0.0.1",
        f"--set=scheduler.metrics.securePort={port}",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _pid_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _root_mount_options(pid: int) -> list[str]:
    """The mount options of ``/`` as the process sees it (``/proc/<pid>/mountinfo``, field 6)."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"no / in /proc/{pid}/mountinfo")


SETUP_KINDS = {"ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


@pytest.fixture
def chart_setup(cluster: Cluster, api: Api) -> Iterator[tuple[str, int, list[dict[str, Any]]]]:
    """The chart's ServiceAccount, ConfigMap and RBAC applied in a fresh release namespace;
    yields ``(namespace, secure port, rendered documents)`` and deletes what it applied.

    The cluster-scoped objects carry the chart's names (``ome-scheduler-*``, as the scheduler's
    name must stay ``ome-scheduler`` for the demo gang): an installed release of the chart on the
    same cluster would lose them."""
    namespace, port = unique("ome-image"), free_ports(1)[0]
    docs = _render_chart(cluster, namespace, port)
    setup = [d for d in docs if d["kind"] in SETUP_KINDS]
    api.create_namespace(namespace)
    try:
        cluster.apply(yaml.safe_dump_all(setup))
        yield namespace, port, docs
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=yaml.safe_dump_all(setup))
        api.delete_namespace(namespace)


def test_image_schedules_the_demo_gang_as_the_chart_runs_it(
    built: Built, cluster: Cluster, api: Api, chart_setup: tuple[str, int, list[dict[str, Any]]], tmp_path: Path
) -> None:
    namespace, port, docs = chart_setup
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    # What the kubelet enforces for this pod, and what the runtime below therefore applies.
    assert pod["securityContext"]["runAsNonRoot"] is True and built.config.uid_gid()[0] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}

    # Volumes: the chart's ConfigMap and the ServiceAccount token, read-only as the kubelet mounts them.
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    binds: dict[Path, str] = {}
    for vm in container["volumeMounts"]:
        cm = configmaps[volumes[vm["name"]]["configMap"]["name"]]
        src = tmp_path / "volumes" / vm["name"]
        src.mkdir(parents=True)
        for key, text in cm["data"].items():
            (src / key).write_text(text)
        assert vm.get("readOnly") is True
        binds[src] = vm["mountPath"]
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(cluster.create_token(pod["serviceAccountName"], namespace))
    (sa / "ca.crt").write_bytes(cluster.ca_file.read_bytes())
    (sa / "namespace").write_text(namespace)
    for f in sa.iterdir():
        f.chmod(0o644)
    binds[sa] = SA_DIR
    api_port = urlparse(cluster.server).port
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api_port)}
    pod_name = unique("ome-scheduler-image")
    ctr = built.container(
        "scheduler", [*container["command"], *container["args"]], env=env, binds=binds, hostname=pod_name
    )

    cluster.kubectl("delete", "namespace", "gang-demo", "--ignore-not-found", "--wait=true", timeout=120)
    ctr.start()
    try:
        wait_for(
            "the scheduler in the image to take the Lease and sync its informers",
            lambda: _running(ctr) and all(s in ctr.log() for s in ("successfully acquired lease", "informers synced")),
            timeout=90,
        )
        pid = int(ctr.state()["pid"])
        status = _pid_status(pid)
        assert status["Uid"].split() == [str(UID)] * 4 and status["Gid"].split() == [str(UID)] * 4, status
        assert status["CapEff"] == status["CapBnd"] == status["CapPrm"] == "0000000000000000", status
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
        assert "ro" in _root_mount_options(pid)

        # The chart's probes, as the kubelet sends them, and a scrape with an authorised token.
        for probe in (container["livenessProbe"], container["readinessProbe"]):
            get = probe["httpGet"]
            assert get["scheme"] == "HTTPS"
            r = httpx.get(f"https://127.0.0.1:{port}{get['path']}", verify=False, timeout=10.0)
            assert (r.status_code, r.text) == (200, "ok"), (get["path"], r.status_code, r.text)
        token = api.metrics_token(name="image-scraper", namespace=namespace)
        r = httpx.get(
            f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}, verify=False, timeout=10
        )
        assert r.status_code == 200 and "leader_election_master_status" in r.text, r.status_code

        # The documented demo gang, its manifests unchanged.
        cluster.kubectl("create", "namespace", "gang-demo")
        for p in run_demo_gang(cluster, api, timeout=90):
            assert f'"Successfully bound pod to node" pod="gang-demo/{p["name"]}" node="{p["node"]}"' in ctr.log()
        lease = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/ome-scheduler")
        assert lease["spec"]["holderIdentity"].startswith(f"{pod_name}_"), lease["spec"]

        # SIGTERM to PID 1 of the container: graceful exit, the Lease released.
        assert ctr.stop(timeout=30.0) == 0, ctr.log()[-3000:]
        assert "released leader lease" in ctr.log()
        lease = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/ome-scheduler")
        assert not lease["spec"].get("holderIdentity"), lease["spec"]
    finally:
        ctr.stop(timeout=10.0)
        cluster.kubectl("delete", "deployment", "gang-demo", "-n", "gang-demo", "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", "gang-demo", "--wait=false", "--ignore-not-found", check=False)
        cluster.kubectl(
            "delete", "clusterrolebinding", f"e2e-metrics-reader-{namespace}-image-scraper", "--ignore-not-found"
        )
        log = ctr.log()
        if log:
            (cluster.log_dir / f"{pod_name}.log").write_text(log)


def _running(ctr: CrunContainer) -> bool:
    """True while the container runs; AssertionError with its log once it has exited."""
    assert ctr.proc is not None
    if ctr.proc.poll() is not None:
        raise AssertionError(f"the container exited with {ctr.proc.returncode}:\n{ctr.log()[-3000:]}")
    return True
