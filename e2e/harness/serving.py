"""The serving clients the end-to-end tests run: the LeaderWorkerSet controller and OME's controller-manager.

An OME InferenceService whose runtime has a leader and workers becomes a LeaderWorkerSet
(``leaderworkerset.x-k8s.io/v1``), whose controller makes the pods of each group: a leader
StatefulSet, then one worker StatefulSet per group. Neither creates a PodGroup. Both run as local
processes of the cluster (``Cluster.start_process``: ``down`` stops them, logs in
``logs/<name>.log``) with the admin kubeconfig, as they would run outside a cluster:

* :class:`LWSController`: ``sigs.k8s.io/lws`` v0.5.1 ``cmd`` (wrapper module ``e2e/tools/lws``,
  binary ``lws-controller``). Its pod webhook writes the group and worker labels its controllers
  rely on, and its controllers start only once its certificate rotator (cert-controller) is
  content, so the API server must reach the webhook: see the class.
* :class:`OMEManager`: OME's ``cmd/manager`` built from the source snapshot
  ``e2e/tools/ome/ome-17b77ed.tgz`` (binary ``ome-manager``); its CRDs are read from the same
  snapshot (``config/crd/minimal/``). It probes for the LeaderWorkerSet CRD once, at start: start
  the LWS controller (which installs it) first.

Both binaries come from ``e2e/build-binaries.sh``; ``docs/ome-and-lws.md`` tells the whole story.
"""

from __future__ import annotations

import base64
import copy
import errno
import json
import os
import socket
import tarfile
from pathlib import Path
from typing import Any, Final, Self

import httpx
import yaml

from e2e.harness.operators import WEBHOOK_CERT_DIR, ControllerProcess, module_dir
from e2e.harness.paths import TOOLS_DIR
from e2e.harness.pki import webhook_pki
from e2e.harness.processes import ClusterError

LWS_CRD: Final = "leaderworkersets.leaderworkerset.x-k8s.io"
LWS_API: Final = "/apis/leaderworkerset.x-k8s.io/v1"
OME_API: Final = "/apis/ome.io/v1beta1"
OME_SNAPSHOT: Final = TOOLS_DIR / "ome" / "ome-17b77ed.tgz"

#: What the manager reads from ConfigMap ``inferenceservice-config``: plain Deployments and
#: LeaderWorkerSets (no Knative), and no Ingress nor Istio virtual host (the two gateway names
#: are required by its parser, and unused).
OME_CONFIG: Final = {
    "deploy": json.dumps({"defaultDeploymentMode": "RawDeployment"}),
    "ingress": json.dumps(
        {
            "ingressGateway": "ome/unused-gateway",
            "ingressService": "unused.ome.svc.cluster.local",
            "disableIngressCreation": True,
            "disableIstioVirtualHost": True,
        }
    ),
}


def port_in_use(port: int) -> bool:
    """Whether a TCP listener already holds ``port`` on every interface (as a webhook server binds it).

    With ``SO_REUSEADDR``, as Go listens: connections of a stopped server lingering in TIME_WAIT
    do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return True
            raise
    return False


#: The parent of the fixed serving-certificate directory of the LWS controller's certificate
#: rotator: the training-operator's (``operators.WEBHOOK_CERT_DIR``), a constant of both.
WEBHOOK_DIR: Final = WEBHOOK_CERT_DIR.parent


def private_webhook_dir(own: Path, argv: list[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own in which directory ``own`` is mounted on
    :data:`WEBHOOK_DIR` (created as an empty mount point when missing; the rest of ``/tmp`` stays
    shared, cluster state directories included).

    As root this is ``unshare --mount``; otherwise a user namespace maps the caller to root in it
    (``unshare --user --map-root-user``, where unprivileged user namespaces are allowed). unshare
    and sh exec the command: it keeps the PID the harness records.
    """
    ns = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        ns = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]
    script = 'mkdir -p "$1" && mount --bind "$0" "$1" && shift && exec "$@"'
    return [*ns, "sh", "-c", script, str(own), str(WEBHOOK_DIR), *argv]


