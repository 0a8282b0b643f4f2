"""The reconcile: one module per kind (services, jobs, caches, policies), one flow (reconcile/flow.py), chosen from one
table. A reconcile reads nothing from the API server (but a Namespace's labels when a policy selects namespaces,
and a Job's refusal events while it has no pod): everything comes from the watch-fed cache (`k8s/cache.py`);
writes happen only where observed differs from desired, and what was validated and planned is kept per
resource until its spec, labels or policies change (reconcile/state.py), so a reconcile of an unchanged resource
serialises nothing.
"""

from __future__ import annotations

import time
from typing import Any

from pooling_operator.api.resources import KINDS
from pooling_operator.k8s.api import ApiError
from pooling_operator.reconcile.caches import CACHES
from pooling_operator.reconcile.context import (
    DURATION,
    RECONCILES,
    Context,
    Events,
    Gone,
    InvalidSpec,
    Tracker,
)
from pooling_operator.reconcile.flow import Kind, run
from pooling_operator.reconcile.jobs import JOBS
from pooling_operator.reconcile.policies import policy_counts, reconcile_policies
from pooling_operator.reconcile.policyset import PolicySet, policy_set
from pooling_operator.reconcile.services import SERVICES, forget_metrics
from pooling_operator.reconcile.state import Memory

__all__ = ["RECONCILERS", "Context", "Events", "Gone", "InvalidSpec", "Kind", "Memory", "PolicySet", "Reconciles",
           "Tracker", "policy_counts"]

# The kinds the operator reconciles, and whose part of the flow each one is: by family, from the kinds table.
FLOWS: dict[str, Kind] = {"service": SERVICES, "job": JOBS, "cache": CACHES}
RECONCILERS: dict[str, Kind] = {kind: FLOWS[info.family] for kind, info in KINDS.items() if info.family in FLOWS}


class Reconciles:
    """The reconciles of one operator replica and the state they keep about each object (one owner, one
    `forget`). `kinds` is the table of reconcilers (RECONCILERS; a test hands its own)."""

    def __init__(self, ctx: Context, kinds: dict[str, Kind] | None = None) -> None:
        self.ctx = ctx
        self.kinds = RECONCILERS if kinds is None else kinds
        self.memory = Memory()
        self._policies: PolicySet | None = None

    def policies(self) -> PolicySet:
        """The watched policies judged by every rule, once per resourceVersion."""
        self._policies = policy_set(self.ctx.cache.policy_bodies(), self.ctx.settings, self._policies)
        return self._policies

    async def reconcile(self, body: dict[str, Any]) -> dict[str, Any]:
        """Bring a resource, as the cache holds it, and its children to the desired state; returns the status.
        The caller never runs two reconciles of one resource at once (the work queue)."""
        kind = str(body.get("kind", "?"))
        started = time.monotonic()
        try:
            status = await run(self.kinds[kind], self.ctx, self.memory, self.policies(), body)
        except ApiError as exc:
            if not exc.gone:
                RECONCILES.labels(kind, "error").inc()
                raise
            RECONCILES.labels(kind, "gone").inc()
            raise Gone(str(exc)) from exc
        except InvalidSpec:
            RECONCILES.labels(kind, "invalid").inc()
            raise
        except Exception:  # a bug: the runtime logs it and retries with backoff; the alert rules count it
            RECONCILES.labels(kind, "error").inc()
            raise
        finally:
            DURATION.labels(kind).observe(time.monotonic() - started)
        RECONCILES.labels(kind, "ok").inc()
        return status

    async def reconcile_policies(self, services: list[dict[str, Any]]) -> None:
        await reconcile_policies(self.ctx, self.policies(), self.ctx.cache.policy_bodies(), services)

    def knows(self, uid: str) -> bool:
        return self.memory.knows(uid)

    def forget(self, uid: str) -> None:
        b = self.memory.built.get(uid)
        if b is not None:
            forget_metrics(b.resource)
        self.memory.forget(uid)
