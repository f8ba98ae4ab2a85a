"""CEL device selectors: compile once, evaluate per device, bounded cost.

Mirrors ``k8s.io/dynamic-resource-allocation@v0.35.4/cel/compile.go`` (the ``device``
variable, the environment, ``DeviceMatches``) and ``cel/cache.go`` (compiled selectors by
expression, LRU), on ``cel-expr-python`` (Google's cel-cpp: parser, type checker and runtime).
``docs/design/dra-cel.md`` says why that library, what was measured and where it differs from
upstream's cel-go; ``tests/dra/test_cel_differential.py`` holds it to upstream's Go.

Interface
---------
``compile_selector(expression: str) -> CompiledSelector``
    Compiled with the environment of kube-scheduler 1.35 (``cel.NewCache(10, ...)``, stored
    expressions, no cost estimation). Cached by expression (LRU, ``COMPILE_CACHE_SIZE``; only
    successes are cached, as upstream). Raises ``CELCompileError`` whose text is upstream's
    ``CompilationResult.Error``: ``compilation failed: ERROR: <input>:L:C: ...`` (syntax,
    undeclared reference, no matching overload) or ``must evaluate to bool or the unknown
    type, not T``.

``CompiledSelector.matches(device: DeviceView) -> bool``
    ``DeviceMatches``. Raises ``CELRuntimeError`` with upstream's text where the cause is the
    same (``no such key: model``, ``integer overflow``, ``division by zero``, ``attribute X:
    parse semantic version: ...``, ``CEL result of type int could not be converted to bool:
    ...``), and ``CELCostLimitError`` (a ``CELRuntimeError``) with
    ``operation cancelled: actual cost limit exceeded`` when the cost bound is hit (see
    *Cost*). Results, errors included, are memoised per (expression, ``device.key``) in a
    bounded LRU (``RESULT_CACHE_SIZE``) when ``device.key`` is not None.

``DeviceView(driver, attributes, capacity, allow_multiple_allocations=False, key=None)``
    ``driver: str``; ``attributes: Mapping[str, int | bool | str | Version | None]`` keyed by
    qualified name (``gpu.example.com/model``, or ``model`` in the driver's domain, split at
    the first ``/`` as ``parseQualifiedName``); ``None`` is an attribute with no value set
    (``attribute X: unsupported attribute value``). ``capacity: Mapping[str, str]``: qualified
    name to the quantity text as the API serves it (``"80Gi"``), parsed with
    ``util/quantity.py``. ``key: Hashable | None``: the device's identity for memoisation,
    e.g. ``(slice uid, slice metadata.generation, device name)``; anything that changes when
    the device's attributes or capacity can change.

What a selector sees (``device``)
---------------------------------
``device.driver`` (string), ``device.attributes`` (map domain -> map id -> dyn: int, bool,
string or ``kubernetes.Semver``), ``device.capacity`` (map domain -> map id ->
``kubernetes.Quantity``), ``device.allowMultipleAllocations`` (bool; 1.35's cache declares it
whatever the DRAConsumableCapacity gate says, false unless set). Looking up a domain the device
does not have gives an empty map (upstream's ``mapper.Find``), so
``device.attributes["other.com"].model`` fails with ``no such key: model`` and
``has(device.attributes["other.com"].model)`` is false; a missing id is ``no such key: <id>``.

Libraries (``environment.MustBaseEnvSet`` for 1.35, plus ``ext.Bindings``): the standard
library with optionals, cel-cpp's ``strings`` (version 2), ``sets``, ``lists`` and two-variable
comprehensions, ``cel.bind``; here in Python: Kubernetes ``quantity`` (``quantity``,
``isQuantity``, ``sign``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``add``, ``sub``,
``asInteger``, ``isInteger``, ``asApproximateFloat``), ``semver`` (``semver(s[, normalize])``,
``isSemver(s[, normalize])``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``major``,
``minor``, ``patch``), ``regex`` (``find``, ``findAll``) and ``lists`` (``isSorted``, ``sum``,
``min``, ``max``). Not available (compile errors here, accepted upstream; open, see the design
doc): URL, IP, CIDR and format libraries, ``<list>.indexOf``/``lastIndexOf``.

Cost
----
cel-cpp tracks no CEL cost. The bound used instead is cel-cpp's comprehension iteration budget
(``ITERATION_BUDGET`` iterations per evaluation, over all comprehensions), reported as upstream's
cost error. Upstream's limit (``CELSelectorExpressionMaxCost``, 1,000,000) is reached after
roughly 250,000 trivial iterations, so an expression iterating between 10,000 and that many
times fails here and passes upstream. Without comprehensions a selector of at most
``CELSelectorExpressionMaxLength`` (10 KiB) over one device (at most 32 attributes and
capacities, strings of at most 64 characters) cannot come near the limit.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from cel_expr_python import cel
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from ome_scheduler.util.quantity import QuantityError, parse_quantity

CEL_SELECTOR_EXPRESSION_MAX_COST = 1_000_000
"""``resourceapi.CELSelectorExpressionMaxCost``: upstream's runtime cost limit (CEL cost units)."""
CEL_SELECTOR_EXPRESSION_MAX_LENGTH = 10 * 1024
"""``resourceapi.CELSelectorExpressionMaxLength`` (bytes): enforced by API validation, not here."""
ITERATION_BUDGET = 10_000
"""cel-cpp's comprehension iteration budget per evaluation (fixed in ``cel-expr-python``): the
stand-in for the cost limit."""
COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"
"""cel-go's ``EvalCancelledError`` text for ``CostLimitExceeded``."""
COMPILE_CACHE_SIZE = 64
"""Compiled selectors kept (upstream's scheduler keeps 10; compiling costs ~50-100 µs here)."""
RESULT_CACHE_SIZE = 65_536
"""(expression, device key) results kept."""


