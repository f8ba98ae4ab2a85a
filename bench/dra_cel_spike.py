"""The spike behind docs/design/dra-cel.md: three Python CEL libraries on the DRA selector corpus.

Needs a scratch venv with the candidates (not project dependencies)::

    python3 -m venv /tmp/celspike && /tmp/celspike/bin/pip install cel-expr-python cel-python \\
        common-expression-language protobuf && /tmp/celspike/bin/pip install -e .
    e2e/build-binaries.sh celdiff
    /tmp/celspike/bin/python bench/dra_cel_spike.py

Correctness: each library evaluates every case of tests/dra/cel_corpus.json with ``device`` as
plain nested maps and no Kubernetes functions registered (what the library gives before any
bridging); a case agrees when its class (value/compile/runtime) and value match upstream's Go.
For cel-expr-python the adapter's own result (with the bridges) is reported too.
Speed: compile time per expression and evaluation time per (expression, device), best of 5.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES = json.loads((ROOT / "tests" / "dra" / "cel_corpus.json").read_text(encoding="utf-8"))
CASES = [c for c in CASES if "knownDeviation" not in c]
E1 = 'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "H100"'
E2 = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'


def plain_device(dev: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, dict[str, Any]] = {}
    for name, a in dev["attributes"].items():
        domain, _, ident = name.rpartition("/") if "/" in name else (dev["driver"], "", name)
        attrs.setdefault(domain, {})[ident] = next(iter(a.values()), None)
    caps: dict[str, dict[str, Any]] = {}
    for name, q in dev["capacity"].items():
        domain, _, ident = name.rpartition("/") if "/" in name else (dev["driver"], "", name)
        caps.setdefault(domain, {})[ident] = q
    return {"driver": dev["driver"], "attributes": attrs, "capacity": caps, "allowMultipleAllocations": False}


def best(fn: Any, n: int) -> float:
    """Best of 5 runs of n calls, µs per call."""
    out = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t) / n * 1e6)
    return min(out)


def run_cel_expr_python() -> dict[str, Any]:
    from cel_expr_python import cel

    env = cel.NewEnv(variables={"device": cel.Type.DYN})

    def classify(c: dict[str, Any]) -> tuple[str, Any]:
        try:
            e = env.compile(c["expression"])
        except Exception:
            return "compile", None
        try:
            v = e.eval(data={"device": plain_device(c["device"])})
        except Exception:
            return "runtime", None
        if v.type().name() == "BOOL":
            return "value", v.value()
        return "runtime", None

    dev = {"device": plain_device(CASES[0]["device"])}
    e1 = env.compile(E1)
    return {
        "classify": classify,
        "compile_us": best(lambda: env.compile(E1), 200),
        "eval1_us": best(lambda: e1.eval(data=dev), 2000),
    }


def run_adapter() -> dict[str, Any]:
    from ome_scheduler.dra import cel as adapter

    def view(dev: dict[str, Any]) -> Any:
        attrs = {
            k: adapter.Version(a["version"]) if "version" in a else next(iter(a.values()), None)
            for k, a in dev["attributes"].items()
        }
        return adapter.DeviceView(
            driver=dev["driver"],
            attributes=attrs,
            capacity=dict(dev["capacity"]),
            allow_multiple_allocations=dev.get("allowMultipleAllocations", False),
        )

    def classify(c: dict[str, Any]) -> tuple[str, Any]:
        try:
            return "value", adapter.compile_selector(c["expression"]).matches(view(c["device"]))
        except adapter.CELCompileError:
            return "compile", None
        except adapter.CELCostLimitError:
            return "cost", None
        except adapter.CELRuntimeError:
            return "runtime", None

    d = view(CASES[0]["device"])
    s1, s2 = adapter.compile_selector(E1), adapter.compile_selector(E2)
    keyed = adapter.DeviceView(d.driver, d.attributes, d.capacity, key=("uid", 1, "gpu-0"))
    return {
        "classify": classify,
        "compile_us": best(lambda: adapter._compile(E2), 200),
        "eval1_us": best(lambda: s1.matches(d), 2000),
        "eval2_us": best(lambda: s2.matches(d), 2000),
        "memo_us": best(lambda: s1.matches(keyed), 20000),
    }


def run_celpy() -> dict[str, Any]:
    import celpy

    env = celpy.Environment()

    def classify(c: dict[str, Any]) -> tuple[str, Any]:
        try:
            prg = env.program(env.compile(c["expression"]))
        except Exception:
            return "compile", None
        try:
            v = prg.evaluate({"device": celpy.json_to_cel(plain_device(c["device"]))})
        except Exception:
            return "runtime", None
        if isinstance(v, Exception):
            return "runtime", None
        return ("value", bool(v)) if isinstance(v, celpy.celtypes.BoolType) else ("runtime", None)

    act = {"device": celpy.json_to_cel(plain_device(CASES[0]["device"]))}
    p1 = env.program(env.compile(E1))
    return {
        "classify": classify,
        "compile_us": best(lambda: env.program(env.compile(E1)), 20),
        "eval1_us": best(lambda: p1.evaluate(act), 200),
    }


def run_rust_cel() -> dict[str, Any]:
    import cel as rcel

    def classify(c: dict[str, Any]) -> tuple[str, Any]:
        try:
            prog = rcel.compile(c["expression"])
        except Exception:
            return "compile", None
        try:
            v = prog.execute({"device": plain_device(c["device"])})
        except Exception:
            return "runtime", None
        return ("value", v) if isinstance(v, bool) else ("runtime", None)

    ctx = {"device": plain_device(CASES[0]["device"])}
    p1 = rcel.compile(E1)
    return {
        "classify": classify,
        "compile_us": best(lambda: rcel.compile(E1), 200),
        "eval1_us": best(lambda: p1.execute(ctx), 2000),
    }


def main() -> None:
    binary = Path.home() / ".cache" / "ome-scheduler" / "bin" / "current" / "celdiff"
    out = subprocess.run([str(binary)], input=json.dumps(CASES), capture_output=True, text=True, check=True)
    upstream = [json.loads(line) for line in out.stdout.splitlines()]
    for name, runner in (
        ("adapter (cel-expr-python + bridges)", run_adapter),
        ("cel-expr-python, bare", run_cel_expr_python),
        ("cel-python (celpy), bare", run_celpy),
        ("common-expression-language, bare", run_rust_cel),
    ):
        try:
            r = runner()
        except Exception as exc:  # a candidate that does not load
            print(f"{name}: {type(exc).__name__}: {exc}")
            continue
        agree = 0
        for c, up in zip(CASES, upstream, strict=True):
            cls, val = r["classify"](c)
            agree += cls == up["class"] and (cls != "value" or val == up["value"])
        timings = ", ".join(f"{k} {v:.1f}" for k, v in r.items() if k != "classify")
        print(f"{name}: agree {agree}/{len(CASES)}; {timings}")


if __name__ == "__main__":
    main()
