"""klog-style verbosity and both output formats."""

from __future__ import annotations

import json

import pytest

from ome_scheduler import logs


def emit(capsys: pytest.CaptureFixture[str], level: int, fmt: str) -> list[str]:
    logs.configure(level, fmt)
    log = logs.get_logger()
    log.info("gangpack.pinGang.result", v=4, gang="ns/g", domain="clique-a", narrowedNodes=2)
    log.info("Successfully bound pod to node", v=2, pod="ns/p", node="n1")
    log.error("failed", error="boom")
    out = capsys.readouterr().err.strip().splitlines()
    with capsys.disabled():  # log to the session's stderr again: this test's capture is closed after it
        logs.configure(2, "text")
    return out


def test_verbosity_gates_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(emit(capsys, 2, "text")) == 2
    assert len(emit(capsys, 4, "text")) == 3


def test_text_format_is_klog_like(capsys: pytest.CaptureFixture[str]) -> None:
    lines = emit(capsys, 4, "text")
    assert (
        lines[0].startswith("I")
        and '] "gangpack.pinGang.result" gang="ns/g" domain="clique-a" narrowedNodes=2' in lines[0]
    )
    assert lines[2].startswith("E")


def test_json_format(capsys: pytest.CaptureFixture[str]) -> None:
    lines = [json.loads(x) for x in emit(capsys, 4, "json")]
    assert lines[0]["msg"] == "gangpack.pinGang.result" and lines[0]["v"] == 4 and lines[0]["domain"] == "clique-a"
    assert lines[1]["msg"] == "Successfully bound pod to node" and lines[1]["v"] == 2
    assert isinstance(lines[0]["ts"], float)


def test_unknown_format_rejected() -> None:
    with pytest.raises(ValueError, match="--logging-format"):
        logs.configure(2, "yaml")