def lws_webhook_configurations(src: Path, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The webhook configurations of the LWS module's ``config/webhook`` directory ``src`` as its
    kustomizations render them, each webhook calling ``<base_url><path>`` and trusting ``ca_pem``.

    ``manifests.yaml`` holds a Mutating- and a ValidatingWebhookConfiguration; the directory's
    ``mutating-patch.yaml`` and ``validating-patch.yaml`` (JSON patches) replace their pod webhooks
    with ones limited by an objectSelector on ``leaderworkerset.sigs.k8s.io/name``;
    ``config/default`` prefixes the names with ``lws-``. The service reference of every
    ``clientConfig`` becomes a URL. ClusterError for a patch other than a webhook's replacement.
    """
    patches = {
        "MutatingWebhookConfiguration": "mutating-patch.yaml",
        "ValidatingWebhookConfiguration": "validating-patch.yaml",
    }
    out = []
    for doc in yaml.safe_load_all((src / "manifests.yaml").read_text()):
        if not doc:
            continue
        cfg = copy.deepcopy(doc)
        for op in yaml.safe_load((src / patches[cfg["kind"]]).read_text()):
            parts = str(op["path"]).strip("/").split("/")
            if op["op"] != "replace" or len(parts) != 2 or parts[0] != "webhooks":
                raise ClusterError(f"unexpected patch in {src}: {op}")
            cfg["webhooks"][int(parts[1])] = op["value"]
        cfg["metadata"] = {"name": f"lws-{cfg['metadata']['name']}"}
        for w in cfg["webhooks"]:
            path = w["clientConfig"]["service"]["path"]
            w["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
        out.append(cfg)
    return out


class LWSController(ControllerProcess):
    """The LeaderWorkerSet controller manager (``sigs.k8s.io/lws`` v0.5.1), webhooks served on loopback.

    Its certificate rotator (``pkg/cert``) keeps the Secret ``lws-system/lws-webhook-server-cert``
    (``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key``) valid for ``lws-webhook-service.lws-system.svc``,
    injects the CA into the webhook configurations ``lws-{mutating,validating}-webhook-configuration``
    and waits for ``tls.crt`` in the fixed directory ``/tmp/k8s-webhook-server/serving-certs``.
    ``prepare`` gives it all of that up front, so that it keeps them rather than making its own:

    * a CA (RSA, PKCS#1, SAN ``DNS:lws-ca``) and a serving certificate for that service name and
      ``IP:127.0.0.1`` (:func:`e2e.harness.pki.webhook_pki`), in the Secret and in
      ``<state_dir>/lws-controller/webhook/serving-certs``;
    * the webhook configurations of the module's ``config/webhook`` (its kustomize patches applied:
      the pod webhooks only see pods labelled ``leaderworkerset.sigs.k8s.io/name``) with
      ``clientConfig.url: https://127.0.0.1:9443/<path>`` and the CA as ``caBundle``.

    The process runs in a mount namespace of its own with ``<state_dir>/lws-controller/webhook``
    on ``/tmp/k8s-webhook-server`` (:func:`private_webhook_dir`): the training-operator uses the
    same fixed directory. The
    webhook server always listens on port 9443 (no flag changes it), so one LWS controller runs
    per machine; ``prepare`` fails naming the port when it is taken. Leader election, metrics and
    health probes are off. ``stop`` deletes the webhook configurations, whose failure policy
    would otherwise refuse every LeaderWorkerSet and LWS pod.
    """

    name = "lws-controller"
    binary = "lws-controller"
    tool = "lws"
    module = "sigs.k8s.io/lws"
    crd_path = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
    crd_name = LWS_CRD
    ready_line = 'Starting workers\t{"controller": "leaderworkerset"'
    namespace = "lws-system"
    secret = "lws-webhook-server-cert"
    service_dns = "lws-webhook-service.lws-system.svc"
    port = 9443
    webhook_configurations = ("lws-mutating-webhook-configuration", "lws-validating-webhook-configuration")

    @property
    def webhook_dir(self) -> Path:
        """What the controller sees as ``/tmp/k8s-webhook-server``."""
        return self.cluster.state_dir / self.name / "webhook"

    @property
    def cert_dir(self) -> Path:
        """The serving certificate's directory as the controller reads it, seen from outside."""
        return self.webhook_dir / "serving-certs"

    def argv(self) -> list[str]:
        kc = self.cluster.kubeconfig
        return private_webhook_dir(
            self.webhook_dir,
            [
                "env",
                f"KUBECONFIG={kc}",
                str(self.binary_path()),
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--kube-api-qps=50",
                "--kube-api-burst=100",
            ],
        )

    def webhooks(self, ca_pem: bytes) -> list[dict[str, Any]]:
        """The module's webhook configurations, served on loopback (:func:`lws_webhook_configurations`)."""
        src = module_dir(self.tool, self.module) / "config" / "webhook"
        out = lws_webhook_configurations(src, f"https://127.0.0.1:{self.port}", ca_pem)
        names = tuple(sorted(c["metadata"]["name"] for c in out))
        if names != self.webhook_configurations:
            raise ClusterError(f"{src} has webhook configurations {names}, expected {self.webhook_configurations}")
        return out

    def prepare(self) -> None:
        if port_in_use(self.port):
            raise ClusterError(
                f"port {self.port} is in use: the LWS controller's webhook server always listens there "
                "(one per machine; is another one running?)"
            )
        super().prepare()
        certs = webhook_pki("lws-ca", "lws", [self.service_dns], ["127.0.0.1"])
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        for k in ("tls.crt", "tls.key"):
            (self.cert_dir / k).write_bytes(certs[k])
            (self.cert_dir / k).chmod(0o600)
        docs: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.secret, "namespace": self.namespace},
                "data": {k: base64.b64encode(v).decode() for k, v in certs.items()},
            },
            *self.webhooks(certs["ca.crt"]),
        ]
        # Replaced, not merged: a Secret left by an earlier run holds another CA.
        self.cluster.kubectl("delete", "secret", self.secret, "-n", self.namespace, "--ignore-not-found")
        self.cluster.apply("\n---\n".join(json.dumps(d) for d in docs))

    def start(self) -> Self:
        """Start as every controller does, then wait until the webhook server serves too."""
        super().start()
        self.wait_log("Serving webhook server")
        return self

    def stop(self) -> None:
        super().stop()
        for name in self.webhook_configurations:
            kind = "mutatingwebhookconfiguration" if "mutating" in name else "validatingwebhookconfiguration"
            self.cluster.kubectl("delete", kind, name, "--ignore-not-found")


