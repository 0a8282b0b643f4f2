"""What every reconcile shares: the Context (its dependencies and nothing else), the event poster, the small
protocol through which it reaches the autoscaler, its errors and metrics."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter, Gauge, Histogram

from pooling_operator.api.clock import micro_time
from pooling_operator.api.kinds import OWNER_KINDS
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import Service
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
EVENTS_WHILE_BUSY = 2  # events posted at once while reconciles wait or run: the children and statuses go first
EVENTS_SHUTDOWN_SECONDS = 10.0  # at shutdown, events still waiting after this are given up
EVENTS_BACKLOG = 1000  # events waiting at most; beyond it the oldest is dropped (client-go's recorder holds 1,000)
EVENTS_WAITING = Gauge("vllm_pooling_operator_events_waiting", "Events queued or being posted.")
EVENTS_DROPPED = Counter(
    "vllm_pooling_operator_events_dropped",
    "Events dropped: more than EVENTS_BACKLOG were waiting, or still waiting EVENTS_SHUTDOWN_SECONDS after a stop.",
)


class Tracker(Protocol):
    """What the reconcile asks of the autoscaler (autoscaling/loop.py's Autoscaler is one)."""

    def track(self, resource: Service, policy: AutoscalingPolicySpec | None) -> None:
        """The service autoscales (or counts towards its namespace's GPU budget): follow it."""

    async def stop(self, body: dict[str, Any]) -> None:
        """The service no longer autoscales with the operator: forget it and remove its autoscaling status."""

    async def clear_status(self, body: dict[str, Any]) -> None:
        """Keep following the service (another backend scales it) but remove the autoscaler's status."""

    def untrack(self, uid: str) -> None:
        """The service is gone: drop what is known of it."""


Waiting = tuple[dict[str, Any], str, str, str, str]  # (object's reference, type, reason, message, when)


class Busy(Protocol):
    """What the event poster yields to (runtime/queue.py's WorkQueue)."""

    def __len__(self) -> int: ...

    def join(self) -> Awaitable[None]: ...


class Events:
    """Posts events without holding a reconcile up: events are best effort (kube.event logs failures), and a
    reconcile that waits for each one takes twice as long to create the next child.

    EVENTS_IN_FLIGHT workers post from one queue of at most EVENTS_BACKLOG events, each kept as a reference to its
    object rather than the object. A burst that outruns the API server (ten thousand services created at once)
    fills the queue; then the oldest waiting Normal event is dropped and counted (a Warning only when no Normal one
    waits), as client-go's recorder drops what its queue of 1,000 cannot hold: the newest events say what is true
    now, and the operator's memory and its writes after the burst stay bounded. Warnings are posted first. Each
    event carries the time the operator raised it, not the time the API server took it.
    `vllm_pooling_operator_events_waiting` says how many are queued or posting.

    Reconciles go first (`yield_to`): while the work queue holds keys, at most EVENTS_WHILE_BUSY events are posted at
    once, and the rest wait until it is empty. An event is news about a write already made; the API server's time in
    a burst is better spent on the writes still to make."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        # what waits, by type: Warnings are posted first and dropped last (bad news is the news that matters)
        self._warnings: deque[Waiting] = deque()
        self._normal: deque[Waiting] = deque()
        self._workers: set[asyncio.Task[None]] = set()  # references, so they are not garbage-collected mid-flight
        self._dropped = 0  # since the queue was last empty: said once in the log when it empties
        self._posting = 0
        self._busy: Busy | None = None
        self._draining = asyncio.Event()

    def yield_to(self, busy: Busy) -> None:
        """Post at most EVENTS_WHILE_BUSY at once while `busy` (the runtime's work queue) holds anything."""
        self._busy = busy

    def __len__(self) -> int:
        """Events waiting (not those being posted)."""
        return len(self._warnings) + len(self._normal)

    def post(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        if len(self) >= EVENTS_BACKLOG:
            (self._normal or self._warnings).popleft()  # the oldest Normal event; a Warning only when none is left
            EVENTS_WAITING.dec()
            EVENTS_DROPPED.inc()
            self._dropped += 1
        waiting = (reference(owner), type_, reason, message, micro_time())  # stamped when it happened, not when posted
        (self._warnings if type_ == "Warning" else self._normal).append(waiting)
        EVENTS_WAITING.inc()
        if len(self._workers) < EVENTS_IN_FLIGHT:
            self._workers.add(asyncio.get_running_loop().create_task(self._work()))

    async def _work(self) -> None:
        try:
            while self:
                busy = self._busy
                if self._posting >= EVENTS_WHILE_BUSY and busy is not None and len(busy) and not self._draining.is_set():
                    await self._quiet(busy)
                    continue
                owner, type_, reason, message, at = (self._warnings or self._normal).popleft()
                self._posting += 1
                try:
                    await self.kube.event(owner, type_, reason, message, at=at)
                finally:
                    self._posting -= 1
                    EVENTS_WAITING.dec()
            if self._dropped:
                log.warning("Dropped %d events: more than %d waited to be posted (a burst faster than the API server "
                            "took them); the newest were kept", self._dropped, EVENTS_BACKLOG)
                self._dropped = 0
        finally:
            # gone from the set as soon as the queue is seen empty, with no await in between: a post() that comes
            # later starts a worker of its own rather than counting on this one
            self._workers.discard(asyncio.current_task())

    async def _quiet(self, busy: Busy) -> None:
        """Until the work queue is empty, or the operator stops (its workers gone, the queue may never empty)."""
        waits = [asyncio.ensure_future(busy.join()), asyncio.ensure_future(self._draining.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until every queued event is posted (or has failed); with a timeout, at most that long: then the
        events still waiting are given up, counted and said in the log (a shutdown while the API server is away
        must not wait on each event's retries)."""
        self._draining.set()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._workers:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                unposted = len(self) + self._posting
                EVENTS_WAITING.dec(len(self))  # those posting count themselves off as they are cancelled
                EVENTS_DROPPED.inc(unposted)
                self._warnings.clear()
                self._normal.clear()
                workers = list(self._workers)
                for task in workers:
                    task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                log.warning("Gave up %d events not posted within %gs of stopping", unposted, timeout)
                return
            await asyncio.wait(list(self._workers), timeout=left)


def reference(obj: dict[str, Any]) -> dict[str, Any]:
    """What an Event needs of its object (k8s/api.py's Kube.event): a queued event keeps no more of it."""
    meta = obj["metadata"]
    keep = ("name", "namespace", "uid", "resourceVersion")
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": {k: meta[k] for k in keep if k in meta}}


class SpaceChecks(Protocol):
    """What the reconcile reads of the space gate (runtime/space_gate.py): status.spaceCheck of a service."""

    def consider(self, owner: dict[str, Any], pod: dict[str, Any]) -> None:
        """A pod of a service with spec.spaceCheck, as observed: checked in the background once its vLLM is ready,
        unless its condition holds a verdict already."""

    def status_of(self, uid: str) -> dict[str, Any] | None:
        """The service's reference and last check, as the gate last saw them; None when it knows nothing yet."""


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
    space: SpaceChecks | None = None  # the space gate, where the runtime runs one
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

