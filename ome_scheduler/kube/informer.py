"""List + watch informers that keep a typed store and call handlers on changes.

Mirrors client-go's reflector (``tools/cache/reflector.go``): a paged LIST (500 per page)
fills the store and gives the resourceVersion a WATCH resumes from; bookmarks advance that
version; a watch ends after a random 5–10 minute server timeout and is resumed; ``410
Gone`` (too old a version) triggers a relist whose differences are delivered as add,
update and delete events (the latter like ``DeletedFinalStateUnknown``). A resource whose
API is missing (the PodGroup CRD not installed yet: 404) is retried with backoff, so a CRD
installed later is picked up. Each object is decoded into its typed record once.

Failures back off like the reflector's ``backoffManager`` (:class:`Backoff`: 0.8 s doubling
to 30 s, +20 % jitter; back to 0.8 s after two minutes without a failure and after every
successful LIST). A watch the server closes within a second without a single event is a
*very short watch* (client-go's guard): the informer backs off and relists instead of
re-opening it at once, so a server that accepts and drops watches is not hammered in a hot
loop, and a LIST after such a watch does not reset the backoff.

A watch that delivers nothing can be quiet or dead: the API server sends a bookmark about
every minute (``allowWatchBookmarks``), so silence alone cannot tell them apart before a
minute has passed. After :data:`WATCH_QUIET` seconds without an event or bookmark the
informer checks the path to the server instead: when nothing else was heard from it within
:data:`ANSWER_FRESH` seconds, it sends one probe (``KubeClient.probe``, shared by all
informers, :data:`PROBE_TIMEOUT` seconds). A probe that fails means the server is out of
reach: the watch is *stalled* and abandoned. A stall is therefore detected at most
``WATCH_QUIET + PROBE_TIMEOUT`` = 40 s after the last byte, well inside a minute, without
ever abandoning a healthy quiet watch. A watch silent for :data:`WATCH_SILENCE_MAX` seconds
while the server answers otherwise (one connection lost by a middlebox) is abandoned too: a
live one would have had a bookmark by then.

**Staleness.** After a watch that failed (a transport error, an error answer, a stall, too
long a silence, 410 Gone) the informer is *stale*: events may have happened that it has not
delivered. It then LISTs (after the backoff) rather than resuming the watch: a LIST is a
consistent read, so its completion is the moment the store is known to hold everything the
outage hid (a resumed watch replays the missed events too, but nothing marks where the replay
ends). A watch the server closes normally is resumed: nothing was missed. :attr:`Informer.stale`
and :meth:`Informer.current_since` are what the Binding gate (``kube/binding.py``) waits on;
:meth:`Informer.request_relist` makes the informer LIST again at its next step (abandoning
its watch).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, Protocol, TypeVar

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


WATCH_QUIET = 30.0
"""Seconds without an event or bookmark after which a watch's path to the server is checked."""
ANSWER_FRESH = 10.0
"""An answer from the server this recent (any request, any watch) proves the path: no probe."""
PROBE_TIMEOUT = 10.0
"""Seconds the probe of a quiet watch's server may take before the watch counts as stalled."""
WATCH_SILENCE_MAX = 75.0
"""Seconds of silence after which a watch is re-opened even though the server answers: a live
watch gets a bookmark about every 60 s."""
SHORT_WATCH = 1.0
"""A watch the server closes sooner than this, without any event, is a *very short watch*."""


@dataclass(slots=True)
class Backoff:
    """client-go's ``wait.NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, jitter)``.

    :meth:`next` returns the next delay in seconds: 0.8, 1.6, 3.2 ... capped at 30, each
    with up to ``jitter`` (20 %) added; a call more than ``reset_after`` seconds after the
    previous one starts again at 0.8 (the server has been healthy meanwhile). :meth:`reset`
    starts again at once (after a successful LIST).
    """

    initial: float = 0.8
    cap: float = 30.0
    reset_after: float = 120.0
    jitter: float = 0.2
    clock: Callable[[], float] = time.monotonic
    _next: float = field(init=False)
    _last: float = field(init=False, default=-float("inf"))

    def __post_init__(self) -> None:
        self._next = self.initial

    def reset(self) -> None:
        """The next delay is the initial one again."""
        self._next = self.initial

    def next(self) -> float:
        """The delay to wait now (seconds); doubles the following one up to the cap."""
        now = self.clock()
        if now - self._last > self.reset_after:
            self._next = self.initial
        self._last = now
        base = min(self._next, self.cap)
        self._next = min(self._next * 2, self.cap)
        return base * (1 + self.jitter * random.random())


class _Expired(Exception):
    """The watch's resourceVersion is gone (410): only a relist can resume."""