class OMEManager(ControllerProcess):
    """OME's controller-manager (commit 17b77ed, after v0.1.5) in namespace ``ome``.

    ``prepare`` requires the LeaderWorkerSet CRD (ClusterError otherwise: the manager would not
    reconcile multi-node engines), installs the CRDs of the snapshot's ``config/crd/minimal/``,
    and creates namespace ``ome`` with ConfigMap ``inferenceservice-config`` (:data:`OME_CONFIG`),
    without which the manager exits. No webhooks, leader election, metrics or health probes.
    """

    name = "ome-manager"
    binary = "ome-manager"
    ready_line = '"msg":"Starting workers","controller":"inferenceservice"'
    namespace = "ome"

    def crd_files(self) -> list[Path]:
        """The snapshot's minimal CRDs, written to ``<state_dir>/ome-manager/crds/``."""
        out_dir = self.cluster.state_dir / self.name / "crds"
        out_dir.mkdir(parents=True, exist_ok=True)
        out = []
        with tarfile.open(OME_SNAPSHOT) as tar:
            for m in tar.getmembers():
                p = Path(m.name)
                if m.isfile() and p.parent.as_posix().endswith("config/crd/minimal") and p.name.startswith("ome.io_"):
                    f = tar.extractfile(m)
                    assert f is not None
                    (out_dir / p.name).write_bytes(f.read())
                    out.append(out_dir / p.name)
        if not out:
            raise ClusterError(f"{OME_SNAPSHOT} holds no config/crd/minimal/ome.io_*.yaml")
        return sorted(out)

    def argv(self) -> list[str]:
        kc = self.cluster.kubeconfig
        return [
            "env",
            f"KUBECONFIG={kc}",
            f"POD_NAMESPACE={self.namespace}",
            str(self.binary_path()),
            f"--kubeconfig={kc}",
            "--metrics-bind-address=0",
            "--health-probe-addr=0",
        ]

    def prepare(self) -> None:
        try:
            self.cluster.api_json(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{LWS_CRD}")
        except httpx.HTTPStatusError as e:
            raise ClusterError(
                f"{self.name} needs the CRD {LWS_CRD} before it starts (start LWSController): {e}"
            ) from None
        for f in self.crd_files():
            self.cluster.install_crd(f, str(yaml.safe_load(f.read_text())["metadata"]["name"]))
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "inferenceservice-config", "namespace": self.namespace},
                "data": dict(OME_CONFIG),
            },
        ]
        self.cluster.apply("\n---\n".join(json.dumps(d) for d in docs))
