"""List + watch informers that keep a typed store and call handlers on changes.

Mirrors client-go's reflector (``tools/cache/reflector.go``): a paged LIST (500 per page)
fills the store and gives the resourceVersion a WATCH resumes from; bookmarks advance that
version; a watch ends after a random 5–10 minute server timeout and is resumed; ``410
Gone`` (too old a version) triggers a relist whose differences are delivered as add,
update and delete events (the latter like ``DeletedFinalStateUnknown``). Transport errors
back off exponentially up to 30 s. A resource whose API is missing (the PodGroup CRD not
installed yet: 404) is retried with the same backoff, so a CRD installed later is picked
up. Each object is decoded into its typed record once. An object that fails to decode is
logged, left out of the store (an older readable version of it is deleted from the store and
handlers, since it no longer describes the object, unless ``keep_stale`` asks to keep it) and
kept in ``invalid`` with its error
until it is fixed or deleted; ``on_invalid`` lets the owner report it. Everything else keeps
flowing.

Every handler call is contained to its object (client-go would let a handler's panic end the
process; a tenant's object must never do that here): an exception is logged once per object
and error (``"Unhandled Error"``, as ``utilruntime.HandleError`` words it, with the object's
key and the traceback), handed to ``on_error`` so the owner can report it, and the object is
kept in ``failed``. The store always follows the server whatever the handlers do. An object
whose add failed was never seen by the handlers, so its next update (or the next relist) is
delivered as an add again; its delete is always delivered.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from ome_scheduler.api.meta import ListMeta, MetaOnly, ObjectMeta, RawWatchEvent, Status
from ome_scheduler.kube.client import TRANSPORT_ERRORS, ApiError, KubeClient
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics


class Object(Protocol):
    """What the informer needs of a record: its metadata (every API record has one)."""

    @property
    def metadata(self) -> ObjectMeta:
        """The object's ``metav1.ObjectMeta`` (name, namespace, resourceVersion...)."""
        ...


T = TypeVar("T", bound=Object)
log = get_logger()


class _RawList(msgspec.Struct):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[msgspec.Raw] = []


class _Expired(Exception):
    """The watch's resourceVersion is gone (410): only a relist can resume."""


_EVENT = msgspec.json.Decoder(RawWatchEvent)
_LIST = msgspec.json.Decoder(_RawList)
_META = msgspec.json.Decoder(MetaOnly)
_STATUS = msgspec.json.Decoder(Status)