class CELError(Exception):
    """A selector failed; ``str(exc)`` is upstream's message text."""


class CELCompileError(CELError):
    """The expression does not compile (syntax, unknown function, wrong types, not a bool)."""


class CELRuntimeError(CELError):
    """Evaluating the expression against one device failed (``no such key``, overflow, ...)."""


class CELCostLimitError(CELRuntimeError):
    """The cost bound was hit (``operation cancelled: actual cost limit exceeded``)."""


@dataclass(frozen=True, slots=True)
class Version:
    """A ``version`` attribute: semver text (``DeviceAttribute.version``), typed as a CEL semver."""

    text: str


AttributeValue = int | bool | str | Version | None
"""One attribute's value; None stands for an attribute with no value set (a runtime error)."""


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What a selector sees of one device (upstream's ``cel.Device``).

    Attributes:
        driver: the slice's driver, also the domain of unqualified names.
        attributes: qualified name (``domain/id`` or ``id``) to value.
        capacity: qualified name to quantity text (``"40Gi"``).
        allow_multiple_allocations: ``device.allowMultipleAllocations``.
        key: identity for memoisation (e.g. slice uid, slice generation, device name); None
            disables it.
    """

    driver: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    key: Hashable | None = None


# --- opaque Kubernetes types as proto messages -------------------------------------------
# cel-expr-python cannot pass Python objects as opaque CEL values; messages of a private pool
# stand in for apiservercel.Quantity and apiservercel.Semver. Each holds one canonical field,
# so CEL's message equality is upstream's Equal (Quantity.Equal, Semver EQ ignoring build).

_POOL = descriptor_pool.DescriptorPool()
_FILE = descriptor_pb2.FileDescriptorProto(name="ome_scheduler/dra/cel.proto", package="kubernetes", syntax="proto3")
for _name in ("Quantity", "Semver"):
    _msg = _FILE.message_type.add(name=_name)
    _msg.field.add(name="__v", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
_POOL.Add(_FILE)
_QuantityMsg: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("kubernetes.Quantity"))
_SemverMsg: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("kubernetes.Semver"))
QUANTITY = cel.Type("kubernetes.Quantity")
SEMVER = cel.Type("kubernetes.Semver")
_INT64_MAX = 2**63 - 1
_NANO = 10**9


def _qmsg(nanos: int) -> Message:
    m: Message = _QuantityMsg()
    setattr(m, "__v", str(nanos))
    return m


def _nanos(m: Message) -> int:
    return int(getattr(m, "__v"))


class _EvalError(Exception):
    """Raised by a library function: becomes a CEL error value with this text."""


def _quantity(text: str) -> Message:
    try:
        return _qmsg(parse_quantity(text))
    except QuantityError as exc:
        # apimachinery's ParseQuantity errors carry no input; util's do (after ": ").
        raise _EvalError(str(exc).rsplit(": ", 1)[0]) from exc


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _cmp(a: Any, b: Any) -> int:
    """-1, 0 or 1 (Go's ``Cmp``) for two ordered values."""
    return int(a > b) - int(a < b)


def _q_as_integer(q: Message) -> int:
    n = _nanos(q)
    if n % _NANO or not -(2**63) <= n // _NANO <= _INT64_MAX:
        raise _EvalError("cannot convert value to integer")
    return n // _NANO


def _q_is_integer(q: Message) -> bool:
    n = _nanos(q)
    return not n % _NANO and -(2**63) <= n // _NANO <= _INT64_MAX


# --- semver (github.com/blang/semver/v4 Parse and Compare) --------------------------------

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_Semver = tuple[int, int, int, tuple[int | str, ...]]


def _uint(s: str) -> int:
    if not s:
        raise _EvalError(f'strconv.ParseUint: parsing "{s}": invalid syntax')
    n = int(s)
    if n >= 2**64:
        raise _EvalError(f'strconv.ParseUint: parsing "{s}": value out of range')
    return n


def _go_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@lru_cache(maxsize=4096)
def parse_semver(s: str) -> _Semver:
    """``semver.Parse``: (major, minor, patch, prerelease identifiers); build metadata is
    validated and dropped (it has no precedence). Raises ``_EvalError`` with blang's text."""
    if not s:
        raise _EvalError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise _EvalError("No Major.Minor.Patch elements found")
    nums = []
    for label, p in (("major", parts[0]), ("minor", parts[1])):
        if not set(p) <= _NUMBERS:
            raise _EvalError(f"Invalid character(s) found in {label} number {_go_quote(p)}")
        if len(p) > 1 and p[0] == "0":
            raise _EvalError(f"{label.capitalize()} number must not contain leading zeroes {_go_quote(p)}")
        nums.append(_uint(p))
    patch, build, pre = parts[2], None, None
    if "+" in patch:
        patch, build = patch.split("+", 1)
    if "-" in patch:
        patch, pre = patch.split("-", 1)
    if not set(patch) <= _NUMBERS:
        raise _EvalError(f"Invalid character(s) found in patch number {_go_quote(patch)}")
    if len(patch) > 1 and patch[0] == "0":
        raise _EvalError(f"Patch number must not contain leading zeroes {_go_quote(patch)}")
    nums.append(_uint(patch))
    ids: list[int | str] = []
    for p in pre.split(".") if pre is not None else ():
        if not p:
            raise _EvalError("Prerelease is empty")
        if set(p) <= _NUMBERS:
            if len(p) > 1 and p[0] == "0":
                raise _EvalError(f"Numeric PreRelease version must not contain leading zeroes {_go_quote(p)}")
            ids.append(_uint(p))
        elif set(p) <= _ALPHANUM:
            ids.append(p)
        else:
            raise _EvalError(f"Invalid character(s) found in prerelease {_go_quote(p)}")
    for b in build.split(".") if build is not None else ():
        if not b:
            raise _EvalError("Build meta data is empty")
        if not set(b) <= _ALPHANUM:
            raise _EvalError(f"Invalid character(s) found in build meta data {_go_quote(b)}")
    return nums[0], nums[1], nums[2], tuple(ids)


def _normalize_and_parse(s: str) -> _Semver:
    """``normalizeAndParse`` of ``library/semverlib.go``."""
    s = s.removeprefix("v")
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in _NUMBERS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise _EvalError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


def _semver_text(v: _Semver) -> str:
    core = f"{v[0]}.{v[1]}.{v[2]}"
    return core + "-" + ".".join(str(p) for p in v[3]) if v[3] else core


def _smsg(v: _Semver) -> Message:
    m: Message = _SemverMsg()
    setattr(m, "__v", _semver_text(v))
    return m


def _sv(m: Message) -> _Semver:
    return parse_semver(getattr(m, "__v"))


def _semver_compare(a: _Semver, b: _Semver) -> int:
    """``Version.Compare``: core numbers, then a release beats a prerelease, then identifiers
    (numbers below strings, numbers numerically, strings bytewise, longer wins)."""
    c = _cmp(a[:3], b[:3])
    if c:
        return c
    pa, pb = a[3], b[3]
    if not pa or not pb:
        return _cmp(not pa, not pb)
    for x, y in zip(pa, pb, strict=False):
        if isinstance(x, int) and isinstance(y, int):
            c = _cmp(x, y)
        elif isinstance(x, int):
            c = -1
        elif isinstance(y, int):
            c = 1
        else:
            c = _cmp(x.encode(), y.encode())
        if c:
            return c
    return _cmp(len(pa), len(pb))


def _semver(text: str, normalize: bool = False) -> Message:
    return _smsg(_normalize_and_parse(text) if normalize else parse_semver(text))


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except _EvalError:
        return False
    return True


# --- regex (library/regex.go): Go RE2 syntax through Python's re -------------------------


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise _EvalError(f"Illegal regex: {exc}") from exc


def _find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str, n: int = -1) -> list[str]:
    if n == 0:
        return []
    out = [m.group(0) for m in _regex(pattern).finditer(s)]
    return out if n < 0 else out[:n]


# --- lists (library/lists.go) -------------------------------------------------------------


def _is_sorted(xs: list[Any]) -> bool:
    return all(a <= b for a, b in zip(xs, xs[1:], strict=False))


def _check_int64(n: int) -> int:
    if not -(2**63) <= n <= _INT64_MAX:
        raise _EvalError("integer overflow")
    return n


def _sum_int(xs: list[int]) -> int:
    total = 0
    for x in xs:
        total = _check_int64(total + x)
    return total


def _min(xs: list[Any]) -> Any:
    if not xs:
        raise _EvalError("min called on empty list")
    return min(xs)


def _max(xs: list[Any]) -> Any:
    if not xs:
        raise _EvalError("max called on empty list")
    return max(xs)


# --- the environment ------------------------------------------------------------------------


def _lib(impl: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a library function: ``_EvalError`` becomes a CEL error value (cel-expr-python turns
    a raised exception into one, with its text)."""

    def call(*args: Any) -> Any:
        try:
            return impl(*args)
        except _EvalError as exc:
            raise RuntimeError(str(exc)) from None

    return call


_Overload = tuple[str, cel.Type, Sequence[cel.Type], bool, Callable[..., Any] | None]


def _fn(name: str, *overloads: _Overload) -> cel.FunctionDecl:
    """A function with its overloads; an overload without an implementation shares the one of
    an earlier overload with the same runtime signature (cel-cpp dispatches on value kinds, so
    ``list(int)`` and ``list(string)``, or two message types, are one signature there)."""
    return cel.FunctionDecl(
        name,
        [
            cel.Overload(oid, return_type=r, parameters=list(p), is_member=m, impl=_lib(f))
            if f is not None
            else cel.Overload(oid, return_type=r, parameters=list(p), is_member=m)
            for oid, r, p, m, f in overloads
        ],
    )


def _is_quantity_msg(m: Any) -> bool:
    return isinstance(m, Message) and m.DESCRIPTOR.full_name == "kubernetes.Quantity"


def _compare(a: Message, b: Message) -> int:
    """``compareTo`` of two quantities or two semvers (one runtime overload for both)."""
    if _is_quantity_msg(a) != _is_quantity_msg(b):
        raise _EvalError("no such overload")
    if _is_quantity_msg(a):
        return _cmp(_nanos(a), _nanos(b))
    return _semver_compare(_sv(a), _sv(b))


def _sum(xs: list[Any]) -> Any:
    if any(isinstance(x, float) for x in xs):
        return float(sum(xs))
    return _sum_int(xs)


def _library() -> list[cel.FunctionDecl]:
    S, B, I, D = cel.Type.STRING, cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE  # noqa: E741
    Q, V = QUANTITY, SEMVER
    L = cel.Type.List
    return [
        # library/quantity.go
        _fn("quantity", ("string_to_quantity", Q, [S], False, _quantity)),
        _fn("isQuantity", ("is_quantity_string", B, [S], False, _is_quantity)),
        _fn("sign", ("quantity_sign", I, [Q], False, lambda q: _cmp(_nanos(q), 0))),
        _fn(
            "isGreaterThan",
            ("quantity_is_greater_than", B, [Q, Q], True, lambda a, b: _compare(a, b) == 1),
            ("semver_is_greater_than", B, [V, V], True, None),
        ),
        _fn(
            "isLessThan",
            ("quantity_is_less_than", B, [Q, Q], True, lambda a, b: _compare(a, b) == -1),
            ("semver_is_less_than", B, [V, V], True, None),
        ),
        _fn(
            "compareTo",
            ("quantity_compare_to", I, [Q, Q], True, _compare),
            ("semver_compare_to", I, [V, V], True, None),
        ),
        _fn("asApproximateFloat", ("quantity_get_float", D, [Q], True, lambda q: _nanos(q) / _NANO)),
        _fn("asInteger", ("quantity_get_int", I, [Q], True, _q_as_integer)),
        _fn("isInteger", ("quantity_is_integer", B, [Q], True, _q_is_integer)),
        _fn(
            "add",
            ("quantity_add", Q, [Q, Q], True, lambda a, b: _qmsg(_nanos(a) + _nanos(b))),
            ("quantity_add_int", Q, [Q, I], True, lambda a, n: _qmsg(_nanos(a) + n * _NANO)),
        ),
        _fn(
            "sub",
            ("quantity_sub", Q, [Q, Q], True, lambda a, b: _qmsg(_nanos(a) - _nanos(b))),
            ("quantity_sub_int", Q, [Q, I], True, lambda a, n: _qmsg(_nanos(a) - n * _NANO)),
        ),
        # library/semverlib.go (version 1)
        _fn(
            "semver", ("string_to_semver", V, [S], False, _semver), ("string_bool_to_semver", V, [S, B], False, _semver)
        ),
        _fn(
            "isSemver",
            ("is_semver_string", B, [S], False, _is_semver),
            ("is_semver_string_bool", B, [S, B], False, _is_semver),
        ),
        _fn("major", ("semver_major", I, [V], True, lambda v: _sv(v)[0])),
        _fn("minor", ("semver_minor", I, [V], True, lambda v: _sv(v)[1])),
        _fn("patch", ("semver_patch", I, [V], True, lambda v: _sv(v)[2])),
        # library/regex.go
        _fn("find", ("string_find_string", S, [S, S], True, _find)),
        _fn(
            "findAll",
            ("string_find_all_string", L(S), [S, S], True, _find_all),
            ("string_find_all_string_int", L(S), [S, S, I], True, _find_all),
        ),
        # library/lists.go. cel-expr-python has no type parameters and dispatches on value
        # kinds, so each function is one overload on list(dyn) whose result is dyn.
        _fn("isSorted", ("list_is_sorted", B, [L(cel.Type.DYN)], True, _is_sorted)),
        _fn("sum", ("list_sum", cel.Type.DYN, [L(cel.Type.DYN)], True, _sum)),
        _fn("min", ("list_min", cel.Type.DYN, [L(cel.Type.DYN)], True, _min)),
        _fn("max", ("list_max", cel.Type.DYN, [L(cel.Type.DYN)], True, _max)),
    ]


_ENV_CONFIG = """
name: kubernetes.dra
extensions:
  - name: bindings
  - name: optional
  - name: strings
    version: 2
  - name: sets
  - name: lists
    version: latest
  - name: two-var-comprehensions
"""

_env_lock = threading.Lock()
_env: cel.Env | None = None


def environment() -> cel.Env:
    """The selector environment (built once, ~10 ms)."""
    global _env
    with _env_lock:
        if _env is None:
            attrs = cel.Type.Map(cel.Type.STRING, cel.Type.Map(cel.Type.STRING, cel.Type.DYN))
            caps = cel.Type.Map(cel.Type.STRING, cel.Type.Map(cel.Type.STRING, QUANTITY))
            _env = cel.NewEnv(
                _POOL,
                config=cel.NewEnvConfigFromYaml(_ENV_CONFIG),
                # ``device`` is a kubernetes.DRADevice upstream; its fields are declared as
                # qualified variables so that each keeps its own type.
                variables={
                    "device.driver": cel.Type.STRING,
                    "device.attributes": attrs,
                    "device.capacity": caps,
                    "device.allowMultipleAllocations": cel.Type.BOOL,
                },
                functions=_library(),
            )
        return _env


# --- errors ------------------------------------------------------------------------------

_STATUS = re.compile(r"^[A-Z_]+: (.*?)(?: \[[A-Z_]+\])?$", re.S)
_NO_KEY = re.compile(r'^Key not found in map : "?(.*?)"?$', re.S)
_MIXED_NUMERIC = re.compile(
    r"found no matching overload for '_(?:<|<=|>|>=)_' applied to '\((?:int|uint|double), (?:int|uint|double)\)'"
)


_CEL_GO_TEXT = {"divide by zero": "division by zero", "modulo by zero": "modulus by zero"}
"""cel-cpp's runtime texts that cel-go words differently."""


def _status_text(exc: BaseException) -> str:
    """cel-cpp's ``absl::Status`` text without its code: ``INVALID_ARGUMENT: x [INVALID_ARGUMENT]`` -> ``x``."""
    text = str(exc)
    m = _STATUS.match(text)
    return m.group(1) if m else text


def _runtime_text(text: str) -> str:
    """cel-go's wording for cel-cpp's runtime errors where they differ."""
    text = _status_text(RuntimeError(text))
    m = _NO_KEY.match(text)
    if m:
        return f"no such key: {m.group(1)}"
    if text in _CEL_GO_TEXT:
        return _CEL_GO_TEXT[text]
    if text.startswith("No matching overloads found") or text.startswith("No overload found"):
        return "no such overload"
    return text


_TYPE_NAMES = {"BOOL": "bool", "INT": "int", "UINT": "uint", "DOUBLE": "double", "STRING": "string", "BYTES": "bytes"}


# --- compiled selectors ------------------------------------------------------------------


def _parse_qualified_name(name: str, default_domain: str) -> tuple[str, str]:
    """``parseQualifiedName``: split at the first ``/``; no ``/`` means the driver's domain."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (default_domain, name)


_STRING_LITERAL = re.compile(r"""(?:[rR]?"((?:[^"\\\n]|\\.)*)"|[rR]?'((?:[^'\\\n]|\\.)*)')""")
_WHOLE_MAP_USE = re.compile(r"device\s*\.\s*(?:attributes|capacity)(?!\s*\[)")
"""A use of ``device.attributes`` or ``device.capacity`` other than indexing it."""


