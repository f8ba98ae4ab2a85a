"""Kubernetes resource quantities, parsed into integers without ever blowing up.

Mirrors ``k8s.io/apimachinery/pkg/api/resource/quantity.go`` (``ParseQuantity``) and
``suffix.go``: a quantity is a signed decimal number (``12``, ``1.5``, ``.5``, ``5.``) with at
most one suffix: binary (``Ki`` ... ``Ei``), decimal SI (``n``, ``u``, ``m``, ``k``, ``M`` ...
``E``) or a decimal exponent (``e3``, ``E-2``, any int64, truncated to int32 exactly as
``suffixHandler.interpret`` does). Every string ``ParseQuantity`` accepts is accepted here,
with the same value:

* non-zero amounts are rounded up (away from zero) to nano units (``1e-1000000`` is ``1n``);
* binary amounts are capped at ``2^63 - 1``, as upstream's ``maxAllowed``;
* ``Value()`` rounds up to an integer and ``MilliValue()`` to thousandths (``0.5`` memory is
  1 byte, ``1.0001`` cpu is 1001 millicores).

Upstream's ``Value()``/``MilliValue()`` silently overflow int64 for larger amounts (the result
is undefined, often negative); here they **saturate** at the int64 bounds instead, so
``cpu: 1e1000000`` (which the API server accepts and stores as ``10e999999``) is
``9223372036854775807`` millicores: more than any node has, hence ``Insufficient cpu``. The
amount is never materialised, so a huge exponent costs no more than a small one.
"""

from __future__ import annotations

import re
from functools import lru_cache

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
NANO_DIGITS = 9
"""``resource.Nano``: the finest scale a quantity keeps (``ParseQuantity`` rounds up to it)."""
SATURATED_NANOS = 10**40
"""The magnitude, in nano units, standing for every amount too large to matter (>= 10^21 units
is beyond int64 at any scale we read); ``value``/``milli_value`` clamp it to the int64 bounds."""
_NANOS_PER_UNIT = 1_000_000_000
_NANOS_PER_MILLI = 1_000_000
_MAX_ALLOWED_NANOS = INT64_MAX * _NANOS_PER_UNIT
"""``maxAllowed`` (2^63-1) in nano units: the cap ``ParseQuantity`` puts on binary amounts."""

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
"""Binary suffixes: the power of two."""
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
"""Decimal SI suffixes: the power of ten."""
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_INT64_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
"""What ``strconv.ParseInt(s, 10, 64)`` accepts, before its range check."""
_MAX_INT64_FACTORS = 18
"""``maxInt64Factors``: decimal digits that always fit an int64 (the fast path's limit)."""

FORMAT_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
"""``ErrFormatWrong``'s text."""


class QuantityError(ValueError):
    """Raised when a string is not a Kubernetes quantity (``ParseQuantity`` would reject it)."""


def _wrap32(n: int) -> int:
    """Go's ``int32`` arithmetic: ``n`` wrapped into [-2^31, 2^31)."""
    return ((n + 2**31) % 2**32) - 2**31


