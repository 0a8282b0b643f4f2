"""The autoscaling decision: pure, values in and values out (no clock, no client, no environment).

One call per service per period. Inputs: the service's signals as Prometheus returned them (`Signals`), what
the Deployment and its pods look like (`Observed`), the targets and bounds (`Targets`), how many replicas the
namespace's GPU budget leaves this service, and the `State` carried from the previous call. Output: the
replica count to set, why, and the next state.

The algorithm
1. **No data holds.** When Prometheus cannot be reached, or a required query (the waiting gauge, the
   completion counter) returns no series, the replicas are held where they are (fail static) and
   `MetricsAvailable` is False naming the query. A series whose value is 0 is data: an idle service.
2. **Learn the capacity of one replica** from what is observed, never from a fit: prompt tokens per second
   per ready replica. While requests wait in the schedulers the service is saturated and that rate *is* the
   capacity (smoothed). Otherwise it is a lower bound, kept as the highest seen; a lower bound is never used
   to scale up. Tokens, not requests, so that a change of request size does not fool it.
3. **Recommend, per signal,** an absolute replica count (HPA semantics: a usage ratio against a target,
   ignored inside the tolerance band):
   - `queue`: waiting requests against `queueDepthPerReplica` (the mission's signal; it moves only past
     saturation on vLLM, so it is the backstop);
   - `demand`: the arrival rate (completions plus the growth of the waiting gauge) in tokens per second
     against the learned capacity at `TARGET_UTILIZATION`;
   - `inSystem`: requests in the system (Little's law: the rate of the latency sum) against what one replica
     holds while meeting the p99 target (capacity × utilisation × target). Batches grow and latency climbs
     well before anything waits, so this moves before the waiting gauge does;
   - `p99`: observed p99 against the target, only when above it (latency is not proportional to load, so
     it never argues for fewer replicas);
   - `trend`: while no capacity is measured at saturation and the arrivals rise clearly (`ahead.forecast`),
     the reporting replicas scaled to the forecast one start-up ahead, but no more than the forecast needs
     at the rate a replica has already served on target, at `TARGET_UTILIZATION`;
   - `idle`: no completions and nothing waiting recommends `minReplicas`.
   The largest recommendation wins. Replicas still loading their model export no metrics and are not
   capacity: per-replica figures divide by the pods that report; while some load, the backlog signals
   (queue, p99, in-system) may not ask for more than are already coming unless demand does, and a backlog
   that shrinks asks for no more than demand (it is being served). **A surge lifts those caps**: while the
   arrivals rise (a trend seen for at least two minutes), the waiting requests grow past their target, p99
   is at least `SURGE_P99_FACTOR` times its target and the forecast is more than the reporting replicas
   serve, the replicas on their way were planned for a rate that has already passed them, and the backlog
   signals ask for what they measure (as an HPA on p99 would; step 5 still limits the pace).
4. **Stabilise** (the HorizontalPodAutoscaler's rule): scale up to the smallest recommendation of the
   scale-up window, down to the largest of the scale-down window.
5. **Limit the step**: at most `maxStep` replicas added (removed) within any `STEP_PERIOD_SECONDS`.
6. **Bound**: `minReplicas`, `maxReplicas`, the policy's `limits.maxReplicas`, the namespace GPU budget, and
   no growth while pods of the service cannot be placed (the scheduler's message is the reason). A bound that
   changes the outcome sets `ScalingLimited` with its name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pooling_operator.api.policy import STEP_PERIOD_SECONDS
from pooling_operator.api.policy import AutoscalingTargets as Targets
from pooling_operator.api.schema import duration_seconds
from pooling_operator.autoscaling import ahead
from pooling_operator.autoscaling.hpa import ceil_replicas, limit_step, ratio_recommendation, stabilize
from pooling_operator.autoscaling.zero_state import ZeroOutcome
from pooling_operator.status.conditions import (
    LIMIT_BUDGET,
    LIMIT_MAX,
    LIMIT_MIN,
    LIMIT_POLICY,
    LIMIT_UNSCHEDULABLE,
    NO_DATA,
    PROMETHEUS_UNREACHABLE,
    QUERIES_ANSWERED,
    WITHIN_BOUNDS,
)

PERIOD_SECONDS = 15  # how often the operator decides (the HPA sync period)
TARGET_UTILIZATION = 0.8  # share of the learned capacity a replica is planned to run at
MIN_RATE = 1e-6  # per second: below it a rate is no traffic at all
CAPACITY_SMOOTHING = 0.5  # weight of a new saturated observation
SATURATED_WAITING_PER_REPLICA = 1.0  # waiting requests per reporting pod that mean "saturated"
BACKLOG_EXTRA = 0.25  # with a measured capacity, backlog signals ask for at most this share more than demand
# A rising trend asks for replicas only when, at the forecast, each replica would hold at least this many requests
# on average (Little's law: requests in the system = arrivals x latency). Below one the engine idles between
# requests, and the rise fits in that headroom: a small model's 0.4 req/s rising to 0.7 asked for 4 replicas of a
# server that serves 200 (bench/shared_gpus, issue 24's 16-service figure).
TREND_BUSY_IN_SYSTEM = 1.0
# A surge (the docstring's step 3) needs p99 at least this many times its target: a backlog that costs a minute of
# SLO already, not one inside the tolerance. Chosen on the development seeds of bench/autoscaling/heldout.py
# (bench/README.md, "A surge lifts the backlog caps").
SURGE_P99_FACTOR = 2.0


REQUIRED = ("waiting", "completions")


@dataclass(frozen=True)
class Signals:
    """One read of the service's metrics. A field is None when its query returned no series; `p99` is None
    also when nothing completed in the window (no latency to speak of). `unreachable` is set when
    Prometheus did not answer at all."""

    waiting: float | None = None
    reporting: int | None = None
    completions: float | None = None
    in_system: float | None = None
    tokens: float | None = None
    p99: float | None = None
    unreachable: str | None = None
    queries: dict[str, str] = field(default_factory=dict, compare=False)  # name -> PromQL, for messages

    def missing(self) -> str | None:
        """The first required query without data."""
        for name in REQUIRED:
            if getattr(self, name) is None:
                return name
        if not self.reporting:
            return "reporting"
        return None


@dataclass(frozen=True)
class Observed:
    """The Deployment and its pods now."""

    replicas: int  # spec.replicas (what was last set)
    ready: int = 0
    unschedulable: str | None = None  # the scheduler's or controller's message when pods cannot be placed
    startup_seconds: float | None = None  # what a new replica takes to serve (status.startup.typicalSeconds)


@dataclass(frozen=True)
class Budget:
    """The namespace's GPU budget as it stands when this service's growth is decided.

    `limit` is the policy's `limits.maxGPUsPerNamespace`; `held` is what the namespace's autoscaled services hold
    then — this service's current replicas, the scale-downs decided this period and the growth granted before it
    included; `per_replica` is what one replica of this service holds (`vllm.memory.gpus_held`: a whole
    count today, a share once GPU sharing lands). Fixed-replica services are not in `held`: the budget bounds
    what autoscaling may add."""

    limit: float
    held: float
    per_replica: float

    def replicas(self, current: int) -> int:
        """The most replicas this service may have: its current ones plus what the room left holds."""
        room = max(0.0, self.limit - self.held)
        return current + math.floor(room / self.per_replica + 1e-9)

    def message(self, current: int, wanted: int) -> str:
        more = (wanted - current) * self.per_replica
        return (
            f"the namespace's GPU budget is used up: its autoscaled services hold {self.held:g} of the {self.limit:g} "
            f"GPUs the policy's limits.maxGPUsPerNamespace allows, and this service asked for {wanted} replicas of "
            f"{self.per_replica:g} GPU each ({more:g} more than its {current})"
        )


@dataclass(frozen=True)
class State:
    """Carried from one decision to the next (the loop keeps it per service)."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (time, raw recommendation), newest last
    scale_events: tuple[tuple[float, int], ...] = ()  # (time, change in replicas)
    capacity_tokens: float | None = None  # prompt tokens/s one replica serves
    capacity_saturated: bool = False  # True once the capacity was measured at saturation
    last_waiting: tuple[float, float] | None = None  # (time, waiting) of the previous read
    last_scale_time: float | None = None
    capacity_floor: float | None = None  # the highest unsaturated reading with latency on target: a lower bound
    started: tuple[float, int] | None = None  # (time, replicas) of the first decision
    arrivals: tuple[tuple[float, float], ...] = ()  # (time, arrival rate) of the recent reads (ahead.remember)


