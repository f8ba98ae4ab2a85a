"""Plugin status codes and the Status record.

Mirrors ``k8s.io/kube-scheduler/framework/interface.go`` (``Code``, ``Status``): a plugin
answers every extension point with a Status whose code tells the framework what to do and
whose reasons become the user-visible message (joined with ``", "``).
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """Status codes, in upstream order (their integer values appear in no message)."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6

    def label(self) -> str:
        """The upstream ``Code.String()`` used in metric labels (``Success``, ``Unschedulable``...)."""
        return _LABELS[self]


_LABELS = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


class Status:
    """The result of running a plugin at one extension point.

    ``None`` stands for Success wherever a plugin returns ``Status | None``, which keeps the
    hot path free of allocations, as upstream's nil ``*Status`` does.
    """

    __slots__ = ("code", "reasons", "plugin", "error")

    def __init__(self, code: Code, *reasons: str, plugin: str = "", error: BaseException | None = None):
        self.code = code
        self.reasons: list[str] = [r for r in reasons if r]  # empty reasons would add bare ", "
        self.plugin = plugin
        self.error = error

    @classmethod
    def unschedulable(cls, *reasons: str) -> Status:
        """Unschedulable: this node fails now, but a cluster change or preemption may help."""
        return cls(Code.UNSCHEDULABLE, *reasons)

    @classmethod
    def unresolvable(cls, *reasons: str) -> Status:
        """UnschedulableAndUnresolvable: this node fails and preempting pods on it cannot help."""
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, *reasons)

    @classmethod
    def as_error(cls, err: BaseException) -> Status:
        """``AsStatus``: an Error status carrying ``err`` and its text as the reason."""
        return cls(Code.ERROR, str(err), error=err)

    def message(self) -> str:
        """All reasons joined by ``", "``, as upstream ``Status.Message()``."""
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        """Attribute the status to ``plugin`` (in place) and return it, for chaining."""
        self.plugin = plugin
        return self

    def is_success(self) -> bool:
        """Code is Success (a ``None`` status is success too, without an object)."""
        return self.code == Code.SUCCESS

    def is_wait(self) -> bool:
        """Code is Wait (a Permit plugin parks the pod)."""
        return self.code == Code.WAIT

    def is_skip(self) -> bool:
        """Code is Skip (PreFilter/PreScore: skip the plugin's Filter/Score; Bind: not this binder)."""
        return self.code == Code.SKIP

    def is_rejected(self) -> bool:
        """Unschedulable, UnschedulableAndUnresolvable or Pending."""
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    def __repr__(self) -> str:
        return f"Status({self.code.label()}, {self.message()!r}, plugin={self.plugin!r})"


SUCCESS = None
"""Plugins return ``None`` for Success."""
