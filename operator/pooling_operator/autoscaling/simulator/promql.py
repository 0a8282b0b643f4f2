"""What Prometheus would answer the autoscaler's queries with, in simulated time: pure, no clock, no I/O.

The simulator scrapes each pod's counters (`servicemodel.Counters`) into a `Prometheus` and evaluates the
queries of `vllm.metrics.queries` at a decision time, answering them the way the real server does:

- a pod still loading its model exports nothing, so it has no samples and no series;
- an instant selector (the waiting gauge and its `count`) takes each pod's newest sample of the last five
  minutes, unless the pod went away since (its staleness marker hides it at once);
- `rate(x[w])` per pod is the increase between the first and the last sample inside `(now - w, now]` divided by
  their distance in time; a pod needs two samples in the window for a series. Prometheus also extrapolates the
  increase towards the window's edges (by up to half a scrape interval on each side); leaving that out reads
  the same rate for a steady counter and a slightly smaller increase at the edges of a change;
- `sum` over no series is no series (None), and `histogram_quantile` of an empty histogram is NaN, kept as NaN
  here as the real server returns it (`decide.signals_from` turns it into "no latency to speak of").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from pooling_operator.autoscaling.simulator.servicemodel import Counters

LOOKBACK_SECONDS = 300.0  # Prometheus's default lookback delta for instant selectors


@dataclass(frozen=True)
class Sample:
    """One scrape of one pod: the series the autoscaler queries, as numbers."""

    t: float
    waiting: float
    success: float
    prompt_tokens: float
    e2e_sum: float
    e2e_buckets: tuple[int, ...]  # cumulative, the last one is +Inf


@dataclass
class _Target:
    samples: deque[Sample] = field(default_factory=deque)
    stale_at: float | None = None


def histogram_quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float:
    """Prometheus's `histogram_quantile` over one histogram: `bounds` are the finite upper bounds, `cumulative`
    the (rates of the) cumulative bucket counts with the +Inf bucket last. Linear inside the bucket, the first
    bucket starting at 0; a rank in the +Inf bucket answers the highest finite bound; NaN without
    observations."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if len(cumulative) != len(bounds) + 1 or len(cumulative) < 2:
        return math.nan
    counts, running = [], 0.0
    for c in cumulative:  # Prometheus makes the buckets monotonic before it interpolates
        running = max(running, c)
        counts.append(running)
    total = counts[-1]
    if total <= 0:
        return math.nan
    rank = q * total
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(bounds):
        return bounds[-1]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / count)


class Prometheus:
    """The samples of one service's pods, and the answers to its queries at a time."""

    def __init__(self, window_seconds: float, bounds: tuple[float, ...]) -> None:
        self.window = window_seconds
        self.bounds = bounds
        self._targets: dict[int, _Target] = {}

    def scrape(self, pod: int, t: float, counters: Counters) -> None:
        target = self._targets.setdefault(pod, _Target())
        target.samples.append(
            Sample(t, float(counters.waiting), float(counters.success), float(counters.prompt_tokens),
                   counters.e2e.sum, tuple(counters.e2e.cumulative()))
        )
        horizon = t - max(self.window, LOOKBACK_SECONDS)
        while target.samples and target.samples[0].t <= horizon:
            target.samples.popleft()

    def gone(self, pod: int, t: float) -> None:
        """The pod went away at t: Prometheus writes a staleness marker at the next scrape it misses."""
        if pod in self._targets:
            self._targets[pod].stale_at = t

    def evaluate(self, now: float) -> dict[str, float | None]:
        """Every query of `Queries.named()` at `now`: None for no series, NaN as Prometheus returns it."""
        gauges: list[float] = []
        windows: list[tuple[Sample, Sample]] = []
        horizon = now - max(self.window, LOOKBACK_SECONDS)
        for pod in [p for p, x in self._targets.items() if x.stale_at is not None and x.stale_at <= horizon]:
            del self._targets[pod]  # gone long enough to be in no query any more
        for target in self._targets.values():
            seen = [s for s in target.samples if s.t <= now]
            if not seen:
                continue
            newest = seen[-1]
            if newest.t > now - LOOKBACK_SECONDS and (target.stale_at is None or target.stale_at > now):
                gauges.append(newest.waiting)
            inside = [s for s in seen if s.t > now - self.window]
            if len(inside) >= 2:
                windows.append((inside[0], inside[-1]))
        values: dict[str, float | None] = {
            "waiting": sum(gauges) if gauges else None,
            "reporting": float(len(gauges)) if gauges else None,
        }
        if not windows:
            values.update(completions=None, inSystem=None, tokens=None, p99=None)
            return values

        def rate(pick: str) -> float:
            return sum((getattr(b, pick) - getattr(a, pick)) / (b.t - a.t) for a, b in windows)

        buckets = [
            sum((b.e2e_buckets[i] - a.e2e_buckets[i]) / (b.t - a.t) for a, b in windows)
            for i in range(len(self.bounds) + 1)
        ]
        values.update(
            completions=rate("success"),
            inSystem=rate("e2e_sum"),
            tokens=rate("prompt_tokens"),
            p99=histogram_quantile(0.99, self.bounds, buckets),
        )
        return values


