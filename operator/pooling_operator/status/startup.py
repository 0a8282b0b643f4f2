"""A service's start-up, measured from its pods: pod created -> Ready (the readiness probe on vLLM's /health
passed). Pure: pods and the previous `status.startup` in, the new one out. The reconcile counts each pod once
(reconcile/state.py) and exports each sample (`vllm_pooling_operator_replica_startup_seconds`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

TYPICAL_OVER = 10  # typicalSeconds follows about the last this many samples (a running mean)


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def pod_startups(pods: Iterable[dict[str, Any]]) -> list[tuple[str, float, datetime]]:
    """(pod uid, seconds from creation to Ready, when it became Ready) of every Ready pod, oldest Ready first."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        created = _time(meta.get("creationTimestamp"))
        ready = next((c for c in (pod.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Ready" and c.get("status") == "True"), None)
        at = _time((ready or {}).get("lastTransitionTime"))
        if created is None or at is None or not meta.get("uid"):
            continue
        out.append((str(meta["uid"]), max(0.0, (at - created).total_seconds()), at))
    return sorted(out, key=lambda x: x[2])


def merged(old: dict[str, Any] | None, samples: list[float]) -> dict[str, Any] | None:
    """`status.startup` with new samples (oldest first) folded in; the old one when there are none."""
    if not samples:
        return old
    n = int((old or {}).get("samples") or 0)
    typical = (old or {}).get("typicalSeconds")
    for s in samples:
        n += 1
        typical = s if typical is None or n == 1 else typical + (s - typical) / min(n, TYPICAL_OVER)
    return {"lastSeconds": round(samples[-1], 1), "typicalSeconds": round(float(typical), 1), "samples": n}


def typical_seconds(body: dict[str, Any]) -> float | None:
    """A service's typical start-up from its `status.startup`, or None before the first pod was Ready."""
    value = ((body.get("status") or {}).get("startup") or {}).get("typicalSeconds")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
