"""The job operators whose PodGroups the end-to-end tests schedule: mpi-operator and the training-operator.

Users rarely write PodGroups: their job operators create them. Both operators here create
``scheduling.x-k8s.io/v1alpha1`` PodGroups (``minMember``, ``scheduleTimeoutSeconds``,
``minResources``) named after the job, label every pod of the job with
``scheduling.x-k8s.io/pod-group: <job>`` and set its ``schedulerName`` when told which gang
scheduler to use:

* ``github.com/kubeflow/mpi-operator`` (``cmd/mpi-operator``, MPIJob ``kubeflow.org/v2beta1``):
  ``--gang-scheduling=ome-scheduler`` (any name but ``volcano`` means "scheduler-plugins
  PodGroups, and this schedulerName");
* ``github.com/kubeflow/training-operator`` (``cmd/training-operator.v1``, PyTorchJob
  ``kubeflow.org/v1``): ``--gang-scheduler-name=ome-scheduler`` (the same rule).

Each runs as a local process of the cluster (``Cluster.start_process``, so ``down`` stops it,
log in ``logs/<name>.log``) with the admin kubeconfig, as it would run outside a cluster. The
binaries come from ``e2e/build-binaries.sh`` (wrapper modules ``e2e/tools/mpi-operator`` and
``e2e/tools/training-operator``, cached with the Kubernetes binaries). The CRDs are read from the
very module versions the binaries were built from: ``go mod download -json <module>`` in the
wrapper module names the module's directory in the Go module cache (downloading it if needed),
and the CRD is the file the module ships under ``manifests/``.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self

from e2e.harness.cluster import Cluster
from e2e.harness.paths import TOOLS_DIR
from e2e.harness.processes import ClusterError, free_ports, tail_lines
from tests.support.manifests import SCHEDULER_NAME, mpi_job, pytorch_job

#: Where the training-operator's certificate rotator expects the webhook serving certificate
#: (a constant of its ``pkg/cert``; in a cluster the Secret is mounted there).
WEBHOOK_CERT_DIR: Final = Path("/tmp/k8s-webhook-server/serving-certs")
START_TIMEOUT: Final = 90.0


def module_dir(tool: str, module: str) -> Path:
    """The Go module cache directory of ``module`` at the version ``e2e/tools/<tool>/go.mod`` requires.

    Runs ``go mod download -json <module>`` in the wrapper module (a no-op when the module is
    cached; otherwise it fetches it from the Go module proxy). Raises ClusterError when ``go``
    fails.
    """
    try:
        out = subprocess.run(
            ["go", "mod", "download", "-json", module],
            cwd=TOOLS_DIR / tool,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except FileNotFoundError as e:
        raise ClusterError(f"go is needed to find the {module} module's manifests: {e}") from None
    if out.returncode != 0:
        raise ClusterError(f"go mod download {module} (in e2e/tools/{tool}) failed: {out.stdout}{out.stderr}")
    return Path(json.loads(out.stdout)["Dir"])


@dataclass(frozen=True)
class JobKind:
    """One operator's job type as the tests use it.

    ``leader`` is the lower-case replica type of the job's single leader pod (``launcher``,
    ``master``); ``manifest(name, ns, workers, **kw)`` builds a job (``tests.support.manifests.mpi_job`` or
    ``pytorch_job``) with ``workers`` workers plus the leader, so ``workers + 1`` pods.
    """

    kind: str
    group_version: str
    plural: str
    leader: str
    manifest: Callable[..., dict[str, Any]]

    def path(self, ns: str, name: str | None = None) -> str:
        """The API path of the namespace's jobs of this kind, or of job ``name``."""
        base = f"/apis/{self.group_version}/namespaces/{ns}/{self.plural}"
        return f"{base}/{name}" if name else base


MPIJOB: Final = JobKind("MPIJob", "kubeflow.org/v2beta1", "mpijobs", "launcher", mpi_job)
PYTORCHJOB: Final = JobKind("PyTorchJob", "kubeflow.org/v1", "pytorchjobs", "master", pytorch_job)