def _split(s: str) -> tuple[bool, str, str, str, str]:
    """``parseQuantityString``: (positive, value, num, denom, suffix).

    ``num`` has its leading zeros stripped (``"0"`` when nothing is left), ``value`` is the
    signed number text. Quirks kept: ``"-"``, ``"+"`` and ``"."`` are zero; ``"1."`` is 1.

    Raises:
        QuantityError: ``ErrFormatWrong``.
    """
    end = len(s)
    pos = 0
    positive = True
    if pos < end and s[0] in "+-":
        positive = s[0] == "+"
        pos += 1
    while pos < end and s[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and s[pos].isascii() and s[pos].isdigit():
        pos += 1
    num = s[start:pos] or "0"
    if pos >= end:
        return positive, s, num, "", ""
    denom = ""
    if s[pos] == ".":
        pos += 1
        start = pos
        while pos < end and s[pos].isascii() and s[pos].isdigit():
            pos += 1
        denom = s[start:pos]
        if pos >= end:
            return positive, s, num, denom, ""
    value = s[:pos]
    suffix_start = pos
    while pos < end and s[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and s[pos] in "+-":
        pos += 1
    while pos < end and s[pos].isascii() and s[pos].isdigit():
        pos += 1
    if pos < end:
        raise QuantityError(f"{FORMAT_ERROR}: {s!r}")
    return positive, value, num, denom, s[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int] | None:
    """``suffixHandler.interpret``: (base, exponent), or None for an unknown suffix."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE" and _INT64_TEXT.fullmatch(suffix[1:]):
        parsed = int(suffix[1:])
        if INT64_MIN <= parsed <= INT64_MAX:
            return 10, _wrap32(parsed)  # int32(parsed), as upstream
    return None


def _decimal_nanos(digits: str, exp10: int) -> int:
    """``digits * 10^exp10`` (no sign, no leading zeros) in nano units, rounded up; saturated."""
    if not digits:
        return 0
    stripped = digits.rstrip("0")
    exp10 += len(digits) - len(stripped)
    digits = stripped
    length = len(digits)
    if length + exp10 > 21:  # >= 10^21 units: past int64 even in whole units (9.2 * 10^18)
        return SATURATED_NANOS
    shift = exp10 + NANO_DIGITS
    if shift >= 0:
        return int(digits + "0" * shift)  # at most 30 digits
    keep = length + shift  # at most 30 digits
    if keep <= 0:
        return 1  # a non-zero amount below 1n rounds up to 1n
    return int(digits[:keep]) + 1  # the dropped digits end in a non-zero digit


def _binary_nanos(num: str, denom: str, exponent: int) -> int:
    """``num.denom * 2^exponent`` in nano units, rounded up, capped at ``maxAllowed``."""
    if len(num) > 19:  # num >= 10^19 > 2^63 before the (>= 1) multiplier
        return _MAX_ALLOWED_NANOS
    # 40 fraction digits are exact to far below a nano unit even after * 2^60; a non-zero
    # remainder beyond them still rounds the nano count up.
    head, tail = denom[:40], denom[40:].strip("0")
    numerator = (int(num + head) << exponent) * _NANOS_PER_UNIT
    q, r = divmod(numerator, int("1" + "0" * len(head)))
    if r or tail:
        q += 1
    return min(q, _MAX_ALLOWED_NANOS)


# Cached: the same few strings ("500m", "1Gi", "8") recur across thousands of pods and nodes.
@lru_cache(maxsize=4096)
def parse_quantity(text: str | int | float) -> int:
    """``ParseQuantity`` then ``ScaledValue(resource.Nano)``, exact and without overflow.

    Args:
        text: the quantity as the API serves it (``"100m"``, ``"1Gi"``, ``"2"``,
            ``"10e999999"``), or a bare JSON number. Surrounding whitespace is ignored, as
            ``Quantity.UnmarshalJSON`` does.

    Returns:
        The amount in nano units (10^-9 cores for cpu, 10^-9 bytes for memory): exact for
        amounts below 10^21 units, ``±SATURATED_NANOS`` beyond (binary amounts cap at
        ``2^63 - 1`` units first, as upstream).

    Raises:
        QuantityError: ``ParseQuantity`` rejects the text (never for a value the API server
            stored in a built-in object, since it validated it with ``ParseQuantity``).
    """
    s = str(text).strip() if isinstance(text, int | float) else text.strip()
    if not s:
        raise QuantityError(f"{FORMAT_ERROR}: {text!r}")
    positive, value, num, denom, suffix = _split(s)
    interpreted = _interpret(suffix)
    if interpreted is None:
        raise QuantityError(f"unable to parse quantity's suffix: {text!r}")
    base, exponent = interpreted
    has_digits = any(c.isdigit() for c in value)
    if base == 2:
        # The int64 fast path takes whole numbers with a few digits; the inf.Dec path must parse
        # ``value`` ("Pi" alone has no number, so it is rejected there while "Ki" is 0).
        fast = not denom and 15 - len(num) - exponent * 3 // 10 - 1 >= 0 and int(num) << exponent <= INT64_MAX
        if not fast and not has_digits:
            raise QuantityError(f"unable to parse numeric part of quantity: {text!r}")
        nanos = _binary_nanos(num, denom, exponent)
    else:
        if len(num) + len(denom) <= _MAX_INT64_FACTORS and _wrap32(exponent - len(denom)) >= -NANO_DIGITS:
            # The int64 fast path: num+denom scaled by the int32-wrapped exponent.
            exp10 = _wrap32(exponent - len(denom))
        else:
            # The inf.Dec path: the scale is len(denom) - exponent in int32 arithmetic.
            if not has_digits:
                raise QuantityError(f"unable to parse numeric part of quantity: {text!r}")
            exp10 = -_wrap32(len(denom) + _wrap32(-exponent))
        nanos = _decimal_nanos((num + denom).lstrip("0"), exp10)
    return nanos if positive else -nanos


def _ceil_div(n: int, d: int) -> int:
    return -((-n) // d)


def _int64(n: int) -> int:
    return INT64_MAX if n > INT64_MAX else INT64_MIN if n < INT64_MIN else n


def value(text: str | int | float) -> int:
    """``Quantity.Value()``: the quantity rounded up to an integer (bytes, counts), saturated
    at the int64 bounds.

    Raises:
        QuantityError: the text is not a quantity.
    """
    return _int64(_ceil_div(parse_quantity(text), _NANOS_PER_UNIT))


def milli_value(text: str | int | float) -> int:
    """``Quantity.MilliValue()``: the quantity in thousandths rounded up (millicores),
    saturated at the int64 bounds.

    Raises:
        QuantityError: the text is not a quantity.
    """
    return _int64(_ceil_div(parse_quantity(text), _NANOS_PER_MILLI))
