"""CEL device selectors: a temporary stand-in with the interface of branch ``h24-cel``.

The real adapter (compile once, evaluate per device, bounded cost) is being written on
``h24-cel``; merging that branch replaces this file. Until then this stand-in evaluates a small
subset so the allocator and the plugin can be exercised: ``true``, ``false``, ``!``, ``&&``,
``||``, parentheses, the comparisons ``== != < <= > >=`` between integers, strings and
booleans, and the paths ``device.driver`` and ``device.attributes["domain"].name``. A missing
attribute is a runtime error (``no such key``), as in CEL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ome_scheduler.api.resource import DeviceAttribute, DeviceCapacity


class CELCompileError(ValueError):
    """The expression does not compile (syntax, types, or its estimated cost is too high)."""


class CELRuntimeError(RuntimeError):
    """Evaluating the expression failed (no such key, no such overload, cost limit exceeded)."""


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What a selector sees of one device: ``device.driver``, ``device.attributes``, ``device.capacity``.

    ``attributes`` and ``capacity`` are keyed by qualified name as the slice publishes them; an
    unqualified name belongs to the ``driver``'s domain.
    """

    driver: str
    attributes: Mapping[str, DeviceAttribute]
    capacity: Mapping[str, DeviceCapacity]


_TOKEN = re.compile(r'\s*(?:(\d+)|"((?:[^"\\]|\\.)*)"|(&&|\|\||==|!=|<=|>=|[<>!().\[\]])|([A-Za-z_][\w]*))')


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise CELCompileError(f"Syntax error: unexpected character at {pos}: {text[pos : pos + 10]!r}")
        pos = m.end()
        if m.group(1) is not None:
            out.append(("lit", int(m.group(1))))
        elif m.group(2) is not None:
            out.append(("lit", m.group(2)))
        elif m.group(3) is not None:
            out.append(("op", m.group(3)))
        else:
            word = m.group(4)
            out.append(("lit", word == "true") if word in ("true", "false") else ("id", word))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, kind: str, value: Any = None) -> Any:
        t = self.peek()
        if t is None or t[0] != kind or (value is not None and t[1] != value):
            raise CELCompileError(f"Syntax error: expected {value or kind} at token {self.i}")
        self.i += 1
        return t[1]

    def accept(self, value: str) -> bool:
        t = self.peek()
        if t == ("op", value):
            self.i += 1
            return True
        return False

    def expr(self) -> Any:
        node = self.conj()
        while self.accept("||"):
            node = ("||", node, self.conj())
        return node

    def conj(self) -> Any:
        node = self.cmp()
        while self.accept("&&"):
            node = ("&&", node, self.cmp())
        return node

    def cmp(self) -> Any:
        node = self.unary()
        t = self.peek()
        if t is not None and t[0] == "op" and t[1] in ("==", "!=", "<", "<=", ">", ">="):
            self.i += 1
            node = (t[1], node, self.unary())
        return node

    def unary(self) -> Any:
        if self.accept("!"):
            return ("!", self.unary())
        if self.accept("("):
            node = self.expr()
            self.take("op", ")")
            return node
        t = self.peek()
        if t is not None and t[0] == "lit":
            self.i += 1
            return ("lit", t[1])
        if self.take("id") != "device":
            raise CELCompileError("undeclared reference")
        path: list[str] = []
        while True:
            if self.accept("."):
                path.append(self.take("id"))
            elif self.accept("["):
                key = self.take("lit")
                if not isinstance(key, str):
                    raise CELCompileError("map keys are strings")
                path.append(key)
                self.take("op", "]")
            else:
                break
        if not path or path[0] not in ("driver", "attributes", "capacity"):
            raise CELCompileError("undefined field")
        return ("path", tuple(path))


def _attr_value(a: DeviceAttribute) -> Any:
    for v in (a.int_value, a.bool_value, a.string_value, a.version_value):
        if v is not None:
            return v
    raise CELRuntimeError("attribute without a value")


def _lookup(path: tuple[str, ...], d: DeviceView) -> Any:
    if path == ("driver",):
        return d.driver
    if len(path) != 3:
        raise CELRuntimeError("no such overload")
    table: Mapping[str, Any] = d.attributes if path[0] == "attributes" else d.capacity
    domain, name = path[1], path[2]
    for key in (f"{domain}/{name}", name if domain == d.driver else None):
        if key is not None and key in table:
            v = table[key]
            return _attr_value(v) if isinstance(v, DeviceAttribute) else v.value
    raise CELRuntimeError(f"no such key: {name}")


def _eval(node: Any, d: DeviceView) -> Any:
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "path":
        return _lookup(node[1], d)
    if op == "!":
        v = _eval(node[1], d)
        if not isinstance(v, bool):
            raise CELRuntimeError("no such overload")
        return not v
    if op in ("&&", "||"):
        a = _eval(node[1], d)
        if not isinstance(a, bool):
            raise CELRuntimeError("no such overload")
        if (op == "&&" and not a) or (op == "||" and a):
            return a
        b = _eval(node[2], d)
        if not isinstance(b, bool):
            raise CELRuntimeError("no such overload")
        return b
    a, b = _eval(node[1], d), _eval(node[2], d)
    if type(a) is not type(b):
        raise CELRuntimeError("no such overload")
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if isinstance(a, bool):
        raise CELRuntimeError("no such overload")
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


class CompiledSelector:
    """One compiled selector; :meth:`matches` evaluates it for a device."""

    __slots__ = ("expression", "_ast")

    def __init__(self, expression: str, ast: Any) -> None:
        self.expression = expression
        self._ast = ast

    def matches(self, device: DeviceView) -> bool:
        """Whether ``device`` passes.

        Raises:
            CELRuntimeError: a missing key, mismatched types, or a result that is not a bool.
        """
        v = _eval(self._ast, device)
        if not isinstance(v, bool):
            raise CELRuntimeError("expression must evaluate to bool")
        return v


def compile_selector(expression: str) -> CompiledSelector:
    """Compile ``expression``.

    Raises:
        CELCompileError: a syntax error or an unknown reference.
    """
    p = _Parser(expression)
    ast = p.expr()
    if p.peek() is not None:
        raise CELCompileError(f"Syntax error: unexpected token {p.peek()!r}")
    return CompiledSelector(expression, ast)
