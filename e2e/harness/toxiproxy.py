"""Toxiproxy between ome-scheduler and kube-apiserver: a TCP proxy whose faults tests switch on.

``toxiproxy-server`` (github.com/Shopify/toxiproxy/v2, built by ``e2e/build-binaries.sh`` and
cached with the Kubernetes binaries) listens on 127.0.0.1; :meth:`Toxiproxy.proxy` opens a
proxy on a free 127.0.0.1 port towards an upstream ``host:port``, and :func:`proxied_kubeconfig`
writes a copy of a kubeconfig whose ``server`` is that port. TLS passes through untouched (a
TCP proxy): the API server's certificate names 127.0.0.1, so the client verifies it as usual.

Toxics (``latency``, ``bandwidth``, ``timeout``, ``reset_peer``, ...) are added and removed
through toxiproxy's HTTP API (``POST /proxies/{proxy}/toxics``, ``DELETE
/proxies/{proxy}/toxics/{toxic}``). What each does to the scheduler's connections:

* ``timeout`` with ``timeout: 0`` is a blackhole: the proxy keeps every connection open and
  drops every byte in the toxic's direction (``downstream``: server to client; ``upstream``:
  client to server). Removing it closes the connections it touched, as a broken path would.
* ``reset_peer`` closes connections with an RST ``timeout`` ms after data arrives; with a
  ``toxicity`` below 1 only that share of connections (chosen at random, per connection).
* ``latency`` delays data by ``latency`` ± ``jitter`` ms; ``bandwidth`` caps it at ``rate`` KB/s.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from e2e.harness.processes import ClusterError, free_ports, tail_lines

BINARY = "toxiproxy-server"


class Toxiproxy:
    """One ``toxiproxy-server`` process with its HTTP API on 127.0.0.1 (stopped by :meth:`stop`)."""

    def __init__(self, bin_dir: Path, log_file: Path) -> None:
        exe = bin_dir / BINARY
        if not exe.exists():
            raise ClusterError(f"{exe} is missing: run e2e/build-binaries.sh (it builds toxiproxy-server)")
        self.port = free_ports(1)[0]
        self.log_file = log_file
        with log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(exe), "-host=127.0.0.1", f"-port={self.port}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10.0)
        deadline = time.monotonic() + 15.0
        while True:
            try:
                if self.http.get("/version").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ClusterError(f"toxiproxy-server did not start:\n{tail_lines(log_file)}")
            time.sleep(0.1)

    def proxy(self, name: str, upstream: str) -> int:
        """Create proxy ``name`` from a free 127.0.0.1 port to ``upstream`` (``host:port``); returns the port."""
        port = free_ports(1)[0]
        r = self.http.post("/proxies", json={"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream})
        r.raise_for_status()
        return port

    def add_toxic(
        self,
        proxy: str,
        name: str,
        kind: str,
        attributes: Mapping[str, Any],
        *,
        stream: str = "downstream",
        toxicity: float = 1.0,
    ) -> None:
        """Add toxic ``name`` of type ``kind`` (``timeout``, ``latency``...) to one direction of ``proxy``."""
        body = {"name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": dict(attributes)}
        self.http.post(f"/proxies/{proxy}/toxics", json=body).raise_for_status()

    def remove_toxic(self, proxy: str, name: str) -> None:
        """Remove toxic ``name`` from ``proxy`` (connections a ``timeout`` toxic held are closed)."""
        r = self.http.delete(f"/proxies/{proxy}/toxics/{name}")
        if r.status_code != 404:
            r.raise_for_status()

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        """The toxics ``proxy`` has now."""
        r = self.http.get(f"/proxies/{proxy}/toxics")
        r.raise_for_status()
        return list(r.json())

    def blackhole(self, proxy: str, stream: str = "both") -> list[str]:
        """Drop every byte in ``stream`` (``upstream``, ``downstream`` or ``both``); returns the toxic names."""
        names = []
        for direction in ("upstream", "downstream") if stream == "both" else (stream,):
            name = f"blackhole-{direction}"
            self.add_toxic(proxy, name, "timeout", {"timeout": 0}, stream=direction)
            names.append(name)
        return names

    def reset(self) -> None:
        """Remove every toxic of every proxy (``POST /reset``)."""
        self.http.post("/reset").raise_for_status()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s)."""
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def proxied_kubeconfig(source: Path, dest: Path, server: str) -> Path:
    """Copy kubeconfig ``source`` to ``dest`` with every cluster's ``server`` set to ``server``."""
    cfg = yaml.safe_load(source.read_text())
    for c in cfg.get("clusters", []):
        c["cluster"]["server"] = server
    dest.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dest
