"""The policies the simulator compares ours with: a HorizontalPodAutoscaler on the waiting gauge (`hpa-queue`),
the KEDA ScaledObject that `render` emits (`keda`), and a clairvoyant limit (`oracle`). Pure.

A policy is called once per period with the time, the replicas set and ready, and the answers to the service's
queries (`promql.Prometheus.evaluate`), and returns the replica count to set.

The HPA emulation follows kube-controller-manager: per metric a recommendation (External metrics:
`AverageValue` compares the value with threshold × the replicas of the scale's status, `Value` compares it with
the threshold and multiplies by the ready pods; within the tolerance the count stays), the largest wins; then
the stabilisation windows and the scaling policies (decide.py's `stabilize`, `limit_step`,
`ratio_recommendation`, so the two autoscalers share one reading of HPA's rules); then min/max. KEDA answers
an empty or NaN result with 0 (`ignoreNullValues`, default true), truncates values to milli-units, and moves a
ScaledObject with `minReplicaCount: 0` between 0 and 1 itself (any trigger above its activation threshold
activates; `cooldownPeriod` seconds with none deactivates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pooling_operator.api.policy import STEP_PERIOD_SECONDS
from pooling_operator.autoscaling.decide import PERIOD_SECONDS
from pooling_operator.autoscaling.hpa import limit_step, ratio_recommendation, stabilize
from pooling_operator.autoscaling.simulator.trace import InputError, Trace
from pooling_operator.vllm.metrics import Queries

HPA_SYNC_SECONDS = 15  # kube-controller-manager --horizontal-pod-autoscaler-sync-period
HPA_TOLERANCE = 0.1


@dataclass(frozen=True)
class Rules:
    """One direction of an HPA `behavior`: stabilisation window and scaling policies (type, value, period)."""

    window: int
    policies: tuple[tuple[str, int, int], ...]
    select: str = "Max"


HPA_DEFAULT_UP = Rules(0, (("Pods", 4, 15), ("Percent", 100, 15)))
HPA_DEFAULT_DOWN = Rules(300, (("Percent", 100, 15),))


@dataclass(frozen=True)
class Metric:
    signal: str  # a key of Queries.named()
    metric_type: str  # AverageValue | Value
    threshold: float
    activation: float = 0.0


class Hpa:
    """A HorizontalPodAutoscaler on External metrics, optionally with KEDA's 0 <-> 1 activation."""

    def __init__(self, name: str, metrics: tuple[Metric, ...], min_replicas: int, max_replicas: int,
                 up: Rules = HPA_DEFAULT_UP, down: Rules = HPA_DEFAULT_DOWN, keda_cooldown: int | None = None,
                 period: float = HPA_SYNC_SECONDS) -> None:
        self.name = name
        self.period = float(period)
        self.metrics = metrics
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.up = up
        self.down = down
        self.keda_cooldown = keda_cooldown
        self._history: list[tuple[float, int]] = []
        self._events: list[tuple[float, int]] = []
        self._last_active: float | None = None

    def start(self, replicas: int) -> None:
        self._history = [(0.0, replicas)]
        self._last_active = 0.0

    def replicas(self, now: float, current: int, ready: int, values: Mapping[str, float | None]) -> int:
        read = {m.signal: _keda_value(values.get(m.signal)) for m in self.metrics}
        if self.keda_cooldown is not None and self.min_replicas == 0:
            active = any(read[m.signal] > m.activation for m in self.metrics)
            if active:
                self._last_active = now
            if current == 0:
                return 1 if active else 0
            if self._last_active is None or now - self._last_active >= self.keda_cooldown:
                return 0
        if current == 0:
            return 0  # an HPA whose target is scaled to zero does nothing
        recs = []
        for m in self.metrics:
            value = read[m.signal]
            if m.metric_type == "AverageValue":
                recs.append(ratio_recommendation(current, value / (m.threshold * current), HPA_TOLERANCE))
            else:
                ratio = value / m.threshold
                recs.append(current if abs(ratio - 1.0) <= HPA_TOLERANCE else ratio_recommendation(ready, ratio, 0.0))
        raw = max(recs)
        keep = max(self.up.window, self.down.window)
        self._history = [(t, r) for t, r in self._history if t >= now - keep] + [(now, raw)]
        stable = stabilize(self._history, now, current, self.up.window, self.down.window)
        self._events = [(t, d) for t, d in self._events if t > now - STEP_PERIOD_SECONDS]
        added = sum(d for _, d in self._events if d > 0)
        removed = -sum(d for _, d in self._events if d < 0)
        up_step = _allowed(self.up, current - added, up=True)
        down_step = _allowed(self.down, current + removed, up=False)
        stepped = limit_step(self._events, now, current, stable, up_step, down_step)
        desired = min(max(stepped, max(1, self.min_replicas)), self.max_replicas)
        if desired != current:
            self._events.append((now, desired - current))
        return desired


