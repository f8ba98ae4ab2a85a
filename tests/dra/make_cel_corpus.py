"""Writes ``cel_corpus.json``: DRA CEL selector expressions crossed with devices, for
``test_cel_differential.py`` (upstream's Go, ``e2e/tools/celdiff``, against ``ome_scheduler/dra/cel.py``).

Run ``python -m tests.dra.make_cel_corpus`` after editing the lists below; the JSON is committed.
Each case: ``{"id", "expression", "device": {"driver", "attributes": {name: {"int"|"bool"|
"string"|"version": v} | {}}, "capacity": {name: quantity}, "allowMultipleAllocations"?}}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GPU = "gpu.example.com"
DEVICES: dict[str, dict[str, Any]] = {
    "h100": {
        "driver": GPU,
        "attributes": {
            "model": {"string": "H100"},
            "cores": {"int": 132},
            "ecc": {"bool": True},
            "driverVersion": {"version": "1.2.3-rc.1+build.5"},
            "numa": {"int": 1},
            "other.example.com/region": {"string": "eu-west"},
            "gpu.example.com/family": {"string": "hopper"},
        },
        "capacity": {"memory": "80Gi", "cpu": "1500m", "other.example.com/bandwidth": "100G"},
    },
    "a10": {
        "driver": GPU,
        "attributes": {
            "model": {"string": "A10"},
            "cores": {"int": 72},
            "ecc": {"bool": False},
            "driverVersion": {"version": "0.9.0"},
            "numa": {"int": 0},
        },
        "capacity": {"memory": "24Gi", "cpu": "2"},
    },
    "bare": {"driver": "nic.example.com", "attributes": {}, "capacity": {}},
}
SPECIAL_DEVICES: dict[str, dict[str, Any]] = {
    "badversion": {"driver": GPU, "attributes": {"v": {"version": "1.2"}}, "capacity": {}},
    "novalue": {"driver": GPU, "attributes": {"empty": {}}, "capacity": {}},
    "multi": {"driver": GPU, "attributes": {}, "capacity": {}, "allowMultipleAllocations": True},
}

A = 'device.attributes["gpu.example.com"]'
C = 'device.capacity["gpu.example.com"]'
# Crossed with every device in DEVICES.
EXPRESSIONS: list[str] = [
    # driver, attribute types, qualified vs unqualified names
    'device.driver == "gpu.example.com"',
    f'device.driver == "gpu.example.com" && {A}.model == "H100"',
    f'{A}.model == "H100"',
    f"{A}.cores >= 100",
    f"{A}.ecc",
    f"{A}.ecc == true",
    f"{A}.numa == 1",
    f'{A}.family == "hopper"',
    'device.attributes["other.example.com"].region.startsWith("eu")',
    'device.attributes["other.example.com"].region == "eu-west"',
    # missing keys, unknown domains, has(), optionals, in
    f"has({A}.model)",
    f"has({A}.nosuch)",
    f"{A}.nosuch == 1",
    'device.attributes["unknown.example.com"].model == "H100"',
    'has(device.attributes["unknown.example.com"].model)',
    f'"model" in {A}',
    '"gpu.example.com" in device.attributes',
    f'{A}[?"model"].orValue("none") == "H100"',
    f'{A}[?"nosuch"].orValue(7) == 7',
    f'{A}[?"cores"].hasValue()',
    f"{A}.?model.hasValue()",
    f"has({A}.cores) && {A}.cores > 64",
    f"!has({A}.cores) || {A}.cores > 64",
    f"{A}.size() > 3",
    f"size({A}) == 5",
    "device.attributes.size() >= 1",
    'device.attributes.exists(d, d == "other.example.com")',
    f"{A}.exists(k, k.startsWith('dri'))",
    f"{A}.all(k, k.size() < 20)",
    f'{A}.exists_one(k, k == "model")',
    f'{A}.filter(k, k.startsWith("c")).size() == 1',
    f"{A}.map(k, k.size()).exists(n, n > 10)",
    # quantities
    f'{C}.memory.compareTo(quantity("40Gi")) >= 0',
    f'{C}.memory.isGreaterThan(quantity("40Gi"))',
    f'{C}.memory.isLessThan(quantity("40Gi"))',
    f'{C}.memory == quantity("80Gi")',
    f'{C}.memory == quantity("81920Mi")',
    f'{C}.cpu.compareTo(quantity("1")) > 0',
    f"{C}.cpu.isInteger()",
    f"{C}.cpu.asApproximateFloat() > 1.0",
    f"{C}.memory.asInteger() > 1000000000",
    f"{C}.cpu.asInteger() == 2",
    f'{C}.memory.add(quantity("16Gi")).isGreaterThan(quantity("90Gi"))',
    f'{C}.memory.sub(quantity("100Gi")).sign() < 0',
    f"{C}.memory.add(1).isInteger()",
    f'{C}.nosuch.compareTo(quantity("1")) == 0',
    f'has({C}.memory) && {C}.memory.compareTo(quantity("32Gi")) >= 0',
    'device.capacity["other.example.com"].bandwidth.compareTo(quantity("10G")) > 0',
    # versions
    f'{A}.driverVersion.isGreaterThan(semver("1.0.0"))',
    f'{A}.driverVersion.isLessThan(semver("1.2.3"))',
    f'{A}.driverVersion.compareTo(semver("1.2.3-rc.1")) == 0',
    f'{A}.driverVersion == semver("1.2.3-rc.1")',
    f"{A}.driverVersion.major() >= 1",
    f"{A}.driverVersion.minor() == 2 || {A}.driverVersion.patch() == 0",
    f'{A}.driverVersion.compareTo(semver("0.10.0")) < 0',
    # strings, regex
    f'{A}.model.matches("^H[0-9]+$")',
    f'{A}.model.lowerAscii() == "h100"',
    f'{A}.model.contains("10")',
    f'{A}.model.endsWith("0")',
    f'{A}.model.find("[0-9]+") == "100"',
    f'{A}.model.findAll("[0-9]").size() == 3',
    f'{A}.model.substring(1) == "100"',
    f'{A}.model.charAt(0) == "H"',
    f'{A}.model.indexOf("1") == 1',
    f'{A}.model.split("1").size() == 2',
    f'{A}.model.replace("H", "X") == "X100"',
    '"%s-%d".format(["H", 100]) == "H-100"',
    'device.driver.split(".").exists(p, p == "example")',
    # lists, sets, bind, two-variable comprehensions
    f'{A}.model in ["H100", "H200"]',
    f"[{A}.cores].max() > 64",
    f"[{A}.cores, {A}.numa].sum() > 100",
    f'sets.contains(["H100", "A10", "B200"], [{A}.model])',
    f'cel.bind(g, {A}, g.model == "H100" && g.cores > 100)',
    f"{A}.all(k, v, k.size() > 0)",
    f'{A}.exists(k, v, k == "cores" && v == 132)',
]
# Device-independent cases, evaluated on the h100 device.
STANDALONE: list[str] = [
    # compile errors: syntax, unknown function/field, wrong types, non-bool results
    "1 +",
    "device.driver ==",
    '"unterminated',
    "device.attributes[",
    "nosuchfunction(1)",
    'device.driver.nosuchmethod("x")',
    "device.nosuch",
    "device.driver + 1 == 2",
    "device.driver == 1",
    "quantity(1).isInteger()",
    'semver(1) == semver("1.0.0")',
    'quantity("1").compareTo(1) == 0',
    "device.driver",
    "1",
    "[true]",
    'quantity("1Gi")',
    'device.capacity["gpu.example.com"].memory',
    'device.capacity["gpu.example.com"].memory + 1',
    '"abc".matches(1)',
    "size(1) == 1",
    "device.allowMultipleAllocations",
    "device.allowMultipleAllocations == false",
    # runtime errors
    "9223372036854775807 + 1 > 0",
    "1 / 0 == 1",
    "1 % 0 == 1",
    "[1, 2][5] == 1",
    '{"a": 1}["b"] == 1',
    'quantity("abc").isInteger()',
    'quantity("1.5").asInteger() == 1',
    'quantity("1Ti").asInteger() > 0',
    'semver("1.2") == semver("1.2.0")',
    'semver("01.2.3").major() == 1',
    'semver("1.2.3-").major() == 1',
    'device.attributes["gpu.example.com"].model',
    'device.attributes["gpu.example.com"].cores',
    "[1].max() == 1 && [].max() == 0",
    '"abc".charAt(10) == "x"',
    '"abc".substring(2, 1) == ""',
    "int(device.driver) == 1",
    '"abc".find("[") == ""',
    # quantity and semver functions on literals
    'isQuantity("1Gi")',
    '!isQuantity("1 Gi")',
    'isQuantity("")',
    'quantity("1Ki") == quantity("1024")',
    'quantity("1k") == quantity("1000")',
    'quantity("500m").isInteger() == false',
    'quantity("0.5").compareTo(quantity("500m")) == 0',
    'quantity("-1").sign() == -1 && quantity("0").sign() == 0',
    'quantity("1e3").asInteger() == 1000',
    'quantity("1.5Gi").asApproximateFloat() == 1610612736.0',
    'quantity("10").sub(3).asInteger() == 7',
    'quantity("100m").add(quantity("900m")).compareTo(quantity("1")) == 0',
    'isSemver("1.2.3")',
    'isSemver("1.2")',
    'isSemver("v1.2", true)',
    'isSemver("1.2.3-alpha.01")',
    'isSemver("1.2.3+build..1")',
    'semver("v1.2", true) == semver("1.2.0")',
    'semver("1.02.3", true).minor() == 2',
    'semver("1.2.3+a") == semver("1.2.3+b")',
    'semver("1.0.0-alpha").isLessThan(semver("1.0.0"))',
    'semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))',
    'semver("1.0.0-2").isLessThan(semver("1.0.0-10"))',
    'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))',
    'semver("2.0.0").compareTo(semver("10.0.0")) == -1',
    'semver("1.2", true).patch() == 0',
    'semver("1.2-rc", true).patch() == 0',
    # strings, lists, optionals, macros
    '"a,b,c".split(",") == ["a", "b", "c"]',
    '["a", "b"].join("-") == "a-b"',
    '"  x ".trim() == "x"',
    '"ABC".lowerAscii() == "abc"',
    '"hello".upperAscii() == "HELLO"',
    'strings.quote("a") == "\\"a\\""',
    '"abc".lastIndexOf("c") == 2',
    '"a1b22c333".findAll("[0-9]+", 2) == ["1", "22"]',
    '"a1b22c333".findAll("[0-9]+", 0) == []',
    '"xyz".find("[0-9]") == ""',
    "[1, 2, 3].exists(x, x > 2)",
    "[1, 2, 3].all(x, x > 0)",
    "[1, 2, 3].exists_one(x, x == 2)",
    "[1, 2, 3].map(x, x * 2) == [2, 4, 6]",
    "[1, 2, 3].filter(x, x % 2 == 1) == [1, 3]",
    "[3, 1, 2].sort() == [1, 2, 3]",
    "[1, 2, 2].distinct() == [1, 2]",
    "[[1], [2, 3]].flatten() == [1, 2, 3]",
    "[1, 2, 3, 4].slice(1, 3) == [2, 3]",
    "[1, 2, 3].reverse() == [3, 2, 1]",
    "lists.range(4) == [0, 1, 2, 3]",
    "[1, 2, 3].isSorted()",
    '["b", "a"].isSorted()',
    "[1, 2, 3].sum() == 6",
    "[1.5, 2.5].sum() == 4.0",
    "[3, 1, 2].min() == 1",
    '["b", "a", "c"].max() == "c"',
    "sets.equivalent([1, 2], [2, 1])",
    "sets.intersects([1, 2], [3])",
    "[1, 2].all(i, v, v > i)",
    "[10, 20].exists(i, v, i == 1 && v == 20)",
    "[1, 2].transformList(i, v, v * 10) == [10, 20]",
    "optional.of(1).orValue(2) == 1",
    "optional.none().orValue(2) == 2",
    '{"a": 1}[?"a"].value() == 1',
    "[1, 2][?5].hasValue() == false",
    "optional.ofNonZeroValue(0).hasValue() == false",
    "cel.bind(x, 2, x * x == 4)",
    "cel.bind(x, [1, 2, 3], x.size() == 3 && x[0] == 1)",
    "1 < 1.5",
    "2 > 1u",
    "1 == 1.0",
    "true ? 1 == 1 : false",
    "false || true && !false",
    "type(1) == int",
    "dyn(1) == 1",
    "double(1) == 1.0",
    'string(12) == "12"',
    'int("12") == 12',
    'timestamp("2024-01-01T00:00:00Z") < timestamp("2025-01-01T00:00:00Z")',
    'duration("1h") > duration("30m")',
    'b"abc".size() == 3',
    "null == null",
    '{"a": 1, "b": 2}.size() == 2',
    '"é".size() == 1',
    # cost: comprehensions far beyond the limit, and well below it
    "lists.range(1000).all(i, lists.range(1000).all(j, true))",
    "lists.range(2000).all(i, lists.range(2000).exists(j, false) == false)",
    "lists.range(100).all(i, lists.range(50).all(j, i + j >= 0))",
    "lists.range(100).map(i, i * 2).size() == 100",
    # very long expressions (upstream's limit on length is API validation's, not the compiler's)
    " || ".join(f'device.attributes["gpu.example.com"].model == "M{i}"' for i in range(300))
    + ' || device.driver == "gpu.example.com"',
    " && ".join(f"{i} < {i + 1}" for i in range(500)),
    "[" + ", ".join(str(i) for i in range(1000)) + "].size() == 1000",
    '"' + "x" * 5000 + '".size() == 5000',
]
# (expression, special device).
SPECIAL: list[tuple[str, str]] = [
    ("true", "badversion"),
    ('device.attributes["gpu.example.com"].v.major() == 1', "badversion"),
    ("true", "novalue"),
    ("device.allowMultipleAllocations", "multi"),
    ("device.allowMultipleAllocations == true", "multi"),
    ('device.attributes["gpu.example.com"].size() == 0', "multi"),
    ('device.capacity["gpu.example.com"].size() == 0', "multi"),
    ("device.attributes.size() == 0", "multi"),
]

# (expression, why): where the adapter knowingly differs from upstream (docs/design/dra-cel.md,
# "Known deviations"). Kept out of the agreement count; test_known_deviations_still_differ pins
# them, so a fix shows up as a failure that asks to move the case into the corpus proper.
KNOWN_DEVIATIONS: list[tuple[str, str]] = [
    (
        f"[{A}.cores, 4, 8].max() > 64",
        "cel-go's HomogeneousAggregateLiterals rejects a list literal mixing dyn and int at compile time; "
        "cel-cpp accepts it",
    ),
    (
        f'"%s-%d".format([{A}.model, {A}.cores]) == "H100-132"',
        "cel-go checks format() clauses against a literal list at compile time and rejects dyn elements; "
        "cel-cpp formats them",
    ),
    ('int("x") == 1', "cel-go folds constant calls when it plans the program (a compile error); cel-cpp fails at run"),
    (
        'quantity("100m").add(quantity("900m")).isInteger()',
        "upstream's isInteger/asInteger depend on the quantity's internal scale (1000m is not an integer); "
        "the adapter keeps only the value (nano units)",
    ),
    (
        "lists.range(20000).all(i, true)",
        "the cost bound is cel-cpp's 10,000-iteration budget; upstream's 1,000,000 cost units allow this",
    ),
    (
        "[1, 2].max() + 1.5 > 0",
        "the Kubernetes list functions are declared on list(dyn) returning dyn here (no type parameters in "
        "cel-expr-python), so a wrong use of the result type-checks",
    ),
    ("[1, 2].indexOf(2) == 1", "<list>.indexOf/lastIndexOf collide with cel-cpp's strings extension: not declared"),
    ('isURL("https://example.com")', "the URL library is not implemented"),
    ('isIP("10.0.0.1")', "the IP and CIDR libraries are not implemented"),
    ('{"a": 1}.transformMap(k, v, v + 1) == {"a": 2}', "cel-expr-python lacks cel.@mapInsert at run time"),
    (
        "has(device.driver)",
        "device's fields are qualified variables here (cel-expr-python has no object types without protos); "
        "has() on them misbehaves",
    ),
]


def corpus() -> list[dict[str, Any]]:
    """The cases, with stable ids (``x<n>-<device>``, ``s<n>``, ``p<n>-<device>``)."""
    out: list[dict[str, Any]] = []
    for i, expr in enumerate(EXPRESSIONS):
        for name, dev in DEVICES.items():
            out.append({"id": f"x{i}-{name}", "expression": expr, "device": dev})
    for i, expr in enumerate(STANDALONE):
        out.append({"id": f"s{i}", "expression": expr, "device": DEVICES["h100"]})
    for i, (expr, name) in enumerate(SPECIAL):
        out.append({"id": f"p{i}-{name}", "expression": expr, "device": SPECIAL_DEVICES[name]})
    for i, (expr, why) in enumerate(KNOWN_DEVIATIONS):
        out.append({"id": f"k{i}", "expression": expr, "device": DEVICES["h100"], "knownDeviation": why})
    return out


PATH = Path(__file__).with_name("cel_corpus.json")

if __name__ == "__main__":
    cases = corpus()
    PATH.write_text(json.dumps(cases, indent=1) + "\n", encoding="utf-8")
    print(f"{len(cases)} cases -> {PATH}")
