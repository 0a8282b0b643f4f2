"""What every reconcile shares: the Context (its dependencies and nothing else), the event poster, the small
protocol through which it reaches the autoscaler, its errors and metrics."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter, Gauge, Histogram

from pooling_operator.api import PoolingService, ScoringService
from pooling_operator.api.kinds import OWNER_KINDS
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.api.problems import Problem
from pooling_operator.k8s.api import Kube
from pooling_operator.k8s.cache import Cache
from pooling_operator.vllm.settings import Settings

log = logging.getLogger(__name__)

RECONCILES = Counter("vllm_pooling_operator_reconciles", "Reconciles run.", ["kind", "result"])
RESULTS = ("ok", "invalid", "gone", "error")
for _kind in OWNER_KINDS:  # every series exists from the start at 0, so that rate() and the alert rules see it
    for _result in RESULTS:
        RECONCILES.labels(_kind, _result)
WRITES = Counter("vllm_pooling_operator_writes", "Objects created, changed or deleted.", ["kind", "action"])
DURATION = Histogram(
    "vllm_pooling_operator_reconcile_duration_seconds", "Time of one reconcile.", ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
EVENTS_IN_FLIGHT = 16  # events posted at once; more wait their turn
EVENTS_BACKLOG = 1000  # events waiting at most; beyond it the oldest is dropped (client-go's recorder holds 1,000)
EVENTS_WAITING = Gauge("vllm_pooling_operator_events_waiting", "Events queued or being posted.")
EVENTS_DROPPED = Counter("vllm_pooling_operator_events_dropped", "Events dropped: more than EVENTS_BACKLOG were waiting.")


class Tracker(Protocol):
    """What the reconcile asks of the autoscaler (autoscaling/loop.py's Autoscaler is one)."""

    def track(self, resource: PoolingService | ScoringService, policy: AutoscalingPolicySpec | None) -> None:
        """The service autoscales (or counts towards its namespace's GPU budget): follow it."""

    async def stop(self, body: dict[str, Any]) -> None:
        """The service no longer autoscales with the operator: forget it and remove its autoscaling status."""

    async def clear_status(self, body: dict[str, Any]) -> None:
        """Keep following the service (another backend scales it) but remove the autoscaler's status."""

    def untrack(self, uid: str) -> None:
        """The service is gone: drop what is known of it."""


class Events:
    """Posts events without holding a reconcile up: events are best effort (kube.event logs failures), and a
    reconcile that waits for each one takes twice as long to create the next child.

    EVENTS_IN_FLIGHT workers post from one queue of at most EVENTS_BACKLOG events, each kept as a reference to its
    object rather than the object. A burst that outruns the API server (ten thousand services created at once)
    fills the queue; then the oldest waiting event is dropped and counted, as client-go's recorder drops what its
    queue of 1,000 cannot hold: the newest events say what is true now, and the operator's memory and its writes
    after the burst stay bounded. `vllm_pooling_operator_events_waiting` says how many are queued or posting."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._queue: deque[tuple[dict[str, Any], str, str, str]] = deque()
        self._workers: set[asyncio.Task[None]] = set()  # references, so they are not garbage-collected mid-flight
        self._dropped = 0  # since the queue was last empty: said once in the log when it empties

    def post(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        if len(self._queue) >= EVENTS_BACKLOG:
            self._queue.popleft()
            EVENTS_WAITING.dec()
            EVENTS_DROPPED.inc()
            self._dropped += 1
        self._queue.append((reference(owner), type_, reason, message))
        EVENTS_WAITING.inc()
        if len(self._workers) < EVENTS_IN_FLIGHT:
            self._workers.add(asyncio.get_running_loop().create_task(self._work()))

    async def _work(self) -> None:
        try:
            while self._queue:
                owner, type_, reason, message = self._queue.popleft()
                try:
                    await self.kube.event(owner, type_, reason, message)
                finally:
                    EVENTS_WAITING.dec()
            if self._dropped:
                log.warning("Dropped %d events: more than %d waited to be posted (a burst faster than the API server "
                            "took them); the newest were kept", self._dropped, EVENTS_BACKLOG)
                self._dropped = 0
        finally:
            # gone from the set as soon as the queue is seen empty, with no await in between: a post() that comes
            # later starts a worker of its own rather than counting on this one
            self._workers.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def drain(self) -> None:
        """Wait until every queued event is posted (or has failed)."""
        while self._workers:
            await asyncio.gather(*list(self._workers), return_exceptions=True)


def reference(obj: dict[str, Any]) -> dict[str, Any]:
    """What an Event needs of its object (k8s/api.py's Kube.event): a queued event keeps no more of it."""
    meta = obj["metadata"]
    keep = ("name", "namespace", "uid", "resourceVersion")
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": {k: meta[k] for k in keep if k in meta}}


@dataclass
class Context:
    """The dependencies of a reconcile: the API, the watch-fed cache, the operator's settings and images, the
    event poster and the autoscaler (a Tracker; None where nothing autoscales, as in `render`). State about one
    object lives with the component that writes it (reconcile/state.py, the runtime, the cache)."""

    kube: Kube
    cache: Cache = field(default_factory=Cache)
    settings: Settings = field(default_factory=Settings)
    operator_image: str | None = None
    tracker: Tracker | None = None
    events: Events = field(init=False)

    def __post_init__(self) -> None:
        self.events = Events(self.kube)

    def event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.post(owner, type_, reason, message)


class InvalidSpec(Exception):
    """The resource breaks a rule; it is not retried until its spec changes."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems if p.severity == "error"))
        self.problems = problems


class Gone(Exception):
    """The resource or its namespace went away while it was being reconciled: nothing left to do."""






def _ref(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")

