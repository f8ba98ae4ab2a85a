"""The pure parts of ``e2e/parity_gen_volumes.py`` (no cluster): the stream is reproducible and
covers every dimension it claims, and the status patches say what a kubelet would."""

from __future__ import annotations

import pytest

from e2e import parity_gen, parity_gen_dra
from e2e.parity_gen_volumes import RESIZE_STATES, Resize, generate, resize_status
from e2e.parity_harness import CaseResult, Outcome, pin_changes_spread, stream_slice


def test_the_stream_is_reproducible_and_covers_its_dimensions() -> None:
    a, b = generate(7, 120, "x"), generate(7, 120, "x")
    assert [(c.pod, c.csinodes, c.attachments, c.resizes) for c in a] == [
        (c.pod, c.csinodes, c.attachments, c.resizes) for c in b
    ]
    counts = [d.get("allocatable", {}).get("count") for c in a for n in c.csinodes for d in n["spec"]["drivers"]]
    assert 0 in counts and 3 in counts and None in counts
    assert {r.state for c in a for r in c.resizes} == set(RESIZE_STATES)
    attached = {pv["spec"]["csi"]["volumeHandle"] for c in a for pv in c.attachment_pvs}
    reused = [
        pv for c in a if c.volumes for pv in c.volumes.pvs if pv["spec"].get("csi", {}).get("volumeHandle") in attached
    ]
    assert reused, "no new pod mounts a volume that is already attached somewhere"
    missing = [
        va
        for c in a
        for va in c.attachments
        if va["spec"]["source"]["persistentVolumeName"] not in {p["metadata"]["name"] for p in c.attachment_pvs}
    ]
    assert missing, "no attachment of a missing PV"
    assert any(v.get("awsElasticBlockStore") for c in a for v in c.pod["spec"].get("volumes", []))
    assert any(c.pod["spec"].get("priorityClassName") for c in a)


def test_resize_status_reports_each_state_as_a_kubelet_would() -> None:
    def after(state: str) -> dict[str, object]:
        return resize_status(Resize("ns", "p", {"cpu": "1"}, {"cpu": "3"}, state), "after")["status"]  # type: ignore[no-any-return]

    before = resize_status(Resize("ns", "p", {"cpu": "1"}, {"cpu": "3"}, "done"), "before")["status"]
    assert before["containerStatuses"][0]["resources"] == {"requests": {"cpu": "1"}}
    assert after("infeasible")["conditions"] == [
        {"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "parity"}
    ]
    assert after("deferred")["conditions"][0]["reason"] == "Deferred"  # type: ignore[index]
    assert after("in-progress")["conditions"] == [{"type": "PodResizeInProgress", "status": "True"}]
    assert after("in-progress")["containerStatuses"][0]["allocatedResources"] == {"cpu": "3"}  # type: ignore[index]
    assert after("in-progress")["containerStatuses"][0]["resources"] == {"requests": {"cpu": "1"}}  # type: ignore[index]
    assert "conditions" not in after("done") and "conditions" not in after("unreported")
    assert after("done")["containerStatuses"][0]["resources"] == {"requests": {"cpu": "3"}}  # type: ignore[index]
    assert after("unreported")["containerStatuses"][0]["allocatedResources"] == {"cpu": "1"}  # type: ignore[index]


def test_a_slice_of_the_stream_holds_the_same_cases_as_the_whole_run() -> None:
    """``OME_PARITY_FIRST=225 OME_PARITY_CASES=25`` reruns cases 225-249 of a 250-case run."""
    assert generate(2735, 25, "x", first=225) == generate(2735, 250, "x")[225:]
    assert [c.index for c in generate(2735, 3, "x", first=225)] == [225, 226, 227]
    assert parity_gen.generate(2735, 5, "x", first=40) == parity_gen.generate(2735, 45, "x")[40:]
    assert parity_gen_dra.generate_dra(2735, 5, "x", first=40) == parity_gen_dra.generate_dra(2735, 45, "x")[40:]


def test_stream_slice_reads_first_and_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OME_PARITY_FIRST", raising=False)
    monkeypatch.delenv("OME_PARITY_CASES", raising=False)
    assert stream_slice("OME_PARITY", 50) == (0, 50)
    monkeypatch.setenv("OME_PARITY_FIRST", "225")
    monkeypatch.setenv("OME_PARITY_CASES", "25")
    assert stream_slice("OME_PARITY", 50) == (225, 25)
    monkeypatch.setenv("OME_PARITY_FIRST", "-1")
    with pytest.raises(ValueError, match="OME_PARITY_FIRST"):
        stream_slice("OME_PARITY", 50)


def test_a_pin_that_collapses_min_domains_is_not_held_against_ome() -> None:
    """Case 248 of seed 2735: ``minDomains: 2`` on zones; pinned to ome's node, only that
    node's zone is eligible (node affinity Honor), so kube-scheduler's copy fails although the
    unpinned pod fits there. Such a case is compared on bound-or-not only."""
    [case] = generate(2735, 1, "x", first=248)
    assert pin_changes_spread(case.pod)
    refused = Outcome(
        reason="Unschedulable",
        message="0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints.",
    )
    r = CaseResult(case, kube=Outcome(node="n1"), ome=Outcome(node="n7"), verify=refused)
    r.judge()
    assert r.problems == []
    r = CaseResult(case, kube=Outcome(node="n1"), ome=Outcome(reason="Unschedulable", message="m", events=["m"]))
    r.judge()
    assert r.problems, "bound-or-not is still compared"
    [plain] = generate(2735, 1, "x", first=247)
    assert not pin_changes_spread(plain.pod)
    r = CaseResult(plain, kube=Outcome(node="n1"), ome=Outcome(node="n7"), verify=refused)
    r.judge()
    assert r.problems