@dataclass(frozen=True)
class Decision:
    desired: int
    reason: str
    state: State
    metrics_available: bool
    metrics_reason: str
    metrics_message: str
    limited: bool
    limited_reason: str
    limited_message: str
    recommendations: dict[str, int] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)  # arrivalRate, capacityPerReplica, ...
    zero: ZeroOutcome | None = None  # a service with minReplicas 0: what zero.py said (status, condition)


def learn_capacity(state: State, signals: Signals, p99_target: float | None, steady: bool = False) -> State:
    """Update the per-replica capacity (prompt tokens/s) from one read. `steady`: the replica count has not
    changed within the rate window, so the fleet's rate divided by the pods reporting is what one pod served
    (right after a change it is not: the window still holds pods gone, or not yet the pods new)."""
    reporting = signals.reporting or 0
    if reporting <= 0 or not signals.tokens or signals.tokens < MIN_RATE:
        return state  # nothing to learn from (a rate this small is Prometheus's rounding, not traffic)
    observed = signals.tokens / reporting
    saturated = (signals.waiting or 0) / reporting >= SATURATED_WAITING_PER_REPLICA
    if steady and saturated and (state.capacity_floor is None or observed > state.capacity_floor):
        # What a replica served is a lower bound of what it can serve, saturated or not: a backlog stuck on
        # one replica makes the fleet look saturated while the others idle, and must not talk the capacity down.
        state = replace(state, capacity_floor=observed)
    if saturated:
        if state.capacity_saturated and state.capacity_tokens:
            value = (1 - CAPACITY_SMOOTHING) * state.capacity_tokens + CAPACITY_SMOOTHING * observed
        else:
            value = observed
        # One replica's backlog makes the whole fleet look saturated, and pods that just became ready dilute
        # the rate: never believe less than a replica has already shown it serves on target.
        return replace(state, capacity_tokens=max(value, state.capacity_floor or 0.0), capacity_saturated=True)
    latency_ok = p99_target is None or signals.p99 is None or signals.p99 <= p99_target
    if latency_ok and (state.capacity_floor is None or observed > state.capacity_floor):
        state = replace(state, capacity_floor=observed)
    if latency_ok and (state.capacity_tokens is None or observed > state.capacity_tokens):
        return replace(state, capacity_tokens=observed)
    return state


