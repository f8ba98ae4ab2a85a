"""The scheduler under test: an ome-scheduler process on the local cluster, and what its log tells.

:class:`SchedulerProcess` runs ``python -m ome_scheduler`` with a configuration (written to
``<state dir>/schedulers/<name>-<hex>/config.yaml``), its own secure port and one log file;
:class:`SupervisedScheduler` restarts it whenever it exits, as the kubelet would. From the log:
the last FailedScheduling message of a pod, every failed attempt by gang
(:func:`failed_attempts_by_gang`, for the livelock check) and the cache comparer's verdict
(:func:`parse_drift`; :func:`assert_no_drift` sends the SIGUSR2 that runs it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from e2e.harness.cluster import Cluster
from e2e.harness.paths import REPO
from e2e.harness.processes import free_ports
from e2e.harness.waits import wait_for
from tests.support.manifests import unique

_FAILURE_LINE = re.compile(
    r'"(?:Unable to schedule pod; no fit; waiting|Error scheduling pod; retrying)" pod="([^"]+)"(?: gang="[^"]*")? '
    r'err=(".*")$'
)


class SchedulerProcess:
    """An ``ome-scheduler`` subprocess with a given configuration and its log file."""

    def __init__(
        self,
        cluster: Cluster,
        config: Mapping[str, Any],
        *,
        name: str = "ome-scheduler",
        v: int = 4,
        extra_args: Sequence[str] = (),
        kubeconfig: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.env = dict(env or {})
        """Extra environment variables (test hooks such as ``OME_SCHEDULER_TEST_STALL_SIGNAL``)."""
        self.dir = cluster.state_dir / "schedulers" / unique(name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.dir / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.log_path = self.dir / "scheduler.log"
        self.port = free_ports(1)[0]
        self.argv = [
            sys.executable,
            "-m",
            "ome_scheduler",
            f"--config={self.config_path}",
            f"--kubeconfig={kubeconfig or cluster.kubeconfig}",
            f"--v={v}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            *extra_args,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> SchedulerProcess:
        """Start the process (its output appended to the log file) without waiting for anything
        (``start`` waits until it has synced)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                start_new_session=True,
            )
        return self

    def start(self) -> SchedulerProcess:
        self.launch()
        wait_for(
            "ome-scheduler informers synced",
            lambda: self.alive_or_raise() and "informers synced" in self.log(),
            timeout=45,
        )
        return self

    def alive_or_raise(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"ome-scheduler exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str, token: str | None = None, scheme: str = "https") -> httpx.Response:
        """GET ``path`` from the scheduler's secure port (certificate not verified: self-signed)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"{scheme}://127.0.0.1:{self.port}{path}", headers=headers, verify=False, timeout=10.0)

    def metric(self, name: str, labels: Mapping[str, str] | None = None, token: str | None = None) -> float:
        """A sample's value from ``/metrics`` (admin client certificate is not used: pass a token)."""
        from prometheus_client.parser import text_string_to_metric_families

        r = self.get("/metrics", token=token)
        r.raise_for_status()
        total = 0.0
        for fam in text_string_to_metric_families(r.text):
            for smp in fam.samples:
                if smp.name == name and all(smp.labels.get(k) == v for k, v in (labels or {}).items()):
                    total += smp.value
        return total

    def last_failure(self, ns: str, name: str) -> str:
        """The last FailedScheduling message this scheduler logged for a pod ("" if none).

        Read from the V(2) log lines rather than the pod's PodScheduled condition: two status
        patches of one pod in flight at once may land out of order, leaving an older message in
        the condition."""
        msg = ""
        for line in self.log().splitlines():
            m = _FAILURE_LINE.search(line)
            if m and m.group(1) == f"{ns}/{name}":
                msg = json.loads(m.group(2))
        return str(msg)

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode

    def __enter__(self) -> SchedulerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SupervisedScheduler:
    """An ome-scheduler restarted whenever it exits, as the kubelet restarts a container
    (``restartPolicy: Always``; here after ``restart_delay`` seconds, with no crash-loop
    backoff). ``exits`` lists every exit as (monotonic time, exit status); ``process`` is the
    :class:`SchedulerProcess` (one log file for all incarnations)."""

    def __init__(self, process: SchedulerProcess, restart_delay: float = 1.0) -> None:
        self.process = process
        self.restart_delay = restart_delay
        self.exits: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name=f"supervise-{process.dir.name}", daemon=True)

    def start(self) -> SupervisedScheduler:
        """Start the scheduler (waiting until its informers synced) and its supervisor."""
        self.process.start()
        self._thread.start()
        return self

    def _supervise(self) -> None:
        while not self._stop.wait(0.1):
            proc = self.process.proc
            if proc is None or proc.poll() is None:
                continue
            self.exits.append((time.monotonic(), proc.returncode))
            if self._stop.wait(self.restart_delay):
                return
            self.process.launch()

    def stop(self) -> None:
        """Stop supervising, then stop the process (SIGTERM, then SIGKILL)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.process.stop()


_DRIFT_DONE = re.compile(r'"Cache comparer (finished|failed)"(?: differences=(\d+))?')


def parse_drift(log_text: str) -> tuple[str, int, list[str]] | None:
    """The cache comparer's outcome in a log excerpt: (``finished``/``failed``, differences,
    ``"Cache mismatch"`` lines), or None when its summary line is not there yet."""
    m = _DRIFT_DONE.search(log_text)
    if m is None:
        return None
    lines = [line for line in log_text.splitlines() if '"Cache mismatch"' in line]
    return m.group(1), int(m.group(2) or 0), lines


def assert_no_drift(sched: SchedulerProcess, timeout: float = 60.0) -> None:
    """Send SIGUSR2 to ``sched`` and assert that its cache comparer (``ome_scheduler/app/debugger.py``)
    found no difference between its cache, queue and gang state and a fresh LIST.

    Waits up to ``timeout`` seconds for the comparer's summary line; fails listing every
    ``"Cache mismatch"`` line, or when the comparison itself failed.
    """
    start = len(sched.log())
    sched.signal(signal.SIGUSR2)

    def summary() -> tuple[str, int, list[str]] | None:
        sched.alive_or_raise()
        return parse_drift(sched.log()[start:])

    outcome, differences, mismatches = wait_for("the cache comparer's summary", summary, timeout=timeout, interval=0.25)
    assert outcome == "finished", f"the cache comparer failed:\n{sched.log()[start:][-2000:]}"
    assert differences == 0 and not mismatches, "cache drift:\n" + "\n".join(mismatches)


_KLOG_TIME = re.compile(r"^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) ")
_FAILED = re.compile(r'"(?:Unable to schedule pod; no fit; waiting|Error scheduling pod; retrying)" .*?gang="([^"]+)"')


def failed_attempts_by_gang(log_text: str) -> dict[str, list[float]]:
    """Times (seconds, from the klog header) of every failed scheduling attempt, by gang key."""
    out: dict[str, list[float]] = {}
    for line in log_text.splitlines():
        m = _FAILED.search(line)
        t = _KLOG_TIME.match(line)
        if m is None or t is None:
            continue
        stamp = dt.datetime.strptime(t.group(1), "%m%d %H:%M:%S.%f")
        out.setdefault(m.group(1), []).append(stamp.timestamp())
    return out


def worst_attempt_window(times: Sequence[float], window: float) -> int:
    """The largest number of ``times`` within any ``window`` seconds."""
    best, lo = 0, 0
    ts = sorted(times)
    for hi, t in enumerate(ts):
        while t - ts[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best
