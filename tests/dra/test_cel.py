"""ome_scheduler/dra/cel.py without Go: the interface, the device variable, errors, caches."""

from __future__ import annotations

import pytest

from ome_scheduler.dra import cel
from ome_scheduler.dra.cel import (
    CELCompileError,
    CELCostLimitError,
    CELRuntimeError,
    DeviceView,
    Version,
    compile_selector,
)

GPU = "gpu.example.com"
H100 = DeviceView(
    driver=GPU,
    attributes={"model": "H100", "cores": 132, "ecc": True, "driverVersion": Version("1.2.3"), "other.com/r": "eu"},
    capacity={"memory": "80Gi"},
)


def m(expr: str, dev: DeviceView = H100) -> bool:
    return compile_selector(expr).matches(dev)


def test_typical_selectors() -> None:
    assert m(f'device.driver == "{GPU}" && device.attributes["{GPU}"].model == "H100"')
    assert m(f'device.capacity["{GPU}"].memory.compareTo(quantity("40Gi")) >= 0')
    assert m(f'device.attributes["{GPU}"].driverVersion.isGreaterThan(semver("1.0.0"))')
    assert m('device.attributes["other.com"].r == "eu"')
    assert not m(f'device.attributes["{GPU}"].cores < 100')


def test_missing_key_and_unknown_domain() -> None:
    with pytest.raises(CELRuntimeError, match="^no such key: nosuch$"):
        m(f'device.attributes["{GPU}"].nosuch == 1')
    with pytest.raises(CELRuntimeError, match="^no such key: model$"):
        m('device.attributes["unknown.com"].model == "H100"')
    assert not m('has(device.attributes["unknown.com"].model)')
    assert not m(f'has(device.attributes["{GPU}"].nosuch)')


def test_compile_errors_carry_upstreams_text() -> None:
    with pytest.raises(CELCompileError, match=r"^compilation failed: ERROR: <input>:1:4: Syntax error"):
        compile_selector("1 +")
    with pytest.raises(CELCompileError, match="found no matching overload for '_\\+_'"):
        compile_selector("device.driver + 1 == 2")
    with pytest.raises(CELCompileError, match="^must evaluate to bool or the unknown type, not int$"):
        compile_selector("1")
    with pytest.raises(CELCompileError, match="error parsing regexp"):
        compile_selector('"a".matches("[")')


def test_runtime_errors() -> None:
    with pytest.raises(CELRuntimeError, match="^CEL result of type int could not be converted to bool"):
        m(f'device.attributes["{GPU}"].cores')
    with pytest.raises(CELRuntimeError, match="^attribute v: parse semantic version: No Major.Minor.Patch"):
        m("true", DeviceView(driver=GPU, attributes={"v": Version("1.2")}))
    with pytest.raises(CELRuntimeError, match="^attribute e: unsupported attribute value$"):
        m("true", DeviceView(driver=GPU, attributes={"e": None}))
    with pytest.raises(CELRuntimeError, match="^integer overflow$"):
        m("9223372036854775807 + 1 > 0")


def test_cost_limit() -> None:
    with pytest.raises(CELCostLimitError, match="^operation cancelled: actual cost limit exceeded$"):
        m("lists.range(1000).all(i, lists.range(1000).all(j, true))")
    assert m("lists.range(100).all(i, lists.range(50).all(j, i + j >= 0))")


def test_semver_parse_and_compare() -> None:
    assert cel.parse_semver("1.2.3-rc.1+b") == (1, 2, 3, ("rc", 1))
    assert m('semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))')
    assert m('semver("1.0.0-2").isLessThan(semver("1.0.0-10"))')
    assert m('semver("v1.2", true) == semver("1.2.0")')
    assert m('semver("1.2.3+a") == semver("1.2.3+b")')


def test_quantities() -> None:
    assert m('quantity("1Ki") == quantity("1024")')
    assert m('quantity("10").sub(3).asInteger() == 7')
    assert m('!isQuantity("1 Gi")')
    with pytest.raises(CELRuntimeError, match="^cannot convert value to integer$"):
        m('quantity("1.5").asInteger() == 1')


def test_results_are_memoised_per_device_key() -> None:
    sel = compile_selector(f'device.attributes["{GPU}"].model == "H100"')
    keyed = DeviceView(driver=GPU, attributes={"model": "H100"}, key=("uid", 1, "gpu-0"))
    assert sel.matches(keyed)
    # The same key answers from the memo, even for a different view: the key is the identity.
    assert sel.matches(DeviceView(driver=GPU, attributes={"model": "A10"}, key=("uid", 1, "gpu-0")))
    assert not sel.matches(DeviceView(driver=GPU, attributes={"model": "A10"}, key=("uid", 2, "gpu-0")))
    err = DeviceView(driver=GPU, key=("uid", 3, "gpu-1"))
    for _ in range(2):
        with pytest.raises(CELRuntimeError, match="no such key"):
            sel.matches(err)


def test_compiled_selectors_are_cached() -> None:
    assert compile_selector("true") is compile_selector("true")