def bounds(targets: Targets, budget: Budget | None, observed: Observed, wanted: int) -> tuple[int, str, str]:
    """(bounded count, reason, message); reason WITHIN_BOUNDS when nothing bit. One order of precedence for
    every path: the configured range [minReplicas, min(maxReplicas, policy cap)] first; then growth — never
    shrinking — stops at the namespace's GPU budget and while pods cannot be placed, even below minReplicas.
    Messages name the bound and its own figures (the budget's GPUs), never a signal that moves every period
    (those are in status.autoscaling)."""
    t = targets
    ceiling, reason, message = t.max_replicas, LIMIT_MAX, f"maxReplicas is {t.max_replicas}"
    if t.policy_max_replicas is not None and t.policy_max_replicas < ceiling:
        ceiling, reason, message = t.policy_max_replicas, LIMIT_POLICY, f"the policy's limits.maxReplicas is {t.policy_max_replicas}"
    floor = min(t.min_replicas, ceiling)
    if wanted > ceiling:
        desired = ceiling
    elif wanted < floor:
        desired, reason, message = floor, LIMIT_MIN, f"minReplicas is {floor}"
    else:
        desired, reason, message = wanted, WITHIN_BOUNDS, f"within [{floor}, {ceiling}]"
    if desired > observed.replicas and observed.unschedulable:
        desired, reason, message = observed.replicas, LIMIT_UNSCHEDULABLE, f"pods cannot be placed: {observed.unschedulable}"
    elif desired > observed.replicas and budget is not None and desired > max(budget.replicas(observed.replicas), observed.replicas):
        desired, reason, message = max(budget.replicas(observed.replicas), observed.replicas), LIMIT_BUDGET, budget.message(observed.replicas, desired)
    return desired, reason, message


