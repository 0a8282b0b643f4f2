"""Scale to zero, and back: when an autoscaled service with minReplicas 0 gives up its last replica, and when it
gets one back. Pure: values in, values out (the loop reads the wake query and keeps the state).

vLLM's metrics vanish with the last pod, so the decision (decide.py) cannot see demand at zero; the service's
wake query (`autoscaling.wake.prometheus.query`: the front's pending or arriving requests) can. The rules:

- **Zero only when it pays.** The next request after zero pays a start-up, so a service goes to zero only after
  `idle_bound` seconds in which nothing completed, nothing waited, nothing was in the system and the wake query
  read 0: `scaleToZero.idleSeconds`, else ten of its start-ups (status.startup.typicalSeconds), at least 300 s.
  Any request, or a query that could not be read, starts the idle time again; missing vLLM series (a replica still
  loading) are not idleness.
- **Never while requests are pending**: a wake value above 0 is demand, at any replica count.
- **Back on the first demand, sized to what waits**: at zero, a wake value above 0 asks for replicas at once. With
  no capacity measured yet (a service that never served) that is one, and the decision takes over from there as
  the replica's own metrics appear. With the capacity one replica served before (the decision's
  `capacityPerReplica`, kept while at zero), the wake is sized (`wake_size`) so that what waits when the replicas
  are Ready (the requests held, plus those arriving until then at the rate they were held: the held count over
  the time since the wake plus one period) is served within `WAKE_DRAIN_SECONDS` on top of the arrivals. A
  capacity measured at saturation sizes it as it is. One that is only a lower bound (the most a replica served on
  target without saturating) is kept only when read while the replicas were busy (`WAKE_BUSY_IN_SYSTEM`
  requests in the system each: a bound read at a trickle is the trickle, and would wake a crowd for one request);
  it errs towards more replicas, as many as served that rate on target before, plus the backlog's share.
  While the woken replicas load (none Ready yet) each period sizes the wake again from what the front holds then,
  and only ever asks for more. The size is a recommendation of the decision's scale-down window, so the replicas a
  wake started are not taken back the moment the first reports. No answer from Prometheus holds the count where
  it is (fail static, as the decision does).

What it says: `status.autoscaling.scaledToZero` (`since`: when it went to zero; `lastWake`: when, by what and how
long the first replica took from the wake to Ready, at the loop's period) and the condition ScaledToZero (True
while at zero replicas).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pooling_operator.api.policy import AutoscalingTargets as Targets
from pooling_operator.autoscaling.decide import (
    PERIOD_SECONDS,
    Budget,
    Decision,
    Observed,
    Signals,
    State,
    bounds,
    decide,
)
from pooling_operator.autoscaling.hpa import ceil_replicas
from pooling_operator.autoscaling.zero_state import ZeroOutcome, ZeroState
from pooling_operator.status.conditions import (
    PROMETHEUS_UNREACHABLE,
    QUERIES_ANSWERED,
    WITHIN_BOUNDS,
)

IDLE_STARTUPS = 10  # a service goes to zero after this many of its own start-ups without a request ...
IDLE_FLOOR_SECONDS = 300.0  # ... and never sooner than this (a start-up not yet measured counts as 0)
IN_SYSTEM_IDLE = 0.01  # requests in the system (a rate of the latency sum) below this are none
WAKE_DRAIN_SECONDS = 60.0  # a wake's replicas serve what waits for them within this once Ready (one SLO minute)
WAKE_BUSY_IN_SYSTEM = 1.0  # a lower bound of the capacity sizes wakes only if read with this many requests in each replica

# The ScaledToZero condition's reasons
IDLE = "Idle"  # True: at zero replicas after the idle time
WOKEN = "Woken"  # False: woken from zero by demand
SERVING = "Serving"  # False: replicas serve (or wait for their idle time)
HELD = "HeldAtZero"  # True: at zero, and the wake query could not be read


def idle_bound(idle_seconds: int | None, startup_seconds: float | None) -> float:
    """Seconds of idleness before zero: the explicit bound, else ten start-ups, at least IDLE_FLOOR_SECONDS."""
    if idle_seconds is not None:
        return float(idle_seconds)
    return max(IDLE_FLOOR_SECONDS, IDLE_STARTUPS * (startup_seconds or 0.0))


def wake_size(held: float, since_wake: float, capacity_rps: float | None, startup_seconds: float | None) -> int:
    """Replicas for a wake: as many as serve, within WAKE_DRAIN_SECONDS of being Ready, the requests that will
    wait by then (``held`` now, plus the arrivals until the start-up ends at the rate they were held: ``held``
    over the time since the wake plus one period) on top of the arrivals, at ``capacity_rps`` per replica (or a
    lower bound of it). One without a capacity."""
    if not capacity_rps or held <= 0:
        return 1
    rate = held / (max(0.0, since_wake) + PERIOD_SECONDS)
    backlog = held + rate * max(0.0, (startup_seconds or 0.0) - since_wake)
    return max(1, ceil_replicas((backlog / WAKE_DRAIN_SECONDS + rate) / capacity_rps))


def _woken(held: float, size: int, state: ZeroState) -> str:
    if size == 1 or not state.capacity_rps:
        return f"the wake query read {held:g}"
    each = "each" if state.capacity_saturated else "each (what one replica served on target before)"
    return (f"the wake query read {held:g}: {size} replicas serve what waits within {WAKE_DRAIN_SECONDS:.0f} s of Ready "
            f"at {state.capacity_rps:.1f} requests/s {each}")  # fmt: skip


def _idle(ready: int, completions: float | None, waiting: float | None, in_system: float | None, wake: float | None) -> bool:
    """Nothing completed, waited or was in the system, and nothing pending at the front. A missing series is
    not idleness while a replica is Ready (a scrape gap); with none Ready (a replica loading, or one that never
    gets Ready: unplaceable, crash-looping) only the front can say that nobody waits."""
    if wake is None:
        return False
    if ready == 0:
        return wake <= 0
    if completions is None or waiting is None:
        return False
    return completions <= 0 and waiting <= 0 and (in_system or 0.0) < IN_SYSTEM_IDLE and wake <= 0


def to_zero_or_back(
    now: float, wall: str, current: int, ready: int, *, completions: float | None, waiting: float | None,
    in_system: float | None, wake: float | None, wake_error: str | None, bound: float, state: ZeroState,
    wake_series: int = 1, startup_seconds: float | None = None,
) -> ZeroOutcome:  # fmt: skip
    """One period of a service that may go to zero. ``now``: the loop's clock (seconds); ``wall``: the same moment
    in RFC 3339; ``wake``: the wake query's value (None when it could not be read, ``wake_error`` says why) and
    ``wake_series`` the series it summed; ``startup_seconds``: what a new replica takes (sizes a wake). The last
    replica goes only from one: more are stepped down by the decision's own scale-down rules first."""
    if current == 0:
        if wake is None:
            s = replace(state, idle_since=None)
            return ZeroOutcome(0, f"holding at 0 replicas: the wake query could not be read ({wake_error})", s, True,
                               HELD)  # fmt: skip
        if wake > 0:
            size = wake_size(wake, 0.0, state.capacity_rps, startup_seconds)
            by = _woken(wake, size, state)
            s = replace(state, idle_since=None, woke_at=now, last_wake={"at": wall, "by": by})
            return ZeroOutcome(size, f"woken from 0 replicas: {by}", s, False, WOKEN)
        said = "reads 0" if wake_series else "returned no series, read as 0: check its labels if demand is expected"
        return ZeroOutcome(0, f"at 0 replicas: no demand (the wake query {said})", state, True, IDLE)
    s = state
    if s.woke_at is not None and ready == 0 and wake is not None and wake > 0:  # woken, none Ready: more may be held
        size = wake_size(wake, now - s.woke_at, s.capacity_rps, startup_seconds)
        if size > current:
            return ZeroOutcome(size, f"woken, none Ready yet: {_woken(wake, size, s)}", replace(s, idle_since=None),
                               False, WOKEN)  # fmt: skip
    if s.woke_at is not None and ready >= 1:  # the first replica after a wake is Ready
        wake_info = dict(s.last_wake or {})
        wake_info["firstReadySeconds"] = round(now - s.woke_at, 1)
        s = replace(s, woke_at=None, last_wake=wake_info)
    if not _idle(ready, completions, waiting, in_system, wake):
        s = replace(s, idle_since=None)
        return ZeroOutcome(None, "", s, False, WOKEN if s.woke_at is not None else SERVING)
    started = s.idle_since if s.idle_since is not None else now
    s = replace(s, idle_since=started)
    if now - started >= bound and current == 1:
        s = replace(s, idle_since=None, since=wall, woke_at=None)
        return ZeroOutcome(0, f"scaled to 0 replicas: idle for {now - started:.0f} s (the bound is {bound:.0f} s)", s, True,
                           IDLE)  # fmt: skip
    return ZeroOutcome(None, "", s, False, SERVING)


