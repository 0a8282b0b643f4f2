"""The reconcile's memory of each object (what its spec was judged and planned to, `Built`): one owner for every piece of per-object state the reconcile keeps,
dropped with one `forget(uid)` when the object goes. (The runtime keeps its own: settled keys and retry counts;
the cache its recent writes; the autoscaler the services it follows.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pooling_operator.api import ModelCache
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import VllmResource
from pooling_operator.builders import Plan
from pooling_operator.reconcile.policyset import PolicySet
from pooling_operator.status import conditions as C
from pooling_operator.status.startup import Startup


@dataclass(frozen=True)
class Built:
    """A resource's spec validated and planned, for the inputs in `key`, `policies` and `labels`."""

    key: tuple[Any, ...]
    policies: PolicySet
    labels: dict[str, str] | None
    resource: VllmResource | ModelCache | None
    problems: list[Problem]  # the spec's own
    policy: AutoscalingPolicySpec | None = None
    policy_problems: list[Problem] = field(default_factory=list)
    policy_reason: str = C.POLICY_NOT_ALLOWED
    plan: Plan | None = None
    desired: list[dict[str, Any]] = field(default_factory=list)  # the plan's objects with their applied-hash annotation

    def fits(self, key: tuple[Any, ...], policies: PolicySet, labels: dict[str, str] | None) -> bool:
        return self.key == key and self.policies.version == policies.version and self.labels == labels


Mark = tuple[str, str]  # (resourceVersion, applied-hash) of a child found equal to what we want


@dataclass
class Memory:
    built: dict[str, Built] = field(default_factory=dict)  # uid -> what its spec validated and built to
    verified: dict[str, dict[tuple[str, str], Mark]] = field(default_factory=dict)  # uid -> (kind, name) -> mark
    catching_up: dict[str, float] = field(default_factory=dict)  # uid -> since when its Deployment's controller lags
    warned: set[tuple[str, str]] = field(default_factory=set)  # (uid, reason) of one-off warnings
    started: dict[str, set[str]] = field(default_factory=dict)  # uid -> its pods' uids already measured (start-up)
    pending_startups: dict[str, list[Startup]] = field(default_factory=dict)  # uid -> found, not yet written

    def knows(self, uid: str) -> bool:
        """The object was reconciled before (a new one goes ahead in the queue)."""
        return uid in self.built

    def forget(self, uid: str) -> None:
        """Drop every piece of state about an object that is gone."""
        self.built.pop(uid, None)
        self.verified.pop(uid, None)
        self.catching_up.pop(uid, None)
        self.started.pop(uid, None)
        self.pending_startups.pop(uid, None)
        self.warned = {w for w in self.warned if w[0] != uid}

    def sizes(self) -> dict[str, int]:
        return {"memo": len(self.built), "verified": len(self.verified), "catching_up": len(self.catching_up),
                "warned": len(self.warned), "started": len(self.started),
                "pending_startups": len(self.pending_startups)}
