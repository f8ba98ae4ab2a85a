"""Local processes for the control plane harness: starting, waiting for, inspecting and stopping them.

Every process runs in a session (process group) of its own with its output in one log file, and
is remembered as a ``ProcRecord``: PID plus start time read from ``/proc``, so a recycled PID is
never signalled. ``stop_group`` stops processes by group (SIGTERM, then SIGKILL), ``wait_until``
polls a readiness check and fails with the process's log tail, ``free_ports`` picks ports on
127.0.0.1 and ``resolve_bin_dir`` finds (or builds) the Kubernetes binaries. Linux only (``/proc``).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx

from e2e.harness.paths import BUILD_SCRIPT

STOP_TIMEOUT: Final = 20.0
LOG_TAIL_LINES: Final = 50


# ----------------------------------------------------------------------------------------------
# Errors


class ClusterError(RuntimeError):
    """Any failure of the local control plane harness."""


class ComponentStartError(ClusterError):
    """A component exited or did not become healthy in time; the message ends with its log tail."""

    def __init__(self, component: str, reason: str, log_file: Path | None) -> None:
        self.component = component
        self.reason = reason
        self.log_file = log_file
        self.log_tail = tail_lines(log_file, LOG_TAIL_LINES) if log_file is not None else ""
        where = f" (log: {log_file})" if log_file is not None else ""
        super().__init__(
            f"{component} failed to start: {reason}{where}\n"
            f"--- last {LOG_TAIL_LINES} lines of the {component} log ---\n{self.log_tail}"
        )


# ----------------------------------------------------------------------------------------------
# Files, ports and /proc


def tail_lines(path: Path, n: int = LOG_TAIL_LINES) -> str:
    """Return the last ``n`` lines of a text file ('' if it is missing), reading at most 256 KiB."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-n:])


EPHEMERAL_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT: Final = 10_000
"""Ports below this are left alone (well-known and registered services)."""


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free TCP ports on 127.0.0.1, below the kernel's ephemeral range.

    A port from the ephemeral range (what binding port 0 gives) can be taken by any outgoing
    connection while its component is down, so a restarted etcd found its peer port in use and
    never came back. Ports are drawn at random from ``[LOWEST_PORT, ephemeral low)`` and kept
    only if they bind; when that range is too small, port 0 is used as before.
    """
    low = _ephemeral_low()
    rng = random.SystemRandom()
    out: list[int] = []
    tries = 0
    while len(out) < count and low - LOWEST_PORT > 10 * count and tries < 200 * count:
        tries += 1
        port = rng.randrange(LOWEST_PORT, low)
        if port in out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        out.append(port)
    socks: list[socket.socket] = []
    try:
        while len(out) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            out.append(int(s.getsockname()[1]))
        return out
    finally:
        for s in socks:
            s.close()


def _proc_stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 first), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def proc_start_ticks(pid: int) -> int | None:
    """Return the start time of ``pid`` in clock ticks since boot (/proc/<pid>/stat field 22).

    Returns None if the process does not exist. Used with the PID to recognise our own processes
    and never signal a recycled PID.
    """
    fields = _proc_stat_fields(pid)
    return None if fields is None else int(fields[19])


def proc_state(pid: int) -> str | None:
    """Return the one-letter state of ``pid`` (R, S, Z, ...) or None if it does not exist."""
    fields = _proc_stat_fields(pid)
    return None if fields is None else fields[0]


def proc_rss_bytes(pid: int) -> int | None:
    """Return the resident set size of ``pid`` in bytes (VmRSS), or None if unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# ----------------------------------------------------------------------------------------------
# Binaries


