"""The chart's e2e installs: the cached helm binary, the release name and its namespace.

Tests install the chart (``paths.CHART``, ``helm/ome-scheduler``) as release :data:`RELEASE` in
namespace :data:`RELEASE_NS` (as the user guide does) with :func:`helm`, and leave nothing
behind (:func:`remove_release`).
"""

from __future__ import annotations

import subprocess

from e2e.harness.cluster import Cluster

RELEASE = "ome-scheduler"
"""The release name of the chart's e2e installs (and so its ServiceAccount, Lease and objects)."""
RELEASE_NS = "ome"
"""The namespace of the chart's e2e installs, as in the user guide."""


def helm(cluster: Cluster, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run the cached helm with the admin kubeconfig; the caller checks ``returncode``."""
    cmd = [str(cluster.bin_dir / "helm"), f"--kubeconfig={cluster.kubeconfig}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def remove_release(cluster: Cluster) -> None:
    """Uninstall the chart's e2e release (if any) and delete its namespace, waiting for both."""
    helm(cluster, "uninstall", RELEASE, "--namespace", RELEASE_NS, "--ignore-not-found", "--wait", "--timeout", "120s")
    cluster.kubectl("delete", "namespace", RELEASE_NS, "--ignore-not-found", "--wait=true", timeout=120)