def decide(
    now: float,
    signals: Signals,
    observed: Observed,
    targets: Targets,
    state: State,
    budget: Budget | None = None,
) -> Decision:
    """The replica count for one service now, and why."""
    current = observed.replicas
    # ---- 1. no data: hold -----------------------------------------------------------------------------
    missing = signals.missing() if signals.unreachable is None else None
    if signals.unreachable is not None or missing is not None:
        held, _, _ = bounds(targets, budget, observed, current)
        if signals.unreachable is not None:
            why, message = PROMETHEUS_UNREACHABLE, f"Prometheus did not answer: {signals.unreachable}"
        else:
            query = signals.queries.get(missing or "", missing)
            why, message = NO_DATA, f"no series for the {missing} query {query}" if query != missing else f"no data for {missing}"
        reason = f"holding {held} replicas: {message}"
        return Decision(
            desired=held, reason=reason, state=state, metrics_available=False, metrics_reason=why,
            metrics_message=message, limited=False, limited_reason=WITHIN_BOUNDS,
            limited_message="replicas held while metrics are missing",
        )

    assert signals.waiting is not None and signals.completions is not None and signals.reporting
    reporting = signals.reporting
    steady = state.last_scale_time is None or now - state.last_scale_time >= duration_seconds(targets.window) + PERIOD_SECONDS
    state = learn_capacity(state, signals, targets.p99_seconds, steady)
    waiting = max(0.0, signals.waiting)
    growth = 0.0
    falling = state.last_waiting is not None and waiting < state.last_waiting[1]
    if state.last_waiting is not None and now > state.last_waiting[0]:
        growth = max(0.0, (waiting - state.last_waiting[1]) / (now - state.last_waiting[0]))
    arrival = signals.completions + growth  # requests/s
    state = replace(state, last_waiting=(now, waiting), arrivals=ahead.remember(state.arrivals, now, arrival))
    # A rising trend is planned for one start-up ahead: the replicas added now serve only then.
    expected = ahead.forecast(state.arrivals, now, arrival, observed.startup_seconds)
    tokens_per_request = signals.tokens / signals.completions if signals.tokens and signals.completions else None
    capacity_rps = state.capacity_tokens / tokens_per_request if state.capacity_tokens and tokens_per_request else None

    # ---- 3. recommendations -----------------------------------------------------------------------------
    tol = targets.tolerance
    recs: dict[str, int] = {}
    idle = signals.completions <= 0 and waiting <= 0
    if idle:
        recs["idle"] = targets.min_replicas
    recs["queue"] = ratio_recommendation(reporting, (waiting / reporting) / targets.queue_per_replica, tol)
    if capacity_rps:
        utilization = TARGET_UTILIZATION if state.capacity_saturated else 1.0
        demand = ratio_recommendation(reporting, (expected / reporting) / (capacity_rps * utilization), tol)
        recs["demand"] = demand if state.capacity_saturated else min(demand, reporting)
        if targets.p99_seconds and signals.in_system is not None and state.capacity_saturated:
            per_replica = capacity_rps * TARGET_UTILIZATION * targets.p99_seconds
            recs["inSystem"] = ratio_recommendation(reporting, (signals.in_system / reporting) / per_replica, tol)
    idle_ahead = signals.in_system is not None and arrival > MIN_RATE and (
        signals.in_system / reporting * expected / arrival < TREND_BUSY_IN_SYSTEM)
    if expected > arrival * (1 + tol) and arrival > MIN_RATE and not state.capacity_saturated and not idle_ahead:
        # Rising, with no capacity measured yet: the replicas serving today's arrivals serve the forecast's
        # share of them at most, so as many more are started now as the rise asks for one start-up ahead. Not
        # while the engines would still idle between requests at the forecast (idle_ahead). And no more than
        # the forecast needs at the rate a replica has already served on target, run at TARGET_UTILIZATION:
        # without that bound each noisy rise that fits a line scales the count the last one raised, and the
        # scale-down window holds it (a ratchet; bench/README.md, "A trend that ratcheted"). On replicas at
        # the busiest they have been the bound is above today's count scaled, so a rising day is unchanged.
        trend = ceil_replicas(reporting * expected / arrival)
        if capacity_rps:
            trend = min(trend, ceil_replicas(expected / (capacity_rps * TARGET_UTILIZATION)))
        recs["trend"] = trend
    if targets.p99_seconds and signals.p99 is not None and signals.p99 > targets.p99_seconds * (1 + tol):
        recs["p99"] = ceil_replicas(reporting * signals.p99 / targets.p99_seconds)
    backlog_signals = ("queue", "p99", "inSystem")
    surge = surging(now, state, signals, targets, waiting, growth, arrival, expected, capacity_rps)
    if falling and state.capacity_saturated and "demand" in recs:
        # A backlog that shrinks is being served: it asks for no more replicas than the arrivals do.
        for k in backlog_signals:
            if k in recs:
                recs[k] = min(recs[k], max(current, recs["demand"]))
    if not surge and state.capacity_saturated and "demand" in recs and observed.startup_seconds:
        # With the capacity measured, demand says what the arrivals need. A backlog beyond it sits in the
        # queues of the replicas that took it (vLLM moves no request to another server) and drains there: a new
        # replica, one start-up away, takes only new arrivals. So it asks for a margin over demand, not for as
        # many replicas as its momentary size suggests, and it does not hold replicas demand no longer needs.
        ceiling = recs["demand"] + max(1, math.ceil(BACKLOG_EXTRA * recs["demand"]))
        for k in backlog_signals:
            if k in recs:
                recs[k] = min(recs[k], ceiling)
    if not surge and current > reporting:
        # Replicas still loading will add capacity the backlog signals cannot see yet: until they report, only
        # the demand signal (a count for the whole service) may ask for more than are already coming.
        ceiling = max(current, recs.get("demand", current))
        for k in backlog_signals:
            if k in recs:
                recs[k] = min(recs[k], ceiling)
    if not idle and "demand" not in recs and "p99" not in recs:
        recs["hold"] = current  # traffic, but nothing known yet about what fewer replicas could serve
    binding = max(recs, key=lambda k: (recs[k], k != "hold"))
    raw = recs[binding]
    # Replicas still loading count towards the current size but not as capacity: a recommendation computed
    # from the reporting pods is what the service needs in all.
    horizon = now - max(targets.up_window_seconds, targets.down_window_seconds)
    history = (*((t, r) for t, r in state.recommendations if t >= horizon), (now, raw))
    # A fresh start (a restart, a failover): the replicas running then count as a recommendation for the
    # scale-down window, so a restart never skips it (HPA does the same); scale-up is not held back.
    started = state.started or (now, current)
    if started[0] >= now - targets.down_window_seconds:
        history_down = (started, *history)
    else:
        history_down = history

    # ---- 4.-6. stabilise, limit the step, bound ----------------------------------------------------------
    stable = stabilize(history, now, current, targets.up_window_seconds, targets.down_window_seconds)
    if stable < current:
        stable = min(current, stabilize(history_down, now, current, targets.up_window_seconds, targets.down_window_seconds))
    down_step = targets.down_max_step
    if not targets.down_window_set:
        # The default window: a clear fall, sustained for one start-up, is followed then (ahead.quick_down).
        quick = ahead.quick_down(history, now, current, observed.startup_seconds, targets.down_floor_seconds, state.arrivals)
        if quick is not None and quick < stable:
            stable = quick
            if not targets.down_step_set:
                down_step = current - quick
    up_step = targets.up_max_step
    if not targets.up_step_set:
        # The default step, as the HPA's: four replicas or as many as there are (doubling), whichever is more,
        # per 15 s; four at a time would let a backlog grow for periods on replicas that keep it (vLLM moves none).
        up_step = max(up_step, current)
    stepped = limit_step(state.scale_events, now, current, stable, up_step, down_step)
    desired, limit_reason, limit_message = bounds(targets, budget, observed, stepped)
    limited = limit_reason != WITHIN_BOUNDS and desired != stepped

    events = tuple((t, d) for t, d in state.scale_events if t > now - STEP_PERIOD_SECONDS)
    last_scale = state.last_scale_time
    if desired != current:
        events += ((now, desired - current),)
        last_scale = now
    state = replace(state, recommendations=history, scale_events=events, last_scale_time=last_scale, started=started)

    values = {"queueDepth": waiting / reporting, "arrivalRate": arrival}
    if expected > arrival:
        values["expectedArrivalRate"] = expected
    if signals.in_system is not None:
        values["requestsInSystem"] = signals.in_system
    if capacity_rps:
        values["capacityPerReplica"] = capacity_rps
    if signals.p99 is not None:
        values["p99LatencySeconds"] = signals.p99
    reason = _explain(binding, recs, raw, desired, current, stable, stepped, limited, limit_message, values, surge)
    return Decision(
        desired=desired, reason=reason, state=state, metrics_available=True, metrics_reason=QUERIES_ANSWERED,
        metrics_message="every query returned data", limited=limited,
        limited_reason=limit_reason if limited else WITHIN_BOUNDS,
        limited_message=limit_message if limited else "the desired count is within the bounds",
        recommendations=dict(recs), values=values,
    )


