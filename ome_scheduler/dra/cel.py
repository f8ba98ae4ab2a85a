"""CEL device selectors (interface first; the body lands in the next commits).

Mirrors ``k8s.io/dynamic-resource-allocation@v0.35.4/cel/compile.go`` and ``cache.go``.

Interface:

* ``compile_selector(expression: str) -> CompiledSelector``: cached by expression (LRU);
  raises ``CELCompileError`` with upstream's message text.
* ``CompiledSelector.matches(device: DeviceView) -> bool``: raises ``CELRuntimeError``
  (``CELCostLimitError``, a subclass, when the runtime cost limit is exceeded). Results are
  memoised per (expression, ``device.key``) when ``device.key`` is not None.
* ``DeviceView(driver, attributes, capacity, allow_multiple_allocations=False, key=None)``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field


class CELError(Exception):
    """A selector failed; ``str(exc)`` is upstream's message text."""


class CELCompileError(CELError):
    """The expression does not compile (syntax, unknown function, wrong types, not a bool)."""


class CELRuntimeError(CELError):
    """Evaluating the expression against one device failed (``no such key``, overflow, ...)."""


class CELCostLimitError(CELRuntimeError):
    """The runtime cost limit was exceeded (``operation cancelled: actual cost limit exceeded``)."""


@dataclass(frozen=True, slots=True)
class Version:
    """A ``version`` attribute: semver text (``DeviceAttribute.version``), typed as a CEL semver."""

    text: str


AttributeValue = int | bool | str | Version | None
"""One attribute's value; None stands for an attribute with no value set (a runtime error)."""


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What a selector sees of one device.

    ``attributes``: qualified name (``domain/id`` or a bare ``id`` in the driver's domain) to
    value. ``capacity``: qualified name to quantity text (``"40Gi"``). ``key``: identity for
    memoisation, e.g. (slice uid, slice generation, device name); None disables it.
    """

    driver: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    key: Hashable | None = None


class CompiledSelector:
    """One compiled selector expression."""

    def __init__(self, expression: str) -> None:
        self.expression = expression

    def matches(self, device: DeviceView) -> bool:
        """Whether ``device`` satisfies the selector. Raises CELRuntimeError."""
        raise CELRuntimeError("not implemented yet")


def compile_selector(expression: str) -> CompiledSelector:
    """Compile ``expression`` (cached). Raises CELCompileError."""
    raise CELCompileError("not implemented yet")
