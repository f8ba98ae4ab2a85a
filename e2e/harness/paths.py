"""Where the harness finds things in the checkout: the repository root, e2e's data files, the chart.

Only paths, computed from this file's place (``e2e/harness/`` below the root); nothing here
reads a file. The control plane's data stays in ``e2e/`` beside the tests that use it: the
PodGroup CRD (``e2e/crds``), the demo nodes (``e2e/nodes/demo.yaml``), kwok's Stages
(``e2e/kwok-stages.yaml``), the audit policy (``e2e/audit-policy.yaml``), the binary build
script (``e2e/build-binaries.sh``) and its Go wrapper modules (``e2e/tools``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
"""The repository root (the checkout)."""
E2E_DIR: Final = REPO / "e2e"
DEFAULT_STATE_DIR: Final = REPO / ".local-cluster"
"""A cluster's state directory when neither ``--dir`` nor ``OME_CLUSTER_DIR`` names one."""
CRD_FILE: Final = E2E_DIR / "crds" / "scheduling.x-k8s.io_podgroups.yaml"
DEMO_NODES_FILE: Final = E2E_DIR / "nodes" / "demo.yaml"
KWOK_STAGES_FILE: Final = E2E_DIR / "kwok-stages.yaml"
AUDIT_POLICY_FILE: Final = E2E_DIR / "audit-policy.yaml"
"""Every request at Metadata level (``e2e/harness/audit.py`` reads the log it produces)."""
BUILD_SCRIPT: Final = E2E_DIR / "build-binaries.sh"
TOOLS_DIR: Final = E2E_DIR / "tools"
"""The Go wrapper modules ``e2e/build-binaries.sh`` builds the binaries from."""
CHART: Final = REPO / "helm" / "ome-scheduler"
DEMO_DIR: Final = REPO / "examples" / "demo"
"""The user guide's demo: ``config.yaml``, ``podgroup.yaml``, ``gang.yaml``."""
