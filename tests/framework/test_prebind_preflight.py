"""``Framework.run_pre_bind_pre_flights`` (``RunPreBindPreFlights``): Success when a PreBind
plugin has work, Skip when none has, Errors wrapped; PreBind then skips the plugins that
returned Skip. The binding cycle's use of it (the ``nominatedNodeName`` patch before PreBind)
is tested with DynamicResources in ``tests/plugins/test_dynamicresources_binding.py``."""

from __future__ import annotations

import asyncio
from typing import Any

from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.interface import CycleState, FrameworkOptions, Handle
from ome_scheduler.framework.runtime import Framework
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.registry import default_plugins
from tests.framework.test_plugin_exceptions import Probe, probe_config, probe_pod, probe_registry


class Flight(Probe):
    """A probe whose PreBindPreFlight answers ``answer`` (an exception: raises it)."""

    answer: Status | Exception | None = Status(Code.SKIP)

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        self.calls.append((self.name, "PreBindPreFlight"))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Volumes(Flight):
    name = "Volumes"


class Claims(Flight):
    name = "Claims"


def _framework(volumes: Status | Exception | None, claims: Status | Exception | None) -> tuple[Framework, list[Any]]:
    calls: list[tuple[str, str]] = []
    registry = probe_registry(calls, set())
    v, c = Volumes(calls, set()), Claims(calls, set())
    v.answer, c.answer = volumes, claims
    registry["Volumes"] = lambda args, handle, opts: v
    registry["Claims"] = lambda args, handle, opts: c
    profile = parse_config(probe_config(("Volumes", "Claims")), "test").profiles[0]
    opts = FrameworkOptions(scheduler_name="probes", metrics=Metrics())
    handle: Handle = None  # type: ignore[assignment]  # the probes never read it
    return Framework(profile, default_plugins(), registry, handle, opts), calls


def _pre_binds(calls: list[tuple[str, str]]) -> list[str]:
    return [name for name, point in calls if point == "PreBind"]


def test_skip_when_no_plugin_has_work_and_pre_bind_then_skips_them() -> None:
    fw, calls = _framework(Status(Code.SKIP), Status(Code.SKIP))
    state = CycleState()
    s = fw.run_pre_bind_pre_flights(state, probe_pod(), "n0")
    assert s is not None and s.is_skip()
    assert state.skip_pre_bind_plugins == {"Volumes", "Claims"}
    assert asyncio.run(fw.run_pre_bind(state, probe_pod(), "n0")) is None
    assert _pre_binds(calls) == []


def test_success_when_one_plugin_has_work_and_only_it_runs_at_pre_bind() -> None:
    fw, calls = _framework(Status(Code.SKIP), None)
    state = CycleState()
    assert fw.run_pre_bind_pre_flights(state, probe_pod(), "n0") is None
    assert state.skip_pre_bind_plugins == {"Volumes"}
    asyncio.run(fw.run_pre_bind(state, probe_pod(), "n0"))
    assert _pre_binds(calls) == ["Claims"]


def test_an_error_or_an_exception_is_wrapped_and_ends_the_point() -> None:
    for answer in (Status(Code.ERROR, "no pod volume found"), RuntimeError("no pod volume found")):
        fw, calls = _framework(answer, None)
        s = fw.run_pre_bind_pre_flights(CycleState(), probe_pod(), "n0")
        assert s is not None and (s.code, s.plugin) == (Code.ERROR, "Volumes")
        assert s.message() == 'running PreBindPreFlight "Volumes": no pod volume found'
        assert [n for n, p in calls if p == "PreBindPreFlight"] == ["Volumes"]


def test_any_other_code_is_unsupported() -> None:
    fw, _ = _framework(None, Status.unschedulable("full"))
    s = fw.run_pre_bind_pre_flights(CycleState(), probe_pod(), "n0")
    assert s is not None and s.code == Code.ERROR
    assert s.message() == (
        'PreBindPreFlight Claims returned "Unschedulable", which is unsupported. '
        "It is supposed to return Success, Skip, or Error status"
    )
