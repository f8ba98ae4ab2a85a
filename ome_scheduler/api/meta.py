"""Object metadata, label selectors and the list/watch envelopes (``metav1``).

Mirrors ``k8s.io/apimachinery/pkg/apis/meta/v1/types.go``. Every API record of ome-scheduler
derives from :class:`Record`: camelCase JSON names, unknown fields ignored, defaults omitted
on encode. Only the fields the scheduler reads are declared; msgspec skips the rest while
decoding, which keeps a 10k-pod cache small and decoding about four times cheaper than
building dicts (measured when msgspec was chosen over plain JSON dicts). A record is also the documentation of which
fields matter.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec


class Record(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=False):
    """Base of every API record: camelCase JSON names, unknown fields ignored, defaults omitted."""


class OwnerReference(Record, gc=False):
    """``metav1.OwnerReference``: VolumeBinding checks an ephemeral claim is owned by its pod;
    PodTopologySpread's default constraints take the selector of a pod's controller."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(Record):
    """``metav1.ObjectMeta``: identity, labels, annotations, timestamps (RFC 3339 text) and owners."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    owner_references: list[OwnerReference] = []


class LabelSelectorRequirement(Record, gc=False):
    """``metav1.LabelSelectorRequirement``: ``key``, ``operator`` (In, NotIn, Exists, DoesNotExist), ``values``."""

    key: str = ""
    operator: str = ""
    values: list[str] = []


class LabelSelector(Record, gc=False):
    """``metav1.LabelSelector``: compiled by ``util.labels.Selector.from_label_selector``."""

    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class ListMeta(Record, gc=False):
    """``metav1.ListMeta``: the list's ``resourceVersion`` (where a watch resumes) and the page token."""

    resource_version: str = ""
    # msgspec renames "continue_" to "continue" via the explicit name below.
    continue_: str = msgspec.field(default="", name="continue")


T = TypeVar("T")


class ObjectList(Record, Generic[T]):
    """A ``*List`` envelope (``metav1.ListMeta`` plus ``items`` of type ``T``)."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[T] = []


class RawWatchEvent(Record):
    """One line of a watch stream; ``object`` is decoded once its type is known."""

    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"{}")


class Status(Record, gc=False):
    """``metav1.Status``: the body of API errors and of watch ``ERROR`` events."""

    code: int = 0
    reason: str = ""
    message: str = ""


class MetaOnly(Record):
    """Decodes just ``metadata``: bookmarks, and objects that failed a typed decode."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
