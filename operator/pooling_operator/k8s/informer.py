"""List, then watch: one kind in one scope (every namespace, or one), as client-go's informers do it.

An `Informer` lists its kind (in pages), hands every object over, says it has listed, then watches from the
list's resourceVersion and hands over each change. It remembers what it handed over (by uid, the projected
object), so that a re-list can be compared with it:

- a watch the API server ends (its timeout) is resumed from the last resourceVersion seen (bookmarks on);
- a broken connection is retried with backoff from the same version; a 429 (a restarted API server's watch
  cache still filling, or throttling) is retried after its Retry-After, never with a growing pause;
- the first watch after an interruption (a re-list, a broken connection, a 429) asks the API server to end it
  after `SETTLING_WATCH_SECONDS`, not the usual five minutes: a restarted API server has been seen to accept a
  watch and then send nothing on it, not even the deletion of an object, for longer than a test waits
  (test_faults' API-server restart, 3 fresh runs of many); resumed from its last version, a silent watch costs
  seconds, not minutes. Once one such watch ends as asked, the next are long again;
- a watch that comes back 410 Gone (etcd compacted that version; a restarted API server's watch cache no
  longer holds it) lists the kind again, and hands over only what differs from what it remembers: objects
  new or changed since, and objects it remembers that the list lacks, as deleted (`vanished`): no event will
  ever tell of an object deleted while the watch was away;
- a kind the API server does not serve (404 on the list: a CRD not installed, KEDA or Kueue absent) counts
  as listed and empty; the informer then waits until `serve()` is called (the CRD appeared) and lists again.

Nothing here knows what the objects mean: `project` keeps what is worth keeping, `handle` gets the events.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from pooling_operator.api.kinds import Kind
from pooling_operator.k8s.api import WATCH_SERVER_SECONDS, ApiError, Kube, TransientError

log = logging.getLogger(__name__)

PAGE = 500  # objects per list page: the memory of one answer, not of the kind
BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
RETRY_AFTER_MAX_SECONDS = 5.0  # a 429's Retry-After is followed up to this
SETTLING_WATCH_SECONDS = 10  # the first watch after an interruption is ended by the API server this soon

RELISTS = Counter("vllm_pooling_operator_relist_sweeps", "Re-lists of a kind after its watch came back 410 Gone "
                  "(or broke in a way a resumed watch cannot mend), compared with what the operator knew.", ["kind"])
VANISHED = Counter("vllm_pooling_operator_relist_vanished", "Objects found deleted by a re-list (no DELETED event "
                   "was ever delivered for them).", ["kind"])


@dataclass(frozen=True)
class Event:
    type: str  # ADDED, MODIFIED or DELETED
    body: dict[str, Any]  # projected
    listed: bool = False  # from a list (the first, or a re-list), not from the watch
    vanished: bool = False  # DELETED found by a re-list: the object went while the watch was away


class Expired(Exception):
    """The resourceVersion to resume from is gone (410): list again."""


class NotServed(Exception):
    """The API server does not serve the kind (404 on the list)."""


def resource_version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def uid_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def relist_events(known: dict[str, dict[str, Any]], listed: list[dict[str, Any]], *, first: bool) -> list[Event]:
    """What a list tells, compared with what was handed over before: every object on the first list; after
    that, objects new or changed (by resourceVersion), and remembered ones the list lacks as vanished."""
    events: list[Event] = []
    seen: set[str] = set()
    for obj in listed:
        uid = uid_of(obj)
        seen.add(uid)
        before = known.get(uid)
        if first or before is None or resource_version(before) != resource_version(obj):
            events.append(Event("ADDED" if before is None else "MODIFIED", obj, listed=True))
    events += [Event("DELETED", obj, listed=True, vanished=True) for uid, obj in known.items() if uid not in seen]
    return events


class Informer:
    def __init__(
        self, kube: Kube, kind: Kind, namespace: str | None, *, handle: Callable[[Event], None],
        listed: Callable[[Informer], None], project: Callable[[dict[str, Any]], dict[str, Any]],
        selector: dict[str, str] | None = None, accept: str = "application/json",
        page: int = PAGE, pause: Callable[[float], Any] = asyncio.sleep,
    ) -> None:  # fmt: skip
        self.kube = kube
        self.kind = kind
        self.namespace = namespace if kind.namespaced else None
        self.handle = handle
        self.on_listed = listed
        self.project = project
        self.query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))] if selector else []
        self.accept = accept
        self.page = page
        self.pause = pause
        self.known: dict[str, dict[str, Any]] = {}  # uid -> the projected object handed over last
        self.lists = 0  # complete lists so far
        self.served: bool | None = None  # None until the first list answered
        self._serve = asyncio.Event()
        self._failures = 0
        self._settling = False  # the next watch follows an interruption: a short one (SETTLING_WATCH_SECONDS)
        RELISTS.labels(kind.kind)  # at 0 from the start: the operator dashboard and rate() see every kind

    @property
    def name(self) -> str:
        return f"{self.kind.kind}" + (f" in {self.namespace}" if self.namespace else "")

    def serve(self) -> None:
        """The kind is (again) served: an informer waiting for it lists now."""
        self._serve.set()

    async def run(self) -> None:
        rv = ""
        while True:
            try:
                if not rv:
                    rv = await self.relist()
                    if self.lists > 1:  # after a re-list: said once, so a watch that then hears nothing shows
                        log.info("Watching %s again from resourceVersion %s", self.name, rv)
                        self._settling = True
                rv = await self._watch(rv)
                self._settling = False  # ended as asked: the API server answers watches again
            except Expired:
                rv = ""
            except NotServed:
                self._not_served()
                self._serve.clear()
                await self._serve.wait()
                rv = ""
            except (TransientError, ApiError) as exc:
                await self._backoff(exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an answer we cannot read (never let one object stop the watch for good)
                log.exception("Watch of %s failed", self.name)
                rv = ""  # a list, in case the watch lost its place
                await self._backoff(exc)

    async def relist(self) -> str:
        """List the kind in pages; hand over what differs from what was known; the list's resourceVersion."""
        projected, rv = await self._list_all()
        first = self.lists == 0
        events = relist_events(self.known, projected, first=first)
        self.known = {uid_of(obj): obj for obj in projected}
        self.lists += 1
        self.served = True
        self._failures = 0
        if not first:
            RELISTS.labels(self.kind.kind).inc()
            gone = [e.body for e in events if e.vanished]
            if gone:
                VANISHED.labels(self.kind.kind).inc(len(gone))
                log.warning("Re-listed %s: %d deleted while the watch was away, handled as deleted now: %s", self.name,
                            len(gone), ", ".join(_named(o) for o in gone[:10]))
            else:
                log.info("Re-listed %s: %d new or changed while the watch was away, nothing deleted", self.name, len(events))
        for event in events:
            self._hand(event)
        self.on_listed(self)
        return rv

    async def _list_all(self) -> tuple[list[dict[str, Any]], str]:
        """Every object (projected, a page at a time), and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            query = [*self.query, ("limit", str(self.page))] + ([("continue", cont)] if cont else [])
            try:
                answer = await self.kube.request("GET", self.kind.path(self.namespace), query=query, accept=self.accept)
            except ApiError as exc:
                if exc.status == 404:
                    raise NotServed() from exc
                if exc.status == 410 and cont:  # the continue token expired mid-list: from the start
                    items, cont = [], ""
                    continue
                raise
            items += [self.project(self._typed(obj)) for obj in answer.get("items") or []]  # a page at a time
            meta = answer.get("metadata") or {}
            cont = str(meta.get("continue") or "")
            if not cont:
                return items, str(meta.get("resourceVersion") or "")

    async def _watch(self, rv: str) -> str:
        """Watch from `rv` until the API server ends the watch; the last resourceVersion seen."""
        query = [*self.query, ("resourceVersion", rv), ("allowWatchBookmarks", "true")]
        try:
            timeout = SETTLING_WATCH_SECONDS if self._settling else WATCH_SERVER_SECONDS
            async for event in self.kube.watch(self.kind.path(self.namespace), query, accept=_single(self.accept), timeout=timeout):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        raise Expired()
                    raise TransientError(int(code or 0), str(obj.get("reason") or "watch error"), str(obj.get("message") or ""))
                rv = resource_version(obj) or rv
                if kind == "BOOKMARK":
                    continue
                self._failures = 0
                projected = self.project(self._typed(obj))
                uid = uid_of(projected)
                if kind == "DELETED":
                    self.known.pop(uid, None)
                else:
                    self.known[uid] = projected
                self._hand(Event(str(kind), projected))
        except ApiError as exc:
            if exc.status == 410:
                raise Expired() from exc
            if exc.status == 404:  # the kind went away (its CRD deleted): the list says so
                raise Expired() from exc
            raise
        return rv

    def _not_served(self) -> None:
        """The kind is not served: listed, and empty (what was known of it went with its CRD)."""
        first = self.served is None
        self.served = False
        self.lists += 1
        if first:
            log.info("%s is not served by the API server (its CRD is not installed): watched once it is", self.name)
        for obj in list(self.known.values()):
            self._hand(Event("DELETED", obj, listed=True, vanished=True))
        self.known.clear()
        self.on_listed(self)

    def _hand(self, event: Event) -> None:
        try:
            self.handle(event)
        except Exception:  # the receiver's fault, not the watch's: the next event still comes
            log.exception("Handling %s %s of %s failed", event.type, _named(event.body), self.name)

    async def _backoff(self, exc: Exception) -> None:
        self._settling = True
        if isinstance(exc, ApiError) and exc.status == 429:
            # The API server is there and says when to come back: a restarted one answers every watch 429 while
            # its watch cache fills (KEP-4568), for seconds under load. Growing the pause on each would leave a
            # kind unwatched up to BACKOFF_SECONDS[-1] after the cache is ready, and a change in that time
            # unseen; so wait as asked (bounded), without counting it as a failure.
            delay = min(exc.retry_after or 1.0, RETRY_AFTER_MAX_SECONDS) * random.uniform(1.0, 1.2)
            log.info("Watch of %s: the API server asks to retry (%s); resuming in %.1fs", self.name, exc.reason or exc.status, delay)
            await self.pause(delay)
            return
        delay = BACKOFF_SECONDS[min(self._failures, len(BACKOFF_SECONDS) - 1)] * random.uniform(0.8, 1.2)
        self._failures += 1
        log.log(logging.WARNING if self._failures > 2 else logging.INFO, "Watch of %s interrupted (%s); resuming in %.1fs",
                self.name, exc, delay)
        await self.pause(delay)

    def _typed(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("apiVersion", self.kind.api_version)  # list items carry neither
        obj.setdefault("kind", self.kind.kind)
        return obj


def _single(accept: str) -> str:
    """A watch's Accept for a list's: metadata-only lists watch as PartialObjectMetadata."""
    return accept.replace("as=PartialObjectMetadataList", "as=PartialObjectMetadata")


def _named(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"
