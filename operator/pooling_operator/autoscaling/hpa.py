"""The HorizontalPodAutoscaler's own rules, pure: a usage ratio against a target inside a tolerance band, the
stabilisation windows, and the step limit per period (kube-controller-manager's pkg/controller/podautoscaler
replica_calculator.go and horizontal.go). The operator's decision (`decide.py`) applies them to its signals; the
simulator's hpa-queue and keda baselines (`simulator/baselines.py`) apply them as the HPA does."""

from __future__ import annotations

import math
from collections.abc import Iterable

from pooling_operator.api.policy import STEP_PERIOD_SECONDS

MAX_RECOMMENDATION = 1_000_000  # far above any bound; keeps a ratio over a vanishing capacity finite


def ceil_replicas(x: float) -> int:
    """x rounded up to a replica count (0 at least; MAX_RECOMMENDATION for an infinite or vast ratio)."""
    if not math.isfinite(x) or x > MAX_RECOMMENDATION:
        return MAX_RECOMMENDATION if x > 0 else 0
    return max(0, math.ceil(round(x, 9)))


def ratio_recommendation(base: int, usage_ratio: float, tolerance: float) -> int:
    """HPA's rule: base × ratio rounded up, unless the ratio is within the tolerance band."""
    if abs(usage_ratio - 1.0) <= tolerance:
        return base
    return ceil_replicas(base * usage_ratio)


def stabilize(history: Iterable[tuple[float, int]], now: float, current: int, up_window: int, down_window: int) -> int:
    """HPA's stabilisation: up to the smallest recommendation of the up window, down to the largest of the down
    window, otherwise stay."""
    items = list(history)
    ups = [r for t, r in items if t >= now - up_window]
    downs = [r for t, r in items if t >= now - down_window]
    up = min(ups) if ups else current
    down = max(downs) if downs else current
    if current < up:
        return up
    if current > down:
        return down
    return current


def limit_step(events: Iterable[tuple[float, int]], now: float, current: int, wanted: int, up_step: int, down_step: int) -> int:
    """At most up_step added / down_step removed within any STEP_PERIOD_SECONDS."""
    recent = [d for t, d in events if t > now - STEP_PERIOD_SECONDS]
    added = sum(d for d in recent if d > 0)
    removed = -sum(d for d in recent if d < 0)
    if wanted > current:
        return min(wanted, current + max(0, up_step - added))
    if wanted < current:
        return max(wanted, current - max(0, down_step - removed))
    return current
