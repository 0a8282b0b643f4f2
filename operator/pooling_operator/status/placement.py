"""Pods that cannot be created or placed, in the controller's or scheduler's own words. One observer, two
readers: the reconcile's Degraded condition and the autoscaler's ScalingLimited."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pooling_operator.status import conditions as C


@dataclass(frozen=True)
class Placement:
    reason: str  # C.FAILED_CREATE or C.LIMIT_UNSCHEDULABLE
    message: str


def placement_problem(
    workload: dict[str, Any] | None, pods: list[dict[str, Any]], events: list[dict[str, Any]] | None = None
) -> Placement | None:
    """A ReplicaFailure of the Deployment (quota, PodSecurity, a missing ServiceAccount: the ReplicaSet
    controller's FailedCreate), else the first pending pod the scheduler could not place (services and jobs)."""
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        # A Deployment's ReplicaFailure; a Job says FailedCreate only in events, so its pods speak for it.
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return Placement(C.FAILED_CREATE, str(cond.get("message") or cond.get("reason") or "pods cannot be created"))
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
                return Placement(C.LIMIT_UNSCHEDULABLE, f"pod {pod['metadata']['name']}: {cond.get('message') or 'unschedulable'}")
    # A Job's controller says FailedCreate only in an event on the Job: believed while no pod of it exists.
    if not pods and events:
        latest = max(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return Placement(C.FAILED_CREATE, str(latest.get("message") or "pods cannot be created"))
    return None