def object_key(meta: Any) -> str:
    """The store key of an object: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


class Informer(Generic[T]):
    """Keeps ``store`` (key ``ns/name``) in sync with the server and calls the handlers.

    Handlers run on the event loop, synchronously and in event order:
    ``on_add(obj)``, ``on_update(old, new)``, ``on_delete(obj)``.
    """

    def __init__(
        self,
        client: KubeClient,
        path: str,
        typ: type[T],
        *,
        name: str,
        params: dict[str, str] | None = None,
        on_add: Callable[[T], None] | None = None,
        on_update: Callable[[T, T], None] | None = None,
        on_delete: Callable[[T], None] | None = None,
        on_invalid: Callable[[bytes, str], None] | None = None,
        on_error: Callable[[T, str], None] | None = None,
        keep_stale: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        self.client = client
        self.metrics = metrics
        """Where relists and watch restarts are counted (``ome_scheduler_informer_*``), if anywhere."""
        if metrics is not None:  # exported as 0 from the start, so rate() works before the first one
            metrics.informer_relists.labels(name)
            metrics.informer_watch_restarts.labels(name)
        self.path = path
        self.name = name
        self.params = params or {}
        self.decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(typ)
        self.store: dict[str, T] = {}
        self.synced = asyncio.Event()
        self.on_add = on_add
        self.on_update = on_update
        self.on_delete = on_delete
        self.on_invalid = on_invalid
        self.on_error = on_error
        """Called with an object and the error text when a handler raised while handling it
        (once per object and error)."""
        self.keep_stale = keep_stale
        """Keep an object's last readable version when an update cannot be decoded (pods: the
        cache must go on counting a bound pod's requests)."""
        self.invalid: dict[str, str] = {}
        """Objects that exist but could not be decoded: key -> decode error."""
        self.failed: dict[str, str] = {}
        """Objects whose last handler call raised: key -> the error (``Type: message``)."""
        self._unseen: set[str] = set()
        """Keys whose add raised: the handlers never took the object in."""
        self.resource_version = ""

    def _deliver(self, action: str, obj: T, *args: Any) -> None:
        """Call one handler (``add``, ``update``, ``delete``) for ``obj``; contain what it raises.

        ``args`` are the handler's arguments (``(old, new)`` for an update, else ``(obj,)``).
        """
        handlers: dict[str, Callable[..., None] | None] = {
            "add": self.on_add,
            "update": self.on_update,
            "delete": self.on_delete,
        }
        handler = handlers[action]
        if handler is None:
            return
        key = object_key(obj.metadata)
        try:
            handler(*args)
        except Exception as exc:
            if action == "add":
                self._unseen.add(key)
            err = f"{type(exc).__name__}: {exc}"
            if self.failed.get(key) == err:
                return  # already logged and reported for this object
            self.failed[key] = err
            log.error(
                "Unhandled Error",
                informer=self.name,
                handler=action,
                object=key,
                resourceVersion=obj.metadata.resource_version,
                err=err,
                exc_info=exc,
            )
            if self.on_error is not None and action != "delete":
                try:
                    self.on_error(obj, err)
                except Exception as report_exc:
                    log.error("Unhandled Error", informer=self.name, handler="error", object=key, err=repr(report_exc))
            return
        if action != "delete":
            self._unseen.discard(key)
        self.failed.pop(key, None)

    def _deliver_upsert(self, prev: T | None, obj: T) -> None:
        """An add when the handlers have not taken the object in (new, or its add raised), else an update."""
        if prev is None or object_key(obj.metadata) in self._unseen:
            self._deliver("add", obj, obj)
        else:
            self._deliver("update", obj, prev, obj)

    def _deliver_delete(self, obj: T) -> None:
        """Deliver a delete and forget the object's failures."""
        key = object_key(obj.metadata)
        self._deliver("delete", obj, obj)
        self.failed.pop(key, None)
        self._unseen.discard(key)

    def _report_invalid(self, raw: bytes, error: str, who: str) -> None:
        """``on_invalid``, contained like a handler."""
        if self.on_invalid is None:
            return
        try:
            self.on_invalid(raw, error)
        except Exception as exc:
            log.error("Unhandled Error", informer=self.name, handler="invalid", object=who, err=repr(exc))

    def _decode(self, raw: bytes) -> T | None:
        """The typed record, or None after logging and recording the error in ``invalid``."""
        try:
            return self.decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            try:
                meta = _META.decode(raw).metadata
                who = object_key(meta)
            except (msgspec.DecodeError, msgspec.ValidationError):
                log.error("cannot decode object, skipping it", informer=self.name, error=str(exc))
                return None
            log.error("cannot decode object, skipping it", informer=self.name, object=who, error=str(exc))
            self.invalid[who] = str(exc)
            self._report_invalid(raw, str(exc), who)
            return None

    async def _list(self) -> None:
        """LIST every page, then swap the store in one step and emit the differences."""
        items: dict[str, T] = {}
        cont = ""
        rv = ""
        self.invalid = {}  # the list re-decodes every object: errors are found afresh
        while True:
            params = {"limit": "500", **self.params}
            if cont:
                params["continue"] = cont
            body = await self.client.get(self.path, params)
            lst = _LIST.decode(body)
            for raw in lst.items:
                obj = self._decode(bytes(raw))
                if obj is not None:
                    items[object_key(obj.metadata)] = obj
            # Every page carries the resourceVersion of the snapshot the first page started; the
            # watch resumes from it, so nothing between the pages and the watch is missed.
            rv = lst.metadata.resource_version
            cont = lst.metadata.continue_
            if not cont:
                break
        if self.keep_stale:
            # An object that exists but no longer decodes keeps its last readable version (a
            # bound pod still occupies its node); without this the relist would delete it.
            for k in self.invalid:
                if k not in items and k in self.store:
                    items[k] = self.store[k]
        self._replace(items)
        self.resource_version = rv

    def _replace(self, items: dict[str, T]) -> None:
        """Install a relisted store; deliver deletes, adds, then updates of changed objects."""
        old = self.store
        self.store = items
        for k, obj in old.items():
            if k not in items:
                self._deliver_delete(obj)
        for k, obj in items.items():
            prev = old.get(k)
            # Same resourceVersion: unchanged. A relist after 410 would otherwise send a no-op
            # update for every object, each one a queue move for the scheduler. An object the
            # handlers never took in is offered again.
            if prev is None or k in self._unseen or prev.metadata.resource_version != obj.metadata.resource_version:
                self._deliver_upsert(prev, obj)

    async def _watch(self) -> None:
        """One WATCH from ``resource_version`` until the server ends it.

        Raises:
            _Expired: the server answered 410 Gone (the version was compacted away).
            ApiError / transport errors: anything else; the caller backs off and re-watches.
        """
        # client-go's reflector picks a random 5-10 minute timeout so that the watches of many
        # clients do not all end, and reconnect, at the same moment.
        timeout = random.randint(300, 600)
        params = {
            **self.params,
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout),
        }
        try:
            async for line in self.client.watch_lines(self.path, params, read_timeout=timeout + 30):
                self._handle_line(line)
        except ApiError as exc:
            if exc.code == 410:
                raise _Expired from exc
            raise

    def _handle_line(self, line: bytes) -> None:
        """Apply one watch event to the store and call the handlers.

        Raises:
            _Expired: an ``ERROR`` event with code 410.
            ApiError: any other ``ERROR`` event.
        """
        ev = _EVENT.decode(line)
        raw = bytes(ev.object)
        if ev.type == "BOOKMARK":
            # Bookmarks only move the resume point forward, so a re-watch after a quiet period
            # does not start from a version etcd has already compacted (and get a 410).
            self.resource_version = _META.decode(raw).metadata.resource_version
            return
        if ev.type == "ERROR":
            st = _STATUS.decode(raw)
            if st.code == 410:
                raise _Expired
            raise ApiError(st.code, st.reason, st.message)
        if ev.type == "DELETED":
            # A deletion must reach the handlers even when the final state is unreadable, or
            # the cache would keep accounting a pod that is gone.
            try:
                gone: T | None = self.decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                gone = None
            try:
                meta = gone.metadata if gone is not None else _META.decode(raw).metadata
            except (msgspec.DecodeError, msgspec.ValidationError):
                return
            self.resource_version = meta.resource_version
            key = object_key(meta)
            self.invalid.pop(key, None)
            prev = self.store.pop(key, None)
            if gone is None:
                gone = prev  # the last readable version stands in for an unreadable object
            if gone is not None:
                self._deliver_delete(gone)
            return
        obj = self._decode(raw)
        if obj is None:
            try:
                meta = _META.decode(raw).metadata
            except (msgspec.DecodeError, msgspec.ValidationError):
                return  # not even its metadata is readable: nothing to key it by
            self.resource_version = meta.resource_version
            # The stored version no longer describes the object: drop it, unless the owner must
            # keep counting it (pods: a bound pod's requests stay on its node until deletion).
            if not self.keep_stale:
                prev = self.store.pop(object_key(meta), None)
                if prev is not None:
                    self._deliver_delete(prev)
            return
        meta = obj.metadata
        self.resource_version = meta.resource_version
        key = object_key(meta)
        self.invalid.pop(key, None)
        if ev.type == "ADDED" or ev.type == "MODIFIED":
            prev = self.store.get(key)
            self.store[key] = obj
            self._deliver_upsert(prev, obj)

    async def run(self) -> None:
        """Run forever: list, then watch; relist on 410; back off on errors."""
        # client-go's reflector backs off exponentially from 800 ms to 30 s.
        backoff = 0.8
        while True:
            try:
                if self.synced.is_set() and self.metrics is not None:
                    self.metrics.informer_relists.labels(self.name).inc()
                await self._list()
                self.synced.set()
                backoff = 0.8
                while True:
                    try:
                        await self._watch()
                        backoff = 0.8
                    except _Expired:
                        # 410: etcd compacted the version we would resume from, so events in
                        # between are lost; only a fresh LIST (diffed by _replace) recovers them.
                        log.info("watch expired, relisting", v=2, informer=self.name)
                        break
                    except (*TRANSPORT_ERRORS, ApiError) as exc:
                        if isinstance(exc, ApiError) and exc.code == 404:
                            raise  # the resource went away (CRD deleted): relist until it returns
                        log.info("watch failed, retrying", v=2, informer=self.name, error=str(exc))
                        await asyncio.sleep(min(30.0, backoff) * (1 + 0.2 * random.random()))
                        backoff *= 2
                    if self.metrics is not None:
                        self.metrics.informer_watch_restarts.labels(self.name).inc()
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.code == 404:
                    log.info("resource not served yet, retrying", v=2, informer=self.name, path=self.path)
                else:
                    log.error("list failed, retrying", informer=self.name, error=str(exc))
                await asyncio.sleep(min(30.0, backoff) * (1 + 0.2 * random.random()))
                backoff = min(backoff * 2, 30.0)
            except (*TRANSPORT_ERRORS, msgspec.DecodeError) as exc:
                log.error("list failed, retrying", informer=self.name, error=str(exc))
                await asyncio.sleep(min(30.0, backoff) * (1 + 0.2 * random.random()))
                backoff = min(backoff * 2, 30.0)
            except Exception as exc:
                # Handlers are contained per object; anything else is a bug in the informer, and a
                # relist is the way back to a consistent store (never the end of the process).
                log.error("Unhandled Error", informer=self.name, err=repr(exc), exc_info=exc)
                await asyncio.sleep(min(30.0, backoff) * (1 + 0.2 * random.random()))
                backoff = min(backoff * 2, 30.0)