def remembered(resource: Any) -> ZeroState:
    """What a service's status says of its last zero and wake (the autoscaler's memory across a restart or a new
    leader; the idle time itself starts again)."""
    autoscaling = getattr(getattr(resource, "status", None), "autoscaling", None)
    zero = getattr(autoscaling, "scaled_to_zero", None)
    if zero is None:
        return ZeroState()
    wake = zero.last_wake.model_dump(by_alias=True, exclude_none=True) if zero.last_wake is not None else None
    return ZeroState(since=zero.since, last_wake=wake or None)


def at_zero(outcome: ZeroOutcome, state: State) -> Decision:
    """The decision of a service with no replica: the wake query's (vLLM's series are gone with the pods)."""
    assert outcome.desired is not None
    answered = outcome.condition_reason != HELD
    return Decision(
        desired=outcome.desired, reason=outcome.reason, state=state, metrics_available=answered,
        metrics_reason=QUERIES_ANSWERED if answered else PROMETHEUS_UNREACHABLE,
        metrics_message="the wake query answered (no replica: vLLM's own series are gone)" if answered
        else f"the wake query could not be read; 0 replicas held: {outcome.reason}",
        limited=False, limited_reason=WITHIN_BOUNDS, limited_message="", zero=outcome,
    )  # fmt: skip