class CompiledSelector:
    """One compiled selector (upstream's ``CompilationResult``); ``matches`` is ``DeviceMatches``."""

    __slots__ = ("_expr", "_pad", "_results", "_results_lock", "expression")

    def __init__(self, expression: str, compiled: cel.Expression) -> None:
        self.expression = expression
        self._expr = compiled
        # Upstream's outer maps answer an unknown domain with an empty map (mapper.Find); a
        # cel-cpp map cannot, so the domains this expression can name are added as empty maps.
        # That is unobservable while the expression only indexes the outer maps; when it uses
        # them whole (size, in, iteration, cel.bind), nothing is added.
        self._pad: tuple[str, ...] | None = None
        if not _WHOLE_MAP_USE.search(expression):
            self._pad = tuple({a or b for a, b in _STRING_LITERAL.findall(expression)})
        self._results: OrderedDict[Hashable, bool | CELRuntimeError] = OrderedDict()
        self._results_lock = threading.Lock()

    def matches(self, device: DeviceView) -> bool:
        """Whether ``device`` satisfies the selector.

        Raises:
            CELRuntimeError: evaluation failed (upstream's text); CELCostLimitError when the
                cost bound was hit.
        """
        key = device.key
        if key is None:
            return self._evaluate(device)
        with self._results_lock:
            hit = self._results.get(key)
            if hit is not None:
                self._results.move_to_end(key)
        if hit is None:
            try:
                hit = self._evaluate(device)
            except CELRuntimeError as exc:
                hit = exc
            with self._results_lock:
                self._results[key] = hit
                if len(self._results) > RESULT_CACHE_SIZE:
                    self._results.popitem(last=False)
        if isinstance(hit, CELRuntimeError):
            raise hit
        return hit

    def _activation(self, device: DeviceView) -> dict[str, Any]:
        attributes: dict[str, dict[str, Any]] = {}
        for name, value in device.attributes.items():
            if isinstance(value, Version):
                try:
                    native: Any = _smsg(parse_semver(value.text))
                except _EvalError as exc:
                    raise CELRuntimeError(f"attribute {name}: parse semantic version: {exc}") from None
            elif value is None:
                raise CELRuntimeError(f"attribute {name}: unsupported attribute value")
            else:
                native = value
            domain, ident = _parse_qualified_name(name, device.driver)
            attributes.setdefault(domain, {})[ident] = native
        capacity: dict[str, dict[str, Any]] = {}
        for name, text in device.capacity.items():
            domain, ident = _parse_qualified_name(name, device.driver)
            try:
                capacity.setdefault(domain, {})[ident] = _qmsg(parse_quantity(text))
            except QuantityError as exc:
                raise CELRuntimeError(f"capacity {name}: {exc}") from None
        if self._pad is not None:
            for domain in (*self._pad, device.driver):
                attributes.setdefault(domain, {})
                capacity.setdefault(domain, {})
        return {
            "device.driver": device.driver,
            "device.attributes": attributes,
            "device.capacity": capacity,
            "device.allowMultipleAllocations": device.allow_multiple_allocations,
        }

    def _evaluate(self, device: DeviceView) -> bool:
        data = self._activation(device)
        try:
            result = self._expr.eval(data=data)
        except RuntimeError as exc:
            text = _status_text(exc)
            if "Iteration budget exceeded" in text:
                raise CELCostLimitError(COST_LIMIT_MESSAGE) from None
            raise CELRuntimeError(_runtime_text(text)) from None
        kind = result.type().name()
        if kind == "BOOL":
            return bool(result.value())
        if kind == "ERROR":
            text = str(result)
            if "Iteration budget exceeded" in text:
                raise CELCostLimitError(COST_LIMIT_MESSAGE)
            raise CELRuntimeError(_runtime_text(text))
        name = _TYPE_NAMES.get(kind, kind.lower())
        raise CELRuntimeError(
            f"CEL result of type {name} could not be converted to bool: type conversion error from '{name}' to 'bool'"
        )