def surging(now: float, state: State, signals: Signals, targets: Targets, waiting: float, growth: float,
            arrival: float, expected: float, capacity_rps: float | None) -> bool:
    """Whether the backlog grows on a rise the replicas planned do not cover (the docstring's step 3): the
    arrivals rise (the forecast is above them by more than the tolerance, on samples reaching back at least
    `ahead.MIN_TREND_SECONDS`: a rise seen for less is noise as often as not), the waiting requests grew since
    the last read and are past `queueDepthPerReplica` per reporting pod, p99 is at least `SURGE_P99_FACTOR`
    times its target, and the forecast is more than the reporting replicas serve at the capacity measured
    (any forecast, while none is). `state` is this read's (its arrivals include `arrival`)."""
    reporting = signals.reporting or 0
    target = targets.p99_seconds
    if reporting <= 0 or not target or signals.p99 is None or signals.p99 < SURGE_P99_FACTOR * target:
        return False
    if growth <= 0 or waiting / reporting <= targets.queue_per_replica:
        return False
    seen = bool(state.arrivals) and state.arrivals[0][0] <= now - ahead.MIN_TREND_SECONDS
    rising = arrival > MIN_RATE and expected > arrival * (1 + targets.tolerance)
    return seen and rising and (not capacity_rps or expected > capacity_rps * reporting)


