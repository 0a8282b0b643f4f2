"""Conditions as the Kubernetes API conventions want them: lastTransitionTime moves only on a flip."""

from __future__ import annotations

from typing import Any

TYPES_ORDER = ("Ready", "SpecValid", "Progressing", "Degraded", "MetricsAvailable", "ScalingLimited", "Succeeded", "Failed")


def condition(type_: str, status: bool | str, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    value = status if isinstance(status, str) else ("True" if status else "False")
    out: dict[str, Any] = {"type": type_, "status": value, "reason": reason, "message": message}
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def merge(old: list[dict[str, Any]] | None, new: list[dict[str, Any]], now: str) -> list[dict[str, Any]]:
    """New conditions, keeping each old lastTransitionTime whose status did not change; sorted by type."""
    previous = {c.get("type"): c for c in old or []}
    out = []
    for cond in new:
        before = previous.get(cond["type"])
        since = before.get("lastTransitionTime") if before and before.get("status") == cond["status"] else None
        out.append({**cond, "lastTransitionTime": since or now})
    order = {t: i for i, t in enumerate(TYPES_ORDER)}
    return sorted(out, key=lambda c: (order.get(c["type"], len(order)), c["type"]))


def flips(old: list[dict[str, Any]] | None, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conditions whose status changed (or appeared)."""
    previous = {c.get("type"): c.get("status") for c in old or []}
    return [c for c in new if previous.get(c["type"]) != c["status"]]

