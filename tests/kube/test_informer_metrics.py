"""The informer counts its relists and watch restarts by resource
(``ome_scheduler_informer_relists_total``, ``ome_scheduler_informer_watch_restarts_total``).

A small real HTTP server plays the API server's list and watch: the first watch ends at once
(a server timeout), the second answers 410 Gone (a compacted resourceVersion), the third stays
open.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from ome_scheduler.api.core import Pod
from ome_scheduler.kube.client import KubeClient
from ome_scheduler.kube.informer import Informer
from ome_scheduler.metrics import Metrics


def sample(m: Metrics, name: str) -> float:
    return m.registry.get_sample_value(name, {"resource": "pods"}) or 0.0


def test_relists_and_watch_restarts_are_counted_by_resource() -> None:
    async def main() -> None:
        seen: list[str] = []
        done = asyncio.Event()

        async def pods(request: web.Request) -> web.StreamResponse:
            if request.query.get("watch") != "true":
                seen.append("list")
                return web.json_response({"metadata": {"resourceVersion": "10"}, "items": []})
            seen.append("watch")
            watches = seen.count("watch")
            resp = web.StreamResponse()
            await resp.prepare(request)
            if watches == 2:
                gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
                await resp.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            elif watches >= 3:
                await done.wait()
            return resp  # the first watch ends at once, as after the server's timeoutSeconds

        app = web.Application()
        app.router.add_get("/api/v1/pods", pods)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        client = KubeClient(f"http://127.0.0.1:{port}", False, "t", qps=0, burst=1)
        m = Metrics()
        inf: Informer[Pod] = Informer(client, "/api/v1/pods", Pod, name="pods", metrics=m)
        task = asyncio.create_task(inf.run())
        try:
            for _ in range(400):
                if seen.count("watch") >= 3:
                    break
                await asyncio.sleep(0.025)
            assert seen == ["list", "watch", "watch", "list", "watch"], seen
            assert sample(m, "ome_scheduler_informer_watch_restarts_total") == 1  # the watch that ended
            assert sample(m, "ome_scheduler_informer_relists_total") == 1  # the 410 (the first list is no relist)
        finally:
            done.set()
            task.cancel()
            await client.close()
            await runner.cleanup()

    asyncio.run(main())