def _keda_value(value: float | None) -> float:
    if value is None or not math.isfinite(value):
        return 0.0
    return math.trunc(value * 1000) / 1000


def _allowed(rules: Rules, period_start: int, up: bool) -> int:
    """Replicas the direction's policies allow to change within one period, from the period's start."""
    if rules.select == "Disabled":
        return 0
    steps = []
    for kind, value, _period in rules.policies:
        if kind == "Pods":
            steps.append(value)
        elif up:
            steps.append(math.ceil(period_start * (1 + value / 100)) - period_start)
        else:
            steps.append(period_start - int(period_start * (1 - value / 100)))
    return max(steps) if rules.select == "Max" else min(steps)


def _rules(spec: Mapping[str, Any] | None, default: Rules, where: str) -> Rules:
    if not spec:
        return default
    policies = []
    for p in spec.get("policies") or []:
        if p.get("type") not in ("Pods", "Percent") or int(p.get("periodSeconds", 0)) != STEP_PERIOD_SECONDS:
            raise InputError(f"{where}: only Pods/Percent policies over {STEP_PERIOD_SECONDS}s are emulated, got {dict(p)}")
        policies.append((str(p["type"]), int(p["value"]), int(p["periodSeconds"])))
    return Rules(
        int(spec.get("stabilizationWindowSeconds", default.window)),
        tuple(policies) or default.policies,
        str(spec.get("selectPolicy", "Max")),
    )


def hpa_queue(min_replicas: int, max_replicas: int) -> Hpa:
    """production-stack's recipe: an HPA on the waiting gauge, 5 per pod, with HPA's default behaviour."""
    return Hpa("hpa-queue", (Metric("waiting", "AverageValue", 5.0),), min_replicas, max_replicas)


def keda(scaled_object: Mapping[str, Any], queries: Queries, hpa_sync_seconds: float = HPA_SYNC_SECONDS) -> Hpa:
    """The HPA that KEDA derives from a ScaledObject, synced every `hpa_sync_seconds` (kube-controller-manager's
    period: 15 s unless the cluster sets another). Each trigger's query must be one of the service's queries
    (that is how its value is known); anything else is an error, never a guess."""
    spec = scaled_object["spec"]
    signal_of = {q: name for name, q in queries.named().items()}
    metrics = []
    for trigger in spec.get("triggers") or []:
        meta = trigger.get("metadata") or {}
        # the wake trigger's query is the user's: the simulator knows its value as the front's requests
        signal = "wake" if trigger.get("name") == "wake" else signal_of.get(meta.get("query", ""))
        if trigger.get("type") != "prometheus" or signal is None:
            raise InputError(f"KEDA trigger {trigger.get('name')!r}: its query is none of the service's queries: {meta.get('query')}")
        metrics.append(Metric(signal, str(trigger.get("metricType", "AverageValue")), float(meta["threshold"]),
                              float(meta.get("activationThreshold", 0))))
    behavior = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior") or {}
    return Hpa(
        "keda", tuple(metrics), int(spec.get("minReplicaCount", 0)), int(spec.get("maxReplicaCount", 100)),
        _rules(behavior.get("scaleUp"), HPA_DEFAULT_UP, "scaleUp"),
        _rules(behavior.get("scaleDown"), HPA_DEFAULT_DOWN, "scaleDown"),
        keda_cooldown=int(spec.get("cooldownPeriod", 300)), period=hpa_sync_seconds,
    )


# ---- the oracle ----------------------------------------------------------------------------------------------


class Oracle:
    """Sees the trace one model start-up ahead: at each period it runs the fewest replicas that keep every
    replica at or below its highest rate meeting the target (`rates`, per mean prompt size, measured by the
    simulator) throughout [now, now + startup + period]: what it adds now is ready by the end of that span, and
    what it removes now could not be back before. Where the target cannot be met at any count up to the maximum
    (a rate of 0, or more replicas than allowed), it runs the maximum."""

    def __init__(self, trace: Trace, rates: Mapping[float, float], startup_s: float, min_replicas: int,
                 max_replicas: int) -> None:
        self.name = "oracle"
        self.period = float(PERIOD_SECONDS)
        self.trace = trace
        self.rates = rates
        self.horizon = startup_s + self.period
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas

    def start(self, replicas: int) -> None:
        pass  # it keeps no history

    def need(self, rate: float, mean_tokens: float) -> int:
        if rate <= 0:
            return self.min_replicas
        per_replica = self.rates[mean_tokens]
        if per_replica <= 0:
            return self.max_replicas
        return min(self.max_replicas, max(self.min_replicas, math.ceil(round(rate / per_replica, 9))))

    def replicas(self, now: float, current: int, ready: int, values: Mapping[str, float | None]) -> int:
        ahead = self.trace.overlapping(now, now + self.horizon)
        return max((self.need(s.rate, s.mean_tokens) for s in ahead), default=self.min_replicas)