def resolve_bin_dir(required: Sequence[str]) -> Path:
    """Return the directory holding the executables named in ``required`` (etcd, kube-apiserver, ...).

    Uses ``OME_K8S_BIN_DIR`` if set; otherwise runs ``e2e/build-binaries.sh`` (its progress on
    stderr goes to the terminal; it can take 30+ minutes when cold) and takes the last line it
    prints. Raises ClusterError if the build fails or a binary is missing.
    """
    env_dir = os.environ.get("OME_K8S_BIN_DIR")
    if env_dir:
        bin_dir = Path(env_dir).expanduser().resolve()
    else:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        if proc.returncode != 0 or not lines:
            raise ClusterError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}); see its output above")
        bin_dir = Path(lines[-1].strip())
    missing = [b for b in required if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise ClusterError(f"missing binaries in {bin_dir}: {', '.join(missing)}")
    return bin_dir


# ----------------------------------------------------------------------------------------------
# Starting, waiting, stopping


@dataclass
class ProcRecord:
    """A process we started: its PID, its start time (clock ticks since boot) and its log."""

    name: str
    pid: int
    start_ticks: int
    log: str
    argv: list[str]
    port: int | None = None

    def alive(self) -> bool:
        """True if this exact process (same PID and start time) exists and is not a zombie."""
        return proc_start_ticks(self.pid) == self.start_ticks and proc_state(self.pid) not in (None, "Z")


def spawn(
    name: str, argv: list[str], *, log_file: Path, cwd: Path, port: int | None = None
) -> tuple[subprocess.Popen[bytes], ProcRecord]:
    """Start ``argv`` in a new session (own process group), stdout and stderr appended to ``log_file``.

    Returns the Popen handle and the record to persist. Raises OSError if ``argv[0]`` cannot run.
    """
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
        )
    ticks = proc_start_ticks(proc.pid) or 0
    return proc, ProcRecord(name=name, pid=proc.pid, start_ticks=ticks, log=str(log_file), argv=argv, port=port)


def alive_check(rec: ProcRecord, proc: subprocess.Popen[bytes] | None) -> Callable[[], bool]:
    """A liveness check for ``rec``: ``proc.poll()`` when we hold its Popen (it reaps), else /proc."""
    if proc is not None:
        return lambda: proc.poll() is None
    return rec.alive


def signal_group(rec: ProcRecord, sig: signal.Signals) -> None:
    """Signal the process group of ``rec`` if it is still the process we started (never a reused PID)."""
    if not rec.alive():
        return
    try:
        if os.getpgid(rec.pid) == rec.pid:
            os.killpg(rec.pid, sig)
        else:
            os.kill(rec.pid, sig)
    except ProcessLookupError:
        pass


def stop_group(
    recs: Iterable[ProcRecord],
    popens: Mapping[str, subprocess.Popen[bytes]],
    log: Callable[[str], None],
    timeout: float = STOP_TIMEOUT,
) -> None:
    """SIGTERM each record's process group, wait ≤ ``timeout`` seconds, then SIGKILL (and wait ≤ 5 s).

    ``popens`` are the handles of processes this Python process started: they are polled so that
    our own children do not linger as zombies. ``log`` receives a line per SIGKILL.
    """

    def reap() -> None:
        for p in popens.values():
            p.poll()

    live = [r for r in recs if r.alive()]
    for r in live:
        signal_group(r, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    pending = list(live)
    while pending and time.monotonic() < deadline:
        reap()
        pending = [r for r in pending if r.alive()]
        if pending:
            time.sleep(0.05)
    for r in pending:
        log(f"{r.name} (pid {r.pid}) ignored SIGTERM for {timeout:.0f} s; SIGKILL")
        signal_group(r, signal.SIGKILL)
    end = time.monotonic() + 5.0
    while any(r.alive() for r in pending) and time.monotonic() < end:
        reap()
        time.sleep(0.05)
    reap()


def stop_all(
    records: Mapping[str, ProcRecord],
    order: Sequence[Sequence[str]],
    popens: dict[str, subprocess.Popen[bytes]],
    log: Callable[[str], None],
) -> None:
    """Stop every process in ``records`` with ``stop_group``, one group at a time, and forget their Popens.

    The processes that ``order`` does not name stop first, together; then each group of ``order``.
    """
    named = {n for group in order for n in group}
    for group in [[n for n in records if n not in named], *order]:
        stop_group([records[n] for n in group if n in records], popens, log)
    for n in list(records):
        popens.pop(n, None)


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    *,
    component: str,
    log_file: Path | None,
    alive: Callable[[], bool] | None = None,
    interval: float = 0.1,
) -> None:
    """Call ``check`` every ``interval`` seconds until it returns True.

    Raises ComponentStartError (with the component's log tail) if ``alive`` reports the process
    gone, or after ``timeout`` seconds. Exceptions from ``check`` count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError, ValueError, subprocess.SubprocessError) as e:
            last_error = f" (last error: {e})"
        if alive is not None and not alive():
            raise ComponentStartError(component, f"process exited while waiting for {what}", log_file)
        if time.monotonic() > deadline:
            raise ComponentStartError(component, f"{what} not reached within {timeout:.0f} s{last_error}", log_file)
        time.sleep(interval)


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (from ``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
