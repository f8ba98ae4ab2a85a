"""Quantities against k8s.io/apimachinery's ``ParseQuantity`` (v0.35.4) itself.

``quantity_upstream.json`` holds 650 strings with what ``ParseQuantity`` made of them: an
error, the exact amount in nano units, or ``huge`` (more than 10^21 units). They were
produced by ``quantity_oracle/main.go`` (the Go library run on edge cases and on random
strings of every suffix, exponent up to the int64 bounds, long numerators and fractions).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ome_scheduler.util.quantity import (
    INT64_MAX,
    INT64_MIN,
    SATURATED_NANOS,
    QuantityError,
    milli_value,
    parse_quantity,
    value,
)

CASES: list[list[str]] = json.loads((Path(__file__).parent / "quantity_upstream.json").read_text())


@pytest.mark.parametrize(("text", "want"), CASES, ids=[c[0] or "<empty>" for c in CASES])
def test_parse_quantity_matches_apimachinery(text: str, want: str) -> None:
    if want == "error":
        with pytest.raises(QuantityError):
            parse_quantity(text)
    elif want in ("huge", "-huge"):
        assert parse_quantity(text) == (SATURATED_NANOS if want == "huge" else -SATURATED_NANOS)
    else:
        assert parse_quantity(text) == int(want)


@pytest.mark.parametrize(
    ("text", "milli", "val"),
    [
        ("100m", 100, 1),  # Value() rounds up
        ("1.0001", 1001, 2),
        ("0.5", 500, 1),
        ("1n", 1, 1),  # MilliValue() rounds up too
        ("1e-1000000", 1, 1),  # ParseQuantity rounds it up to 1n
        ("-1n", 0, 0),  # ceil, toward +inf
        ("-1.5", -1500, -1),
        ("1Gi", 1024**3 * 1000, 1024**3),
        ("8Ei", INT64_MAX, INT64_MAX),  # binary amounts are capped at 2^63-1 by ParseQuantity
        ("9223372036854775807", INT64_MAX, INT64_MAX),  # MilliValue would overflow: saturated
        ("10e999999", INT64_MAX, INT64_MAX),  # what the API server stores for 1e1000000
        ("-10e999999", INT64_MIN, INT64_MIN),
        ("1e4294967296", 1000, 1),  # int32(4294967296) == 0, as upstream
    ],
)
def test_value_and_milli_value_round_up_and_saturate(text: str, milli: int, val: int) -> None:
    assert milli_value(text) == milli
    assert value(text) == val


def test_bare_json_numbers_and_surrounding_whitespace() -> None:
    assert milli_value(2) == 2000
    assert milli_value(0.25) == 250
    assert value(" 1Ki ") == 1024


def test_huge_inputs_cost_no_more_than_small_ones() -> None:
    texts = ["9" * 100_000, "1." + "0" * 100_000 + "1e100000", "1e2147483647", "0." + "9" * 50_000 + "Ei"]
    start = time.perf_counter()
    for t in texts:
        value(t)
        milli_value(t)
    assert time.perf_counter() - start < 0.5
    assert value("9" * 100_000) == INT64_MAX
    assert value("1." + "0" * 100_000 + "1e100000") == INT64_MAX
    assert value("0." + "9" * 50_000 + "Ei") == 2**60  # rounded up at nano, then to an integer
