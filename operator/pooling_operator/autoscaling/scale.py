"""What the autoscaler writes, and nothing else: a Deployment's /scale, the service's `status.autoscaling`,
`status.cost` and its conditions, and an event per scale or condition flip — all under the autoscaler's field manager,
and only when something changed."""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import Counter

from pooling_operator.api.clock import rfc3339
from pooling_operator.autoscaling.decide import Decision
from pooling_operator.k8s.api import AUTOSCALER_FIELD_MANAGER, AUTOSCALER_STATUS, Kube, status_patch
from pooling_operator.k8s.cache import Cache
from pooling_operator.status import conditions as C

log = logging.getLogger(__name__)
WRITES = Counter("vllm_pooling_operator_autoscaler_writes", "Writes of the autoscaler.", ["what"])  # scale | status


FIGURE_TOLERANCE = 0.1  # a status figure is rewritten when it moved by more than this share


def autoscaling_status(decision: Decision, current: int, ready: int, last_scale_time: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"desiredReplicas": decision.desired, "currentReplicas": current, "readyReplicas": ready}
    for key, value in sorted(decision.values.items()):
        out[key] = float(f"{value:.3g}")
    if decision.recommendations:
        out["recommendations"] = dict(sorted(decision.recommendations.items()))
    if last_scale_time:
        out["lastScaleTime"] = last_scale_time
    if decision.zero is not None and decision.zero.status:
        out["scaledToZero"] = decision.zero.status
    out["reason"] = decision.reason
    return out


def decision_conditions(decision: Decision, generation: int | None) -> list[dict[str, Any]]:
    out = [
        C.condition(C.METRICS_AVAILABLE, decision.metrics_available, decision.metrics_reason, decision.metrics_message, generation),
        C.condition(C.SCALING_LIMITED, decision.limited, decision.limited_reason, decision.limited_message, generation),
    ]
    z = decision.zero
    if z is not None:  # minReplicas 0: whether the service is at zero, and why
        message = z.reason or ("replicas serve; the service goes to 0 after its idle time" if not z.at_zero else "")
        out.append(C.condition(C.SCALED_TO_ZERO_TYPE, z.at_zero, z.condition_reason, message, generation))
    return out


def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Nothing worth a write: the same counts, recommendations, scale time and conditions (status, reason,
    message), and every figure within FIGURE_TOLERANCE of what status says (figures wiggle every period;
    rewriting them would write, and reconcile, every 15 s per service). The reason text follows the figures
    and is left out."""
    a, b = dict(old.get("autoscaling") or {}), dict(new.get("autoscaling") or {})
    for block in (a, b):
        block.pop("reason", None)
    if a.keys() != b.keys():
        return False
    for key, value in b.items():
        before = a[key]
        if isinstance(value, float) and isinstance(before, int | float) and not isinstance(before, bool):
            if abs(value - before) > FIGURE_TOLERANCE * max(abs(value), abs(before)):
                return False
        elif value != before:
            return False

    def conds(status: dict[str, Any]) -> list[tuple[Any, ...]]:
        mine, _ = C.split(status.get("conditions"), C.AUTOSCALER_TYPES)
        return sorted((c["type"], c["status"], c.get("reason"), c.get("message"), c.get("observedGeneration")) for c in mine)

    return conds(old) == conds(new) and old.get("cost") == new.get("cost")


async def write_scale(kube: Kube, body: dict[str, Any], current: int, decision: Decision) -> None:
    meta = body["metadata"]
    await kube.scale(meta["namespace"], meta["name"], decision.desired)
    WRITES.labels("scale").inc()
    direction = "ScaledUp" if decision.desired > current else "ScaledDown"
    log.info("Scaled Deployment %s/%s from %d to %d replicas: %s", meta["namespace"], meta["name"], current, decision.desired, decision.reason)
    await kube.event(body, "Normal", direction, decision.reason[:1000])


async def write_status(
    kube: Kube, body: dict[str, Any], decision: Decision, current: int, ready: int, last_scale_time: str | None,
    cache: Cache | None = None, cost: dict[str, Any] | None = None,
) -> bool:
    """Apply status.autoscaling and the two conditions when they differ from what the object has; post an
    event per condition flip. Returns whether it wrote."""
    meta = body["metadata"]
    old = body.get("status") or {}
    old_mine, _ = C.split(old.get("conditions"), C.AUTOSCALER_TYPES)
    new: dict[str, Any] = {
        "autoscaling": autoscaling_status(decision, current, ready, last_scale_time),
        "conditions": C.merge(old_mine, decision_conditions(decision, meta.get("generation")), rfc3339()),
    }
    if cost:
        new["cost"] = cost
    if _same(old, new):
        return False
    written = await kube.apply(status_patch(body, new), manager=AUTOSCALER_FIELD_MANAGER, subresource="status")
    if cache is not None:
        cache.wrote(written)  # the next period reads it even if the watch has not shown it yet
    WRITES.labels("status").inc()
    for cond in C.flips(old_mine, new["conditions"]):
        if not old_mine and cond["status"] == ("True" if cond["type"] == C.METRICS_AVAILABLE else "False"):
            continue  # the first decision: nothing flipped, no noise
        await kube.event(body, C.event_type(cond), cond["reason"], f"{cond['type']} is {cond['status']}: {cond['message']}")
    return True


async def clear_status(kube: Kube, body: dict[str, Any]) -> None:
    """The service stopped autoscaling with the operator: remove what the autoscaler owned (an apply with
    nothing in it drops the manager's fields)."""
    old = body.get("status") or {}
    mine, _ = C.split(old.get("conditions"), C.AUTOSCALER_TYPES)
    if not mine and not any(key in old for key in AUTOSCALER_STATUS):
        return
    await kube.apply(status_patch(body), manager=AUTOSCALER_FIELD_MANAGER, subresource="status")