@dataclass(frozen=True)
class Wake:
    """One read of the wake query."""

    value: float | None  # the sum over its series; None when it could not be read
    series: int = 1  # how many series it returned
    error: str | None = None  # why it could not be read


def decide_or_zero(now: float, wall: str, signals: Signals, observed: Observed, targets: Targets, state: State,
                   zero: ZeroState, wake: Wake, idle_seconds: int | None, budget: Budget | None = None) -> Decision:  # fmt: skip
    """The decision of a service with minReplicas 0 (the loop's and the simulator's): at zero the wake query's,
    else decide.decide's with a floor of one replica, which these rules may send to zero."""
    outcome = to_zero_or_back(
        now, wall, observed.replicas, observed.ready, completions=signals.completions, waiting=signals.waiting,
        in_system=signals.in_system, wake=wake.value, wake_error=wake.error,
        bound=idle_bound(idle_seconds, observed.startup_seconds), state=zero, wake_series=wake.series,
        startup_seconds=observed.startup_seconds,
    )  # fmt: skip
    if observed.replicas == 0:  # no replica, no vLLM series: the wake query alone decides
        d = at_zero(outcome, state)
        if d.desired == 0:
            return d
        granted, limit_reason, limit_message = bounds(targets, budget, observed, d.desired)
        if granted == 0:  # the namespace's GPUs
            why = f"held at 0 replicas: {limit_message}"
            # not woken (its state unchanged): still at zero, and the next period asks again
            held = replace(outcome, desired=0, reason=why, state=zero, at_zero=True, condition_reason=IDLE)
            return replace(d, desired=0, reason=why, limited=True, limited_reason=limit_reason,
                           limited_message=limit_message, zero=held)  # fmt: skip
        d = _woken_to(d, now, d.desired, granted, limit_reason, limit_message)
        return replace(d, zero=replace(outcome, desired=granted))
    d = decide(now, signals, observed, replace(targets, min_replicas=1), state, budget=budget)
    capacity = d.values.get("capacityPerReplica")
    busy = signals.in_system is not None and signals.reporting and signals.in_system / signals.reporting >= WAKE_BUSY_IN_SYSTEM
    if capacity and (d.state.capacity_saturated or busy):  # what one replica serves (or a lower bound), for the next wake
        outcome = replace(outcome, state=replace(outcome.state, capacity_rps=capacity, capacity_saturated=d.state.capacity_saturated))
    wanted = outcome.desired
    if wanted is not None:
        if wanted > observed.replicas:  # a wake sized again while its replicas load
            granted, limit_reason, limit_message = bounds(targets, budget, observed, wanted)
            d = _woken_to(replace(d, reason=outcome.reason), now, wanted, granted, limit_reason, limit_message)
            outcome = replace(outcome, desired=granted)
        else:
            d = replace(d, desired=wanted, reason=outcome.reason)
    return replace(d, zero=outcome)


def _woken_to(d: Decision, now: float, wanted: int, granted: int, limit_reason: str, limit_message: str) -> Decision:
    """The decision of a wake to ``granted`` replicas: a recommendation of the scale-down window (the decision
    keeps what a wake started until its window passes), and a limit that bit says so."""
    s = d.state
    state = replace(s, recommendations=(*s.recommendations, (now, granted)), last_scale_time=now)
    limited = limit_reason != WITHIN_BOUNDS and granted < wanted
    return replace(d, desired=granted, state=state, limited=limited or d.limited,
                   limited_reason=limit_reason if limited else d.limited_reason,
                   limited_message=limit_message if limited else d.limited_message)  # fmt: skip
