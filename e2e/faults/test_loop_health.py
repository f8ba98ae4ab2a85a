"""Loop health (issue 12, item 7): a stalled event loop is visible, and so are informer restarts.

One scheduler without leader election (its watchdog is not armed: a stall does not end it).
Its event loop is blocked for 5 s through the test-only hook (``OME_SCHEDULER_TEST_STALL_SIGNAL``);
a ``/livez`` probe sent during the stall is answered only after it, with 500; the lag histogram
holds the stall; ``/livez`` recovers 10 s later. The informer counters are exported (their
counting is unit-tested in ``tests/kube/test_informer_metrics.py``: a watch restart needs the
API server to end a watch, which takes it 5 to 10 minutes here).
"""

from __future__ import annotations

import signal
import threading
import time

import httpx

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import wait_for
from tests.support.manifests import chart_config, unique

STALL_ENV = "OME_SCHEDULER_TEST_STALL_SIGNAL"
STALL_SECONDS = 5.0
RECENT = 10.0
"""``watchdog.RECENT_STALL_SECONDS``: /livez fails this long after a stall."""


def test_a_stalled_loop_fails_livez_and_shows_in_the_lag_histogram(cluster: Cluster, api: Api) -> None:
    cfg = chart_config(scheduler_name=unique("loop"))
    token = api.metrics_token()
    with SchedulerProcess(cluster, cfg, name="loop", env={STALL_ENV: str(STALL_SECONDS)}, v=2) as s:
        assert s.get("/livez").status_code == 200
        lag = "ome_scheduler_event_loop_lag_seconds"
        wait_for("lag samples", lambda: s.metric(f"{lag}_count", token=token) >= 4, timeout=10)
        before = s.metric(f"{lag}_count", token=token) - s.metric(f"{lag}_bucket", {"le": "2.048"}, token=token)
        text = s.get("/metrics", token=token).text  # exported from the start (counted in tests/kube)
        for resource in ("pods", "nodes", "podgroups", "persistentvolumeclaims"):
            for family in ("relists", "watch_restarts"):
                assert f'ome_scheduler_informer_{family}_total{{resource="{resource}"}} 0.0' in text, (family, resource)

        answer: dict[str, float | int | str] = {}

        def probe() -> None:  # a kubelet-style probe, sent while the loop is stalled
            time.sleep(1.0)
            t = time.monotonic()
            r = httpx.get(f"https://127.0.0.1:{s.port}/livez", verify=False, timeout=30.0)
            answer.update(status=r.status_code, body=r.text, waited=time.monotonic() - t)

        t0 = time.monotonic()
        prober = threading.Thread(target=probe)
        prober.start()
        s.signal(signal.SIGUSR1)
        prober.join(40)
        assert answer, "the probe was answered"
        assert answer["status"] == 500, answer
        assert "[-]event-loop failed" in str(answer["body"])
        assert float(answer["waited"]) >= STALL_SECONDS - 2.0, "answered only once the stall was over"
        assert s.proc is not None and s.proc.poll() is None, "without leadership a stall ends nothing"
        after = s.metric(f"{lag}_count", token=token) - s.metric(f"{lag}_bucket", {"le": "2.048"}, token=token)
        assert after - before == 1, "the stall is one late heartbeat in the histogram"
        assert "event loop stalled" in s.log()
        assert s.get("/livez").status_code == 500  # still within the 10 s after the stall
        wait_for("/livez recovers", lambda: s.get("/livez").status_code == 200, timeout=RECENT + 5, interval=0.5)
        assert time.monotonic() - t0 >= STALL_SECONDS + RECENT - 2.0
