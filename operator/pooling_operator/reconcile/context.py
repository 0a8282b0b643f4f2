"""What every reconcile shares: the Context (API, cache, settings, per-object state), its errors and metrics."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Histogram

from pooling_operator.api.problems import Problem
from pooling_operator.autoscaling.loop import Autoscaler
from pooling_operator.k8s.api import ApiError, Kube
from pooling_operator.k8s.cache import Cache
from pooling_operator.vllm.rules import Settings

if TYPE_CHECKING:
    from pooling_operator.reconcile.built import Built

log = logging.getLogger(__name__)

RECONCILES = Counter("vllm_pooling_operator_reconciles", "Reconciles run.", ["kind", "result"])
WRITES = Counter("vllm_pooling_operator_writes", "Objects created, changed or deleted.", ["kind", "action"])
DURATION = Histogram(
    "vllm_pooling_operator_reconcile_duration_seconds", "Time of one reconcile.", ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CATCH_UP_SECONDS = 10.0
SERVICE_CHILDREN = ("Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "PodMonitor", "ScaledObject", "NetworkPolicy")
JOB_CHILDREN = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job")


@dataclass
class Context:
    """What a reconcile needs besides the object: the API, operator settings and the known policies."""

    kube: Kube
    cache: Cache = field(default_factory=Cache)
    settings: Settings = field(default_factory=Settings)
    operator_image: str | None = None
    namespaces: list[str] = field(default_factory=list)
    identity: str = ""
    failures: dict[str, int] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    warned: set[tuple[str, str]] = field(default_factory=set)  # (uid, reason) of one-off warnings
    memo: dict[str, Built] = field(default_factory=dict)  # uid -> what its spec validated and built to
    catching_up: dict[str, float] = field(default_factory=dict)  # uid -> since when its Deployment's controller lags
    verified: dict[str, dict[tuple[str, str], tuple[str, str]]] = field(default_factory=dict)  # uid -> child -> (rv, hash) found equal
    autoscaler: Autoscaler | None = None
    _events: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16))

    def forget(self, uid: str) -> None:
        """Drop the per-object state of a resource that is gone."""
        self.memo.pop(uid, None)
        self.catching_up.pop(uid, None)
        self.verified.pop(uid, None)
        self.warned = {w for w in self.warned if w[0] != uid}

    def background(self, coro: Any) -> None:
        """Run a coroutine on the loop, keeping a reference so it is not garbage-collected mid-flight."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post an event without holding the reconcile up: events are best effort (kube.event logs failures),
        and a reconcile that waits for each one takes twice as long to create the next child."""
        self.background(self._event(owner, type_, reason, message))

    async def _event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        async with self._events:
            await self.kube.event(owner, type_, reason, message)

    async def drain(self) -> None:
        """Wait for background work (events) in flight."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


class InvalidSpec(Exception):
    """The resource breaks a rule; it is not retried until its spec changes."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems if p.severity == "error"))
        self.problems = problems


class Gone(Exception):
    """The resource or its namespace went away while it was being reconciled: nothing left to do."""


def _is_gone(exc: ApiError) -> bool:
    return exc.status == 404 or (exc.status == 403 and "NamespaceTerminating" in exc.body)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ref(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")


