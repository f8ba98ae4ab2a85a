"""Why no API client could be built: one line naming the flag or file at fault.

``KubeClient.connect`` loads credentials with kr8s (kubeconfig, ``KUBECONFIG``,
``~/.kube/config``, in-cluster service account); when that fails, kr8s' exception rarely
says which source it tried. This module reads the same sources to tell the user.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def default_kubeconfig() -> str:
    """The kubeconfig path(s) used without ``--kubeconfig``: ``KUBECONFIG`` (``:``-separated),
    else ``$HOME/.kube/config``.

    Mirrors client-go's ``clientcmd.RecommendedHomeFile`` (``k8s.io/client-go/tools/clientcmd/loader.go``):
    with no home directory (a container user missing from ``/etc/passwd`` and no ``HOME``) the
    path is ``.kube/config`` relative to the working directory, which normally does not exist, so
    the in-cluster service account is used; kr8s would raise ``RuntimeError`` expanding ``~``.
    """
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return env
    home = os.path.expanduser("~")
    return os.path.join("" if home.startswith("~") else home, ".kube", "config")


def credentials_error(kubeconfig: str | None, master: str | None, exc: BaseException) -> str:
    """One line saying why no API client could be built, naming the flag or file at fault."""
    source = "--kubeconfig" if kubeconfig else "KUBECONFIG"
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    # With --master and no kubeconfig no file is involved, so only kr8s' error is reported;
    # otherwise fall back as kr8s does: ~/.kube/config, then the in-cluster service account.
    if not path and not master:
        default = os.path.expanduser("~/.kube/config")
        if os.path.exists(default):
            path, source = default, "~/.kube/config"
        elif not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return (
                "no credentials: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, "
                "or run in a pod with a service account"
            )
    if path:
        # KUBECONFIG may list several files (``:``-separated, merged as kubectl does): name the
        # first missing or malformed one.
        for p in path.split(os.pathsep):
            if p and not os.path.isfile(p):
                return f"cannot read kubeconfig {p} ({source}): no such file"
            try:
                doc = yaml.safe_load(Path(p).read_text(encoding="utf-8")) if p else {}
            except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as err:
                return f"cannot read kubeconfig {p} ({source}): {err}"
            if p and not (isinstance(doc, dict) and isinstance(doc.get("clusters"), list)):
                return f"{p} ({source}) is not a kubeconfig: it needs clusters, users and contexts lists"
        return f"cannot load credentials from kubeconfig {path} ({source}): {type(exc).__name__}: {exc}"
    return f"cannot load credentials: {type(exc).__name__}: {exc}"
