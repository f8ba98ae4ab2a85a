"""The documented demo gang on a local real control plane (``make demo``).

1. Start (or reuse) the local Kubernetes 1.35.4 control plane with four fake GPU nodes in two
   ``nvidia.com/gpu.clique`` domains (``python -m e2e.harness up``).
2. Start ome-scheduler with the chart's default configuration (``examples/demo/config.yaml``).
3. Create the ``gang-demo`` namespace and apply the user guide's PodGroup and Deployment
   (``examples/demo/*.yaml``) unchanged.
4. Print the PodGroup (``kubectl get podgroups``: PHASE ``Running``, RUNNING ``2``, kept by the
   scheduler), the placement as Step 3 of the guide does, and the pods' events.

The cluster and the scheduler keep running afterwards; ``make demo-stop`` stops the scheduler,
``make down`` stops both.
"""

from __future__ import annotations

import sys
import time

from e2e.harness.cluster import Cluster
from e2e.harness.paths import REPO


def main() -> int:
    c = Cluster.attach_if_running()
    if c is None:
        print("==> starting the local control plane (kube-apiserver, etcd, KCM, kube-scheduler, kwok)")
        c = Cluster()
        c.up()
    print(f"==> control plane at {c.server}; KUBECONFIG={c.kubeconfig}")
    argv = [
        sys.executable,
        "-m",
        "ome_scheduler",
        f"--config={REPO / 'examples/demo/config.yaml'}",
        f"--kubeconfig={c.kubeconfig}",
        "--v=4",
        "--secure-port=0",
        "--leader-elect=false",
    ]
    rec = c.start_process("ome-scheduler", argv)
    print(f"==> ome-scheduler started (pid {rec.pid}), log: {rec.log}")
    deadline = time.monotonic() + 60
    while "informers synced" not in open(rec.log, errors="replace").read():
        if time.monotonic() > deadline or not rec.alive():
            print(open(rec.log, errors="replace").read()[-3000:])
            print("ome-scheduler did not start", file=sys.stderr)
            return 1
        time.sleep(0.2)
    c.kubectl("delete", "namespace", "gang-demo", "--ignore-not-found", "--wait=true", timeout=120)
    for cmd in (
        ["create", "namespace", "gang-demo"],
        ["apply", "-f", str(REPO / "examples/demo/podgroup.yaml")],
        ["apply", "-f", str(REPO / "examples/demo/gang.yaml")],
    ):
        print(f"$ kubectl {' '.join(cmd)}")
        print(c.kubectl(*cmd).stdout.strip())
    deadline = time.monotonic() + 60
    while True:
        out = c.kubectl(
            "get", "pods", "-n", "gang-demo", "-l", "app=gang-demo", "-o", "jsonpath={.items[*].status.phase}"
        ).stdout.split()
        if len(out) == 2 and all(p == "Running" for p in out):
            break
        if time.monotonic() > deadline:
            print("the demo gang did not reach Running within 60 s", file=sys.stderr)
            break
        time.sleep(0.5)
    deadline = time.monotonic() + 15  # the leader writes PodGroup status about a second after a change
    while time.monotonic() < deadline:
        phase = c.kubectl("get", "podgroup", "gang-demo", "-n", "gang-demo", "-o", "jsonpath={.status.phase}").stdout
        if phase == "Running":
            break
        time.sleep(0.5)
    for cmd in (
        ["get", "podgroups", "-n", "gang-demo"],
        [
            "get",
            "pods",
            "-n",
            "gang-demo",
            "-l",
            "app=gang-demo",
            "-o",
            "custom-columns=NAME:.metadata.name,STATUS:.status.phase,NODE:.spec.nodeName",
        ],
        ["get", "nodes", "-L", "nvidia.com/gpu.clique"],
    ):
        print(f"\n$ kubectl {' '.join(cmd)}")
        print(c.kubectl(*cmd).stdout.rstrip())
    print("\n$ kubectl get events -n gang-demo --field-selector involvedObject.kind=Pod")
    print(
        c.kubectl(
            "get",
            "events",
            "-n",
            "gang-demo",
            "--field-selector",
            "involvedObject.kind=Pod",
            "--sort-by=.lastTimestamp",
        ).stdout.rstrip()
    )
    print(f"\nThe cluster and ome-scheduler keep running. Try: export KUBECONFIG={c.kubeconfig}")
    print("  kubectl describe pods -n gang-demo -l app=gang-demo")
    print("Stop only the scheduler with: make demo-stop; stop everything with: make down")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
