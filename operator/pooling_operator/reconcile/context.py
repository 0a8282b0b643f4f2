"""What every reconcile shares: the Context (its dependencies and nothing else), the event poster, the small
protocol through which it reaches the autoscaler, its errors and metrics."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter, Histogram

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
    reconcile that waits for each one takes twice as long to create the next child."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(EVENTS_IN_FLIGHT)

    def post(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        task = asyncio.get_running_loop().create_task(self._post(owner, type_, reason, message))
        self._tasks.add(task)  # a reference, so it is not garbage-collected mid-flight
        task.add_done_callback(self._tasks.discard)

    async def _post(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        async with self._slots:
            await self.kube.event(owner, type_, reason, message)

    async def drain(self) -> None:
        """Wait for the events in flight."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


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