def _explain(binding: str, recs: dict[str, int], raw: int, desired: int, current: int, stable: int, stepped: int,
             limited: bool, limit_message: str, values: dict[str, float], surge: bool = False) -> str:
    what = {
        "idle": "no traffic",
        "queue": f"{values['queueDepth']:.1f} waiting per replica",
        "demand": f"arrivals {values['arrivalRate']:.1f}/s against {values.get('capacityPerReplica', 0):.1f}/s per replica",
        "inSystem": f"{values.get('requestsInSystem', 0):.1f} requests in the system",
        "p99": f"p99 {values.get('p99LatencySeconds', 0):.3f}s above target",
        "hold": "traffic while the capacity per replica is not known yet",
        "trend": f"arrivals {values['arrivalRate']:.1f}/s rising towards {values.get('expectedArrivalRate', 0):.1f}/s one start-up ahead",
    }[binding]
    others = ", ".join(f"{k} {v}" for k, v in sorted(recs.items()) if k != binding)
    text = f"{binding} recommends {raw} ({what})" + (f"; also {others}" if others else "")
    if surge:
        text += f"; a surge (arrivals rising, the backlog growing, p99 past {SURGE_P99_FACTOR:g}x its target): the backlog signals are not capped"
    if stable != raw:
        text += f"; stabilised to {stable}"
    if stepped != stable:
        text += f"; step-limited to {stepped}"
    if limited:
        text += f"; {limit_message}"
    if desired == current:
        return f"keeping {current} replicas: {text}"
    return f"scaling {current} -> {desired}: {text}"


def signals_from(values: dict[str, float | None], queries: dict[str, str]) -> Signals:
    """The decision's inputs from the queries' answers (by the names of `vllm.metrics.Queries.named`), as the
    operator's Prometheus reader and the simulator's emulated Prometheus both build them: no series or NaN is
    None; a p99 that is not finite is None."""

    def number(name: str) -> float | None:
        value = values.get(name)
        return None if value is None or math.isnan(value) else value

    reporting = number("reporting")
    p99 = values.get("p99")
    return Signals(
        waiting=number("waiting"),
        reporting=int(reporting) if reporting is not None else None,
        completions=number("completions"),
        in_system=number("inSystem"),
        tokens=number("tokens"),
        p99=p99 if p99 is not None and math.isfinite(p99) else None,
        queries=queries,
    )
