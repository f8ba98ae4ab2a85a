"""An HTTP front for kube-apiserver that loses the answers of chosen Bindings (issue 12, item 4).

Toxiproxy breaks whole TCP connections; it cannot lose the answer of one request. This
interposer is an HTTP reverse proxy in front of the cluster's API server: the scheduler under
test talks plain HTTP to it (``--master=http://127.0.0.1:<port>``), and it forwards every
request to the real API server over TLS with the cluster's admin client certificate,
streaming the answers (watches included) back unchanged. For the pods named with
:meth:`Interposer.lose_answer`, the first Binding POST is forwarded, applied by the API server,
and then its answer is lost on the way back, in one of two ways:

* ``"504"``: answered ``504 Gateway Timeout`` instead, as a load balancer whose upstream
  timeout fired after the request went through; the client retries and the real API server
  answers the retry ``409 Conflict`` (the pod is already assigned);
* ``"cut"``: the connection is closed without an answer, a transport error.

Everything else is forwarded untouched. It runs its own asyncio loop in a thread; every
Binding it saw is recorded with the API server's real status (:attr:`Interposer.bindings`).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from e2e.harness.cluster import Cluster
from e2e.harness.processes import free_ports

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}
"""Headers that describe one connection, not the request or answer: never forwarded."""


@dataclass
class SeenBinding:
    """One Binding POST that went through: pod ``ns/name``, the API server's status, what the
    scheduler got instead (``"504"``, ``"cut"`` or ``""`` for the real answer)."""

    pod: str
    status: int
    lost: str


class Interposer:
    """The reverse proxy (see the module docstring); a context manager that starts and stops it."""

    def __init__(self, cluster: Cluster) -> None:
        self.upstream = cluster.server
        pki = Path(cluster.pki_dir)
        self.ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.bindings: list[SeenBinding] = []
        self._lose: dict[str, str] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="interposer", daemon=True)

    def lose_answer(self, ns: str, name: str, how: str) -> None:
        """Lose the answer of the next Binding of pod ``ns/name``: ``how`` is ``"504"`` or ``"cut"``."""
        assert how in ("504", "cut"), how
        with self._lock:
            self._lose[f"{ns}/{name}"] = how

    def seen(self, ns: str, name: str) -> list[SeenBinding]:
        """The Bindings of pod ``ns/name`` that went through, in order."""
        with self._lock:
            return [b for b in self.bindings if b.pod == f"{ns}/{name}"]

    def __enter__(self) -> Interposer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the interposer did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        connector = aiohttp.TCPConnector(ssl=self.ssl, limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            self._session = session
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", self._forward)
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", self.port)
            await site.start()
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()

    def _binding_pod(self, request: web.Request) -> str | None:
        """``ns/name`` when ``request`` is a Binding POST (``/api/v1/namespaces/NS/pods/NAME/binding``)."""
        parts = request.path.strip("/").split("/")
        if request.method == "POST" and len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"]:
            if parts[4] == "pods" and parts[6] == "binding":
                return f"{parts[3]}/{parts[5]}"
        return None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        pod = self._binding_pod(request)
        async with self._session.request(
            request.method,
            URL(self.upstream + request.raw_path, encoded=True),
            data=body or None,
            headers=headers,
            allow_redirects=False,
        ) as up:
            if pod is not None:
                data = await up.read()
                with self._lock:
                    how = self._lose.pop(pod, "") if up.status < 300 else ""
                    self.bindings.append(SeenBinding(pod, up.status, how))
                if how == "cut":
                    assert request.transport is not None
                    request.transport.abort()  # applied by the API server; the answer never leaves
                    raise asyncio.CancelledError
                if how == "504":
                    status: dict[str, Any] = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "message": "the interposer lost the answer (test)",
                        "reason": "Timeout",
                        "code": 504,
                    }
                    return web.json_response(status, status=504)
                return web.Response(body=data, status=up.status, headers=_answer_headers(up))
            resp = web.StreamResponse(status=up.status, headers=_answer_headers(up))
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp


def _answer_headers(up: aiohttp.ClientResponse) -> dict[str, str]:
    """The upstream answer's headers worth passing on."""
    return {k: v for k, v in up.headers.items() if k.lower() not in HOP_HEADERS}