class ControllerProcess:
    """A controller started against ``cluster`` as a local process (a job operator, or a client
    such as the LeaderWorkerSet controller in ``serving.py``).

    ``start()`` installs the CRD, prepares what the controller expects to find, starts the binary
    and waits ≤ ``START_TIMEOUT`` s for ``ready_line`` in its log (ClusterError with the log tail
    if it exits or never gets there). ``stop()`` sends SIGTERM, then SIGKILL after 20 s.
    """

    name: str = ""
    binary: str = ""
    tool: str = ""
    module: str = ""
    crd_path: str = ""  # inside the module
    crd_name: str = ""
    ready_line: str = ""

    def __init__(self, cluster: Cluster, scheduler_name: str = SCHEDULER_NAME) -> None:
        self.cluster = cluster
        self.scheduler_name = scheduler_name
        self.log_path = cluster.log_dir / f"{self.name}.log"
        self._log_offset = 0

    @property
    def crd_file(self) -> Path:
        """The CRD file as the module ships it."""
        return module_dir(self.tool, self.module) / self.crd_path

    def binary_path(self) -> Path:
        """The controller's executable in the cluster's binary directory (ClusterError when missing)."""
        b = self.cluster.bin_dir / self.binary
        if not b.exists():
            raise ClusterError(f"{b} is missing: run e2e/build-binaries.sh (it builds {self.name} too)")
        return b

    def argv(self) -> list[str]:
        """The command line."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Install the CRD (server-side: it is too big for client-side apply) and what the controller needs."""
        self.cluster.install_crd(self.crd_file, self.crd_name)

    def after_spawn(self) -> None:
        """Work the controller needs done while it starts (none by default)."""

    def log(self) -> str:
        """This run's part of the controller's log."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def alive(self) -> bool:
        """Whether the controller process this object started still runs."""
        rec = self.cluster.state.components.get(self.name) if self.cluster.state else None
        return rec is not None and rec.alive()

    def wait_log(self, needle: str, timeout: float = START_TIMEOUT) -> None:
        """Wait until ``needle`` appears in this run's log; ClusterError if the process exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log():
                return
            if not self.alive():
                raise ClusterError(f"{self.name} exited before {needle!r}:\n{tail_lines(self.log_path)}")
            time.sleep(0.2)
        raise ClusterError(f"{self.name}: no {needle!r} within {timeout:.0f} s:\n{tail_lines(self.log_path)}")

    def start(self) -> Self:
        """Install the CRD, start the controller and wait until it runs."""
        self.prepare()
        argv = self.argv()
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.cluster.start_process(self.name, argv)
        self.after_spawn()
        self.wait_log(self.ready_line)
        return self

    def stop(self) -> None:
        """Stop the controller (SIGTERM, SIGKILL after 20 s); the objects it made stay."""
        self.cluster.stop_process(self.name)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OperatorProcess(ControllerProcess):
    """A job operator started against ``cluster`` that creates PodGroups for ``scheduler_name``;
    ``job`` is the kind of job it runs."""

    job: JobKind = MPIJOB


class MPIOperator(OperatorProcess):
    """mpi-operator v0.6.0 with ``--gang-scheduling=<scheduler>``.

    It reads ``$KUBECONFIG`` over ``--kubeConfig``, so both are set. It always serves its health
    check on ``:8080`` (a constant in ``cmd/mpi-operator/app/server.go``): one per machine. Leader
    election uses the Lease ``kube-system/mpi-operator``, which ``prepare`` deletes so that a
    previous, killed run does not delay this one by the 15 s lease duration.
    """

    name = "mpi-operator"
    binary = "mpi-operator"
    job = MPIJOB
    tool = "mpi-operator"
    module = "github.com/kubeflow/mpi-operator"
    crd_path = "manifests/base/kubeflow.org_mpijobs.yaml"
    crd_name = "mpijobs.kubeflow.org"
    ready_line = "Started workers"

    def argv(self) -> list[str]:
        kc = self.cluster.kubeconfig
        return [
            "env",
            f"KUBECONFIG={kc}",
            str(self.binary_path()),
            f"--kubeConfig={kc}",
            f"--gang-scheduling={self.scheduler_name}",
            "--lock-namespace=kube-system",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
        ]

    def prepare(self) -> None:
        super().prepare()
        self.cluster.kubectl("delete", "lease", "mpi-operator", "-n", "kube-system", "--ignore-not-found")


class TrainingOperator(OperatorProcess):
    """The Kubeflow training-operator (v1) with ``--gang-scheduler-name=<scheduler>``, PyTorchJob only.

    Its validating webhook needs a serving certificate before the controllers start: its
    certificate rotator fills the Secret ``kubeflow/training-operator-webhook-cert`` and then
    waits for the files in ``WEBHOOK_CERT_DIR``, where a cluster mounts that Secret. Here
    ``after_spawn`` copies them from the Secret. The API server is not told about the webhook
    (no ValidatingWebhookConfiguration: it could not reach a local process as a Service), so
    the rotator logs ``Webhook not found`` once; jobs are not validated by it.
    """

    name = "training-operator"
    binary = "training-operator.v1"
    job = PYTORCHJOB
    tool = "training-operator"
    module = "github.com/kubeflow/training-operator"
    crd_path = "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
    crd_name = "pytorchjobs.kubeflow.org"
    ready_line = 'Starting workers\t{"controller": "pytorchjob-controller"'
    namespace = "kubeflow"
    secret = "training-operator-webhook-cert"

    def argv(self) -> list[str]:
        return [
            "env",
            f"MY_POD_NAMESPACE={self.namespace}",
            str(self.binary_path()),
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--gang-scheduler-name={self.scheduler_name}",
            "--enable-scheme=pytorchjob",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            f"--webhook-server-port={free_ports(1)[0]}",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
        ]

    def prepare(self) -> None:
        super().prepare()
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": self.secret, "namespace": self.namespace}},
        ]
        self.cluster.apply("\n---\n".join(json.dumps(d) for d in docs))

    def after_spawn(self) -> None:
        def secret_data() -> dict[str, str]:
            s = self.cluster.kubectl_json("get", "secret", self.secret, "-n", self.namespace)
            return dict(s.get("data") or {})

        deadline = time.monotonic() + START_TIMEOUT
        data = secret_data()
        while not ("tls.crt" in data and "tls.key" in data):
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.name} did not fill Secret {self.secret}:\n{tail_lines(self.log_path)}")
            time.sleep(0.5)
            data = secret_data()
        WEBHOOK_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for k in ("tls.crt", "tls.key"):
            (WEBHOOK_CERT_DIR / k).write_bytes(base64.b64decode(data[k]))