class _Abandon(Exception):
    """The watch is given up by the informer: stalled, silent too long, or a relist was asked.

    ``relist``: LIST before watching again (asked for); otherwise re-watch from the
    resourceVersion. ``failure``: the server was out of reach (back off first).
    """

    def __init__(self, reason: str, *, relist: bool, failure: bool) -> None:
        super().__init__(reason)
        self.relist = relist
        self.failure = failure


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
        self.listed_at = 0.0
        """``time.monotonic()`` at which the last complete LIST started (0: none yet)."""
        self.served = True
        """False while the resource's API answers 404 (the PodGroup CRD not installed)."""
        self.stale_since = 0.0
        """When the store may have started to miss events (a watch failed); 0 while current."""
        self.watch_opened_at = 0.0
        """When the server last accepted a watch of this informer."""
        self.last_line_at = 0.0
        """When the last event or bookmark arrived."""
        self._relist = asyncio.Event()
        self._watch_start = 0.0
        self._down_since = 0.0
        """When the last watch failed (0: the last one ended normally): for the log line."""

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

    def request_relist(self) -> None:
        """LIST again at the next step: the open watch is abandoned, a pending backoff is kept."""
        self._relist.set()

    @property
    def stale(self) -> bool:
        """Whether the store may miss events: a watch failed and no LIST has completed since
        (or none ever did). A resource the server does not serve is never stale."""
        return self.served and (self.stale_since > 0 or self.listed_at == 0)

    def current_since(self, t: float) -> bool:
        """Whether the store is known to hold every change made before ``t`` (monotonic seconds):
        not stale, and since ``t`` a LIST completed, a watch was accepted or an event or
        bookmark arrived (the stream is in order: what came after ``t`` came after what was
        sent before it)."""
        if not self.served:
            return True
        if self.stale:
            return False
        return self.listed_at >= t or self.watch_opened_at > t or self.last_line_at > t

    def _went_stale(self) -> None:
        """A watch failed: the store may miss events until the next LIST completes."""
        if not self.stale_since:
            self.stale_since = time.monotonic()

    async def _list(self) -> None:
        """LIST every page, then swap the store in one step and emit the differences."""
        self.invalid = {}  # the list re-decodes every object: errors are found afresh
        items: dict[str, T] = {}
        raws, rv = await list_raw(self.client, self.path, self.params)
        for raw in raws:
            obj = self._decode(raw)
            if obj is not None:
                items[object_key(obj.metadata)] = obj
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

    async def _watch(self) -> tuple[int, float]:
        """One WATCH from ``resource_version`` until the server ends it.

        Returns (lines received, seconds it lasted) when the server closed it.

        Raises:
            _Expired: the server answered 410 Gone (the version was compacted away).
            _Abandon: the watch stalled, stayed silent too long, or a relist was asked for.
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
        start = time.monotonic()
        self._watch_start = start
        reader = asyncio.ensure_future(self._read(params, timeout))
        watchdog = asyncio.ensure_future(self._watchdog())
        try:
            await asyncio.wait((reader, watchdog), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, watchdog):
                task.cancel()
            await asyncio.gather(reader, watchdog, return_exceptions=True)
        if reader.done() and not reader.cancelled():
            return reader.result(), time.monotonic() - start
        watchdog.result()  # raises _Abandon
        raise AssertionError("unreachable: the watchdog only ends by raising")

    async def _read(self, params: dict[str, str], timeout: int) -> int:
        """Apply the watch's events until the server closes it; returns how many lines came."""
        lines = 0

        def opened() -> None:
            self.watch_opened_at = time.monotonic()
            if self._down_since:
                down = self.watch_opened_at - self._down_since
                log.info("watch re-established", v=1, informer=self.name, downSeconds=round(down, 3))
                self._down_since = 0.0

        try:
            async for line in self.client.watch_lines(self.path, params, read_timeout=timeout + 30, on_open=opened):
                self.last_line_at = time.monotonic()
                lines += 1
                self._handle_line(line)
        except ApiError as exc:
            if exc.code == 410:
                raise _Expired from exc
            raise
        return lines

    async def _watchdog(self) -> NoReturn:
        """Raise :class:`_Abandon` when the watch must be given up (see the module docstring).

        Wakes at the moments a decision can change: ``WATCH_QUIET`` after the last line, when
        the last answer from the server stops being fresh, and when a relist is requested.
        """
        reach = self.client.reach
        while True:
            if self._relist.is_set():
                raise _Abandon("relist requested", relist=True, failure=False)
            now = time.monotonic()
            heard = max(self.last_line_at, self._watch_start)
            silent = now - heard
            if silent >= WATCH_SILENCE_MAX:
                raise _Abandon(f"no event or bookmark for {silent:.0f} s", relist=False, failure=False)
            if silent < WATCH_QUIET:
                wake = heard + WATCH_QUIET
            elif now - reach.last_answer < ANSWER_FRESH:
                wake = min(reach.last_answer + ANSWER_FRESH, heard + WATCH_SILENCE_MAX)
            else:
                if not await self.client.probe(PROBE_TIMEOUT):
                    silent = time.monotonic() - heard
                    reach.failed()
                    raise _Abandon(
                        f"no event or bookmark for {silent:.0f} s and the API server does not answer",
                        relist=False,
                        failure=True,
                    )
                continue
            try:
                await asyncio.wait_for(self._relist.wait(), max(0.05, wake - time.monotonic()))
            except TimeoutError:
                pass

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
        """Run forever: list, then watch; relist after a failed watch, on 410 or when asked;
        back off on errors."""
        backoff = Backoff()
        short_watches = 0
        """Very short watches in a row: while > 0 a successful LIST does not reset the backoff."""
        while True:
            try:
                started = time.monotonic()
                self._relist.clear()
                if self.synced.is_set() and self.metrics is not None:
                    self.metrics.informer_relists.labels(self.name).inc()
                await self._list()
                self.listed_at = started
                self.served = True
                self.stale_since = 0.0
                self.synced.set()
                if short_watches == 0:
                    backoff.reset()
                while not self._relist.is_set():
                    try:
                        lines, lasted = await self._watch()
                    except _Expired:
                        # 410: etcd compacted the version we would resume from, so events in
                        # between are lost; only a fresh LIST (diffed by _replace) recovers them.
                        log.info("watch expired, relisting", v=2, informer=self.name)
                        self._went_stale()
                        break
                    except _Abandon as exc:
                        if exc.relist:
                            log.info("relisting on request", v=2, informer=self.name)
                            break
                        # Stalled or silent: events may have been missed.
                        log.warning("watch abandoned", informer=self.name, reason=str(exc))
                        self._failed_watch()
                        await asyncio.sleep(backoff.next())
                        break
                    except (*TRANSPORT_ERRORS, ApiError) as exc:
                        if isinstance(exc, ApiError) and exc.code == 404:
                            raise  # the resource went away (CRD deleted): relist until it returns
                        log.info("watch failed, relisting", v=2, informer=self.name, error=str(exc))
                        self._failed_watch()
                        await asyncio.sleep(backoff.next())
                        break
                    if lines == 0 and lasted < SHORT_WATCH:
                        # client-go: "very short watch ... watch lasted less than a second and no
                        # items received". Re-opening at once would loop as fast as the server
                        # answers; back off, and LIST again in case the resume point is the cause.
                        short_watches += 1
                        log.warning("very short watch", informer=self.name, seconds=round(lasted, 3))
                        self._failed_watch()
                        await asyncio.sleep(backoff.next())
                        break
                    short_watches = 0  # a normal end (the server's timeout): resume, nothing was missed
                    if self.metrics is not None and not self._relist.is_set():
                        self.metrics.informer_watch_restarts.labels(self.name).inc()
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.code == 404:
                    log.info("resource not served yet, retrying", v=2, informer=self.name, path=self.path)
                    self.served = False
                else:
                    self._went_stale()
                    log.error("list failed, retrying", informer=self.name, error=str(exc))
                await asyncio.sleep(backoff.next())
            except (*TRANSPORT_ERRORS, msgspec.DecodeError) as exc:
                self._went_stale()
                log.error("list failed, retrying", informer=self.name, error=str(exc))
                await asyncio.sleep(backoff.next())
            except Exception as exc:
                # Handlers are contained per object; anything else is a bug in the informer, and a
                # relist is the way back to a consistent store (never the end of the process).
                self._went_stale()
                log.error("Unhandled Error", informer=self.name, err=repr(exc), exc_info=exc)
                await asyncio.sleep(backoff.next())

    def _failed_watch(self) -> None:
        """A watch failed or stalled: stale until the next LIST; noted for the recovery log line."""
        self._went_stale()
        self._down_since = self._down_since or time.monotonic()


async def list_raw(client: KubeClient, path: str, params: dict[str, str] | None = None) -> tuple[list[bytes], str]:
    """LIST every page of ``path`` (500 per page): the raw objects and the list's resourceVersion.

    Every page carries the resourceVersion of the snapshot the first page started from, so a
    watch resumed from it misses nothing between the pages and the watch.

    Raises:
        ApiError: the server refused the list (404 when the resource is not served).
        aiohttp.ClientError / TimeoutError: the server could not be reached.
        msgspec.DecodeError: a page is not a list.
    """
    out: list[bytes] = []
    cont = ""
    rv = ""
    while True:
        query = {"limit": "500", **(params or {})}
        if cont:
            query["continue"] = cont
        lst = _LIST.decode(await client.get(path, query))
        out.extend(bytes(raw) for raw in lst.items)
        rv = lst.metadata.resource_version
        cont = lst.metadata.continue_
        if not cont:
            return out, rv
