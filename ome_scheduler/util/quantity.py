"""Kubernetes resource quantities, parsed into integers.

Mirrors ``k8s.io/apimachinery/pkg/api/resource/quantity.go``: a quantity is a signed decimal
number with an optional binary suffix (``Ki`` ... ``Ei``), decimal suffix (``n``, ``u``, ``m``,
``k``, ``M`` ... ``E``) or decimal exponent (``e3``, ``E-2``). ``Value()`` rounds up to an
integer and ``MilliValue()`` rounds up to thousandths, exactly as upstream does, so ``0.5``
memory is 1 byte and ``1.0001`` cpu is 1001 millicores.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# A signed number, then at most one suffix: binary (Ki..Ei), decimal SI (n..E) or exponent (e3).
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))((?:[eE][+-]?\d+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")


class QuantityError(ValueError):
    """Raised when a string is not a Kubernetes quantity."""


# Cached: the same few strings ("500m", "1Gi", "8") recur across thousands of pods and nodes.
@lru_cache(maxsize=4096)
def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity into an exact :class:`~decimal.Decimal`.

    Args:
        text: the quantity as the API serves it (``"100m"``, ``"1Gi"``, ``"2"``, ``"1e3"``),
            or a bare number.

    Returns:
        The value in base units (cores for cpu, bytes for memory, plain counts otherwise).

    Raises:
        QuantityError: the text is not a quantity.
    """
    if isinstance(text, int | float):
        return Decimal(str(text))  # via str: Decimal(0.1) would carry the binary float error
    s = text.strip()
    m = _RE.match(s)
    if not m:
        raise QuantityError(
            f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    number, suffix = m.group(1), m.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex already guards this
        raise QuantityError(f"invalid quantity {text!r}") from exc
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    return value * (Decimal(10) ** int(suffix[1:]))  # the decimal exponent form: e3, E-2


def value(text: str | int | float) -> int:
    """``Quantity.Value()``: the quantity rounded up to an integer (bytes, counts).

    Raises:
        QuantityError: the text is not a quantity.
    """
    return int(parse_quantity(text).to_integral_value(rounding=ROUND_CEILING))


def milli_value(text: str | int | float) -> int:
    """``Quantity.MilliValue()``: the quantity in thousandths rounded up (millicores).

    Raises:
        QuantityError: the text is not a quantity.
    """
    return int((parse_quantity(text) * 1000).to_integral_value(rounding=ROUND_CEILING))
