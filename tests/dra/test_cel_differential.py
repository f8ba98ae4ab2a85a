"""ome_scheduler/dra/cel.py against upstream's Go on tests/dra/cel_corpus.json.

``e2e/tools/celdiff`` (built and cached by ``e2e/build-binaries.sh celdiff`` under
``~/.cache/ome-scheduler/bin``, or taken from ``$OME_K8S_BIN_DIR``) evaluates every case with
``k8s.io/dynamic-resource-allocation@v0.35.4/cel`` (``Cache.GetOrCompile`` then
``DeviceMatches``); the adapter must give the same value, or an error of the same class
(compile, runtime, cost), for every case. Skipped only when Go is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ome_scheduler.dra.cel import (
    CELCompileError,
    CELCostLimitError,
    CELRuntimeError,
    DeviceView,
    Version,
    compile_selector,
)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).with_name("cel_corpus.json")


def celdiff() -> Path:
    """The celdiff binary: ``$OME_K8S_BIN_DIR/celdiff`` when ``make test`` built it and set the
    variable (calling the build script would wait on its lock for the rest of the build, which
    runs beside this test), else built or found in the cache by ``e2e/build-binaries.sh``."""
    bin_dir = os.environ.get("OME_K8S_BIN_DIR")
    if bin_dir and (Path(bin_dir) / "celdiff").is_file():
        return Path(bin_dir) / "celdiff"
    if shutil.which("go") is None:
        pytest.skip("Go is not installed: the differential test needs e2e/tools/celdiff (CI has Go)")
    out = subprocess.run(
        ["bash", str(ROOT / "e2e" / "build-binaries.sh"), "celdiff"], capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return Path(out.stdout.strip().splitlines()[-1]) / "celdiff"


def view(dev: dict[str, Any]) -> DeviceView:
    attrs: dict[str, int | bool | str | Version | None] = {}
    for name, a in dev["attributes"].items():
        if "version" in a:
            attrs[name] = Version(a["version"])
        elif "int" in a:
            attrs[name] = a["int"]
        elif "bool" in a:
            attrs[name] = a["bool"]
        elif "string" in a:
            attrs[name] = a["string"]
        else:
            attrs[name] = None
    return DeviceView(
        driver=dev["driver"],
        attributes=attrs,
        capacity=dict(dev["capacity"]),
        allow_multiple_allocations=dev.get("allowMultipleAllocations", False),
    )


def ours(case: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"class": "value", "value": compile_selector(case["expression"]).matches(view(case["device"]))}
    except CELCompileError as exc:
        return {"class": "compile", "message": str(exc)}
    except CELCostLimitError as exc:
        return {"class": "cost", "message": str(exc)}
    except CELRuntimeError as exc:
        return {"class": "runtime", "message": str(exc)}


def run_upstream(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    run = subprocess.run([str(celdiff())], input=json.dumps(cases), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    upstream = [json.loads(line) for line in run.stdout.splitlines()]
    assert [u["id"] for u in upstream] == [c["id"] for c in cases]
    return upstream


def same(mine: dict[str, Any], up: dict[str, Any]) -> bool:
    return bool(mine["class"] == up["class"] and (up["class"] != "value" or mine["value"] == up["value"]))


def load(known: bool) -> list[dict[str, Any]]:
    cases = json.loads(CORPUS.read_text(encoding="utf-8"))
    return [c for c in cases if ("knownDeviation" in c) == known]


def test_corpus_is_large_enough() -> None:
    cases = load(known=False)
    assert len(cases) >= 200
    assert len({c["id"] for c in cases}) == len(cases)


def test_same_value_or_error_class_as_upstream() -> None:
    cases = load(known=False)
    upstream = run_upstream(cases)
    disagreements = []
    classes: dict[str, int] = {}
    for case, up in zip(cases, upstream, strict=True):
        mine = ours(case)
        classes[up["class"]] = classes.get(up["class"], 0) + 1
        if not same(mine, up):
            disagreements.append(
                f"{case['id']}: {case['expression'][:160]!r}\n    upstream {up['class']} "
                f"{up.get('value') if up['class'] == 'value' else up.get('message', '')[:200]!r}\n"
                f"    ours     {mine['class']} {mine.get('value', mine.get('message', ''))!r:.200}"
            )
    print(f"{len(cases)} cases, upstream classes {classes}, {len(disagreements)} disagreements")
    assert not disagreements, f"{len(disagreements)} disagreements:\n" + "\n".join(disagreements)


def test_runtime_messages_match_upstream_where_the_cause_is_the_same() -> None:
    """The messages the allocator wraps (``CEL runtime error: ...``) read as upstream's for
    the common causes: a missing key, overflow, a result that is not a bool, the cost limit."""
    cases = load(known=False)
    upstream = {u["id"]: u for u in run_upstream(cases)}
    checked = 0
    for case in cases:
        up = upstream[case["id"]]
        if up["class"] not in ("runtime", "cost"):
            continue
        msg = up["message"]
        if msg.startswith(
            ("no such key", "integer overflow", "division by zero", "modulus by zero", "operation cancelled")
        ):
            mine = ours(case)
            assert mine.get("message") == msg, (case["id"], case["expression"][:100], mine, msg)
            checked += 1
    assert checked >= 10


def test_known_deviations_still_differ() -> None:
    """Each documented deviation still differs; one that agrees now belongs in the corpus."""
    cases = load(known=True)
    upstream = run_upstream(cases)
    fixed = [c["id"] + ": " + c["expression"] for c, up in zip(cases, upstream, strict=True) if same(ours(c), up)]
    assert not fixed, "these now agree with upstream; move them into the corpus: " + "; ".join(fixed)