_compile_lock = threading.Lock()
_compiled: OrderedDict[str, CompiledSelector] = OrderedDict()


def _type_name(t: cel.Type) -> str:
    name: str = t.name()
    return _TYPE_NAMES.get(name, name)


_REGEX_LITERAL = re.compile(
    r"""\.\s*(?:matches|find|findAll)\s*\(\s*"""
    r"""(?:"((?:[^"\\\n]|\\.)*)"|'((?:[^'\\\n]|\\.)*)')\s*[,)]"""
)
"""A regex function called with a string literal pattern (plain escapes only)."""


def _check_regex_literals(expression: str) -> None:
    """cel-go compiles literal patterns when it plans the program (``OptOptimize``), so a bad
    one is a compile error upstream; cel-cpp finds it only at evaluation."""
    for m in _REGEX_LITERAL.finditer(expression):
        pattern = m.group(1) if m.group(1) is not None else m.group(2)
        if "\\" in pattern:
            continue  # escapes: leave the pattern to the runtime rather than decode CEL escapes
        try:
            re.compile(pattern)
        except re.error as exc:
            raise CELCompileError(f"program instantiation failed: error parsing regexp: {exc}") from None


def _compile(expression: str) -> CompiledSelector:
    env = environment()
    _check_regex_literals(expression)
    try:
        compiled = env.compile(expression)
    except RuntimeError as exc:
        text = _status_text(exc)
        if not _only_mixed_numeric_comparisons(text):
            raise CELCompileError("compilation failed: " + text) from None
        # cel-go's CrossTypeNumericComparisons: 1 < 1.5 type-checks upstream. cel-cpp's checker
        # has no such option (its runtime compares across types), so such an expression is
        # compiled unchecked; its result type is then dyn, which upstream also accepts.
        try:
            compiled = env.compile(expression, disable_check=True)
        except RuntimeError as exc2:
            raise CELCompileError("compilation failed: " + _status_text(exc2)) from None
        return CompiledSelector(expression, compiled)
    out = compiled.return_type()
    if out != cel.Type.BOOL and out != cel.Type.DYN:
        raise CELCompileError(f"must evaluate to bool or the unknown type, not {_type_name(out)}")
    return CompiledSelector(expression, compiled)


def _only_mixed_numeric_comparisons(text: str) -> bool:
    errors = [e for e in text.split("ERROR: ") if e.strip()]
    return bool(errors) and all(_MIXED_NUMERIC.search(e) for e in errors)


def compile_selector(expression: str) -> CompiledSelector:
    """``Cache.GetOrCompile``: the compiled selector for ``expression`` (LRU by expression).

    Raises:
        CELCompileError: the expression does not compile; the text is upstream's
            ``CompilationResult.Error`` (failures are not cached, as upstream).
    """
    with _compile_lock:
        hit = _compiled.get(expression)
        if hit is not None:
            _compiled.move_to_end(expression)
            return hit
    selector = _compile(expression)
    with _compile_lock:
        _compiled[expression] = selector
        if len(_compiled) > COMPILE_CACHE_SIZE:
            _compiled.popitem(last=False)
    return selector
