"""Credentials without a home directory: a container user missing from /etc/passwd."""

from __future__ import annotations

import asyncio
import pwd
from pathlib import Path

import pytest

from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.credentials import default_kubeconfig


def _no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", missing)


def test_default_kubeconfig_follows_kubeconfig_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", "/a:/b")
    assert default_kubeconfig() == "/a:/b"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_kubeconfig() == str(tmp_path / ".kube" / "config")
    _no_home(monkeypatch)
    assert default_kubeconfig() == ".kube/config"  # client-go's RecommendedHomeFile with no home


def test_no_home_directory_is_not_a_crash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without a home, kr8s alone raised RuntimeError('Could not determine home directory.')
    before trying the service account; now the kubeconfig is simply absent."""
    _no_home(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ValueError, match="Unable to find valid credentials"):
        asyncio.run(KubeClient.connect())
    kc = tmp_path / ".kube" / "config"
    kc.parent.mkdir()
    kc.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t0k}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )

    async def connect() -> str:
        client = await KubeClient.connect()
        await client.close()
        return client.server

    assert asyncio.run(connect()) == "https://127.0.0.1:6443"
