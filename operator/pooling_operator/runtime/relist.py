"""Objects deleted while a watch was away: what kopf's re-list does not tell.

kopf resumes a broken watch from the last resourceVersion it saw. When the API server answers 410 Gone (etcd
compacted that version, or a restarted API server's watch cache no longer holds it) kopf lists the kind again
and hands each listed object to the handlers as an event of type None. For an object deleted in the gap it
hands nothing, and its indexes keep that object for good (`kopf/_cogs/clients/watching.py`,
`continuous_watch`: the 410 branch returns to `infinite_watch`, which lists anew; nothing compares the new
listing with the indexes). So a child deleted while the operator's watches were away stayed "present" in the
cache and was never put back, and a pod gone in the gap still counted as ready.

A listed event after the first full pass therefore means a re-list. Once such events stop coming
(`QUIET_SECONDS`), every watched kind is listed once more by us (one request per kind; per watched namespace
when the operator watches only some) and every indexed object that these lists lack, and that is not newer than
its list, is treated as deleted: dropped from kopf's indexes and handed to the same path as a DELETED event (its
owner is reconciled, so a missing child is created again). An object newer than the list came by the watch
after it and is kept. Namespaces are not swept (a vanished namespace took its resources with it).

Not seen: a re-list of one kind alone (only its watch expired) that comes back empty hands the handlers
nothing, so nothing starts a sweep; kopf tells handlers nothing else about its re-lists.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import Counter

from pooling_operator.api.identity import MANAGED_LABELS
from pooling_operator.api.kinds import KINDS
from pooling_operator.k8s.api import ApiError, Kube

log = logging.getLogger(__name__)

QUIET_SECONDS = 1.0  # a re-list's objects arrive together: sweep once none came for this long
SWEPT_ROLES = ("owner", "child", "pod", "policy")

SWEEPS = Counter("vllm_pooling_operator_relist_sweeps", "Re-lists of a kind by kopf (a watch that came back 410 Gone) "
                 "that the operator checked for objects deleted meanwhile.", ["kind"])
VANISHED = Counter("vllm_pooling_operator_relist_vanished", "Objects found deleted after a re-list (no DELETED event "
                   "was ever delivered for them).", ["kind"])


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class Relists:
    """Sweeps kinds that kopf re-listed. `entries(kind)` gives the indexed objects of a kind; `vanished(kind,
    body)` is called for each one found deleted."""

    def __init__(self, kube: Kube, namespaces: Iterable[str], entries: Callable[[str], list[dict[str, Any]]],
                 vanished: Callable[[str, dict[str, Any]], None], *, quiet: float = QUIET_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.namespaces = list(namespaces)
        self.entries = entries
        self.vanished = vanished
        self.quiet = quiet
        self.clock = clock
        self.armed = False  # set once the first full pass is done: listed events before it are the initial listing
        self._last_listed = 0.0
        self._scheduled = False

    def listed(self, kind: str, spawn: Callable[[Any], None]) -> None:
        """kopf handed over a listed object: when armed, a sweep of every kind is (or stays) scheduled. Every
        kind, not only this one: a kind whose re-list came back empty (its last object deleted in the gap) hands
        over nothing at all, and what makes one watch expire (an API server restart, a compaction) makes the
        others expire too."""
        if not self.armed or kind not in KINDS or KINDS[kind].role not in SWEPT_ROLES:
            return
        self._last_listed = self.clock()
        if not self._scheduled:
            self._scheduled = True
            spawn(self._sweep_when_quiet())

    async def _sweep_when_quiet(self) -> None:
        while (wait := self._last_listed + self.quiet - self.clock()) > 0:
            await asyncio.sleep(wait)
        self._scheduled = False
        for kind in [k.kind for k in KINDS.values() if k.role in SWEPT_ROLES]:
            for attempt in range(6):
                try:
                    await self.sweep(kind)
                    break
                except ApiError as exc:  # the API server may still be coming back: a few tries, then give up
                    log.warning("Could not list %s after a re-list (%s); %s", kind, exc,
                                "retrying" if attempt < 5 else "giving up until the next re-list")
                    await asyncio.sleep(2.0 * (attempt + 1))

    async def sweep(self, kind_name: str) -> int:
        """List the kind; treat every indexed object it lacks (and not newer than it) as deleted."""
        kind = KINDS[kind_name]
        selector = MANAGED_LABELS if kind.role in ("child", "pod") else {}
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))] if selector else []
        scopes: list[str | None] = list(self.namespaces) if self.namespaces and kind.namespaced else [None]
        present: set[str] = set()
        listed_at: int | None = None
        for namespace in scopes:
            try:
                answer = await self.kube.request("GET", kind.path(namespace), query=query)
            except ApiError as exc:
                if exc.status == 404:  # the kind is not served (any more): nothing to compare
                    return 0
                raise
            present.update(str(item["metadata"].get("uid")) for item in answer.get("items") or [])
            rv = int((answer.get("metadata") or {}).get("resourceVersion") or 0)
            listed_at = rv if listed_at is None else min(listed_at, rv)
        SWEEPS.labels(kind_name).inc()
        stale = [o for o in self.entries(kind_name)
                 if str(o["metadata"].get("uid")) not in present and _rv(o) <= (listed_at or 0)]
        for body in stale:
            VANISHED.labels(kind_name).inc()
            self.vanished(kind_name, body)
        if stale:
            log.warning("Re-listed %s: %d deleted while the watch was away, handled as deleted now: %s", kind_name,
                        len(stale), ", ".join(f"{o['metadata'].get('namespace') or ''}/{o['metadata']['name']}" for o in stale[:10]))
        else:
            log.debug("Re-listed %s: nothing was deleted while the watch was away", kind_name)
        return len(stale)
