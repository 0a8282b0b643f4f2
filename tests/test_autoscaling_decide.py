"""The autoscaling decision, rule by rule (pure: no clock, no client)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooling_operator.api.policy import AutoscalingPolicySpec, resolve_targets
from pooling_operator.api.services import AutoscalingSpec
from pooling_operator.autoscaling.decide import (
    Budget,
    Observed,
    Signals,
    State,
    Targets,
    decide,
)
from pooling_operator.autoscaling.hpa import limit_step, stabilize
from pooling_operator.status import conditions as C

T = Targets(min_replicas=1, max_replicas=8, queue_per_replica=16, p99_seconds=0.25, up_window_seconds=0, down_window_seconds=300)


def sig(rps: float = 100.0, waiting: float = 0.0, reporting: int = 1, mean_latency: float = 0.03, p99: float | None = 0.05,
        tokens_per_request: float = 16.0) -> Signals:
    """Signals as Prometheus returns them for a service at a steady load."""
    return Signals(
        waiting=waiting, reporting=reporting, completions=rps, in_system=rps * mean_latency,
        tokens=rps * tokens_per_request, p99=p99 if rps > 0 else None,
    )


def run(signals: list[Signals], targets: Targets = T, replicas: int = 1, period: float = 15, state: State | None = None,
        budget: Budget | None = None) -> tuple[list[int], State, list]:
    """Feed reads one period apart; the Deployment follows every decision (all replicas report)."""
    state = state or State()
    out, decisions = [], []
    for i, s in enumerate(signals):
        d = decide(i * period, replace(s, reporting=s.reporting if s.reporting is not None else replicas), Observed(replicas=replicas, ready=replicas), targets, state, budget)
        state, replicas = d.state, d.desired
        out.append(replicas)
        decisions.append(d)
    return out, state, decisions


# ---- no data holds, zero is idle -----------------------------------------------------------------------------

@pytest.mark.parametrize("missing", ["waiting", "completions", "reporting"])
def test_a_query_without_series_holds_replicas_and_names_the_query(missing: str) -> None:
    s = replace(sig(), **{missing: None}, queries={missing: f"sum(x_{missing})"})
    d = decide(0, s, Observed(replicas=3, ready=3), T, State())
    assert d.desired == 3 and not d.metrics_available and d.metrics_reason == C.NO_DATA
    assert f"sum(x_{missing})" in d.metrics_message and "holding 3" in d.reason


def test_prometheus_unreachable_holds_replicas() -> None:
    d = decide(0, Signals(unreachable="ClientConnectorError"), Observed(replicas=5, ready=5), T, State())
    assert (d.desired, d.metrics_available, d.metrics_reason) == (5, False, C.PROMETHEUS_UNREACHABLE)


def test_held_replicas_still_respect_changed_bounds() -> None:
    d = decide(0, Signals(unreachable="timeout"), Observed(replicas=12, ready=12), T, State())
    assert d.desired == 8  # maxReplicas is configuration, not a metric


def test_zero_traffic_is_idle_and_recommends_min_replicas() -> None:
    replicas, _, decisions = run([sig(rps=0)] * 30, replicas=4)
    assert decisions[0].metrics_available and decisions[0].recommendations["idle"] == 1
    assert replicas[-1] == 1  # after the scale-down window, one step at a time


# ---- the signals -------------------------------------------------------------------------------------------

def test_queue_signal_is_an_average_value_against_the_target() -> None:
    d = decide(0, sig(waiting=64, reporting=2), Observed(replicas=2, ready=2), T, State())
    assert d.recommendations["queue"] == 4 and d.desired == 4


def test_tolerance_band_keeps_the_count() -> None:
    d = decide(0, sig(waiting=17 * 4, reporting=4), Observed(replicas=4, ready=4), T, State())
    assert d.recommendations["queue"] == 4  # 17/16 is inside the 10 % band


def test_p99_above_target_scales_up_and_never_argues_for_fewer() -> None:
    up = decide(0, sig(p99=0.5, reporting=2), Observed(replicas=2, ready=2), T, State())
    assert up.recommendations["p99"] == 2 * 2 and up.desired == 4
    fine = decide(0, sig(p99=0.1, reporting=2), Observed(replicas=2, ready=2), T, State())
    assert "p99" not in fine.recommendations


def test_capacity_is_learned_at_saturation_then_demand_scales_before_the_queue_moves() -> None:
    # Saturated: 1 replica serves 190 req/s of 16 tokens while requests wait.
    _, state, _ = run([sig(rps=190, waiting=40, mean_latency=0.6, p99=1.0)], replicas=1)
    assert state.capacity_saturated and state.capacity_tokens == pytest.approx(190 * 16)
    # Later, 2 replicas at 180 req/s in all: nothing waits and p99 is fine, yet demand wants 2 at 80 %.
    d = decide(100, sig(rps=180, reporting=2, waiting=0, p99=0.1), Observed(replicas=2, ready=2), T, state)
    assert d.recommendations["demand"] == 2 and d.recommendations["queue"] == 0 and d.desired == 2
    # A rise to 400 req/s (still nothing waiting): 200 per replica proves the capacity is at least that, and
    # demand asks for ceil(400 / (200 * 0.8)) = 3.
    d = decide(100, sig(rps=400, reporting=2, waiting=0, p99=0.2), Observed(replicas=2, ready=2), T, state)
    assert d.recommendations["demand"] == 3 and d.desired == 3 and d.reason.startswith("scaling 2 -> 3: demand")
    assert d.values["capacityPerReplica"] == pytest.approx(200)


def test_capacity_is_in_tokens_so_longer_requests_mean_fewer_requests_per_replica() -> None:
    _, state, _ = run([sig(rps=190, waiting=40, p99=1.0)], replicas=1)
    d = decide(100, sig(rps=30, reporting=2, tokens_per_request=200, p99=0.1), Observed(replicas=2, ready=2), T, state)
    assert d.values["capacityPerReplica"] == pytest.approx(190 * 16 / 200)
    assert d.recommendations["demand"] == 3  # 30 / (15.2 * 0.8)


def test_in_system_signal_uses_littles_law_against_what_a_replica_holds_at_target() -> None:
    _, state, _ = run([sig(rps=190, waiting=40, mean_latency=0.6, p99=1.0)], replicas=1)
    # 1 replica holds 190 * 0.8 * 0.25 = 38 requests at target; 90 in the system want 3 replicas (a fresh
    # read: no earlier waiting gauge to compare with).
    state = replace(state, last_waiting=None)
    d = decide(100, sig(rps=150, mean_latency=0.6, p99=None), Observed(replicas=1, ready=1), T, state)
    assert d.recommendations["inSystem"] == 3 and d.desired == 3


def test_unsaturated_capacity_is_a_lower_bound_that_never_scales_up() -> None:
    replicas, state, decisions = run([sig(rps=100, p99=0.1, reporting=2)] * 3, replicas=2, targets=replace(T, down_window_seconds=0))
    assert not state.capacity_saturated and state.capacity_tokens == pytest.approx(100 * 16 / 2)
    assert decisions[0].recommendations["demand"] == 2 and replicas[0] == 2


def test_traffic_before_any_capacity_is_known_holds() -> None:
    d = decide(0, Signals(waiting=0, reporting=2, completions=50, in_system=1, tokens=None, p99=0.05), Observed(replicas=2, ready=2),
               replace(T, down_window_seconds=0), State())
    assert d.recommendations["hold"] == 2 and d.desired == 2


def test_loading_replicas_are_not_capacity() -> None:
    # 4 replicas exist, 2 report (2 still load the model): capacity per replica is computed over the 2.
    d = decide(0, sig(rps=300, reporting=2, waiting=40, p99=1.0), Observed(replicas=4, ready=2), T, State())
    assert d.state.capacity_tokens == pytest.approx(300 * 16 / 2)
    # p99 over the 2 that serve says 8, but 2 more are on their way: until they report, the backlog signals ask
    # for no more than demand does (demand = 300 / (150 * 0.8) = 3, so the 4 coming are enough).
    assert d.recommendations["demand"] == 3 and d.recommendations["p99"] == 4 and d.desired == 4
    # Once all 4 report and p99 is still high, it scales on.
    d = decide(15, sig(rps=600, reporting=4, waiting=80, p99=1.0), Observed(replicas=4, ready=4), T, d.state)
    assert d.desired == 8


def test_a_shrinking_backlog_asks_for_no_more_than_demand() -> None:
    _, state, _ = run([sig(rps=190, waiting=400, p99=3.0)], replicas=1)
    d = decide(15, sig(rps=190, waiting=100, reporting=2, p99=3.0), Observed(replicas=2, ready=2), T, state)
    assert d.recommendations["p99"] == 2 and d.recommendations["demand"] == 2 and d.desired == 2


# ---- HPA semantics: stabilisation, steps, bounds ------------------------------------------------------------

def test_stabilize_up_to_window_minimum_down_to_window_maximum() -> None:
    history = [(0, 5), (10, 3), (20, 4)]
    assert stabilize(history, 20, current=2, up_window=30, down_window=30) == 3
    assert stabilize(history, 20, current=6, up_window=30, down_window=30) == 5
    assert stabilize(history, 20, current=4, up_window=30, down_window=30) == 4


def test_limit_step_counts_changes_within_the_period() -> None:
    assert limit_step([(0, 3)], 10, current=4, wanted=10, up_step=4, down_step=1) == 5
    assert limit_step([(0, 3)], 16, current=4, wanted=10, up_step=4, down_step=1) == 8
    assert limit_step([], 0, current=4, wanted=1, up_step=4, down_step=2) == 2


def test_scale_down_waits_for_the_stabilisation_window() -> None:
    load = [sig(waiting=8 * 16, reporting=None)] + [sig(rps=0)] * 40
    replicas, _, _ = run(load, replicas=1)
    assert replicas[0] == 5  # up at once, capped by the 4-per-period step
    first_down = next(i for i, r in enumerate(replicas) if r < replicas[0])
    assert first_down * 15 >= 300


@pytest.mark.parametrize(("bounds", "want", "reason", "expect"), [
    ({"max_replicas": 3}, 100, C.LIMIT_MAX, 3),
    ({"policy_max_replicas": 2}, 100, C.LIMIT_POLICY, 2),
    ({"min_replicas": 4}, 0, C.LIMIT_MIN, 4),
])
def test_bounds_set_scaling_limited_with_their_name(bounds: dict, want: int, reason: str, expect: int) -> None:
    targets = replace(T, up_max_step=1000, down_window_seconds=0, down_max_step=1000, **bounds)
    s = sig(waiting=want * 16, rps=100, reporting=3)  # no capacity known yet: without a queue, hold 3
    d = decide(0, s, Observed(replicas=3, ready=3), targets, State())
    assert (d.desired, d.limited, d.limited_reason) == (expect, True, reason)


def test_namespace_gpu_budget_caps_growth() -> None:
    budget = Budget(limit=3, held=2, per_replica=1)  # this service's 2 replicas are all the namespace holds
    d = decide(0, sig(waiting=10 * 16, reporting=2), Observed(replicas=2, ready=2), replace(T, up_max_step=100), State(), budget=budget)
    assert (d.desired, d.limited_reason) == (3, C.LIMIT_BUDGET) and "GPU budget" in d.limited_message
    assert "hold 2 of the 3 GPUs" in d.limited_message


def test_unplaceable_pods_stop_growth_and_name_the_scheduler() -> None:
    msg = "0/5 nodes are available: 4 Insufficient nvidia.com/gpu"
    d = decide(0, sig(waiting=10 * 16, reporting=3), Observed(replicas=3, ready=3, unschedulable=msg), T, State())
    assert (d.desired, d.limited, d.limited_reason) == (3, True, C.LIMIT_UNSCHEDULABLE) and msg in d.limited_message


def test_policy_defaults_and_caps_resolve_into_targets() -> None:
    policy = AutoscalingPolicySpec.model_validate({
        "defaults": {"queueDepthPerReplica": 5, "p99Latency": "500ms", "scaleDown": {"stabilizationSeconds": 60}},
        "limits": {"maxReplicas": 6, "maxGPUsPerNamespace": 16, "minScaleDownStabilizationSeconds": 120},
    })
    t = resolve_targets(AutoscalingSpec.model_validate({"maxReplicas": 10, "p99Latency": "250ms"}), policy)
    assert (t.queue_per_replica, t.p99_seconds, t.down_window_seconds, t.effective_max, t.max_gpus_per_namespace) == (5, 0.25, 120, 6, 16)
    assert resolve_targets(AutoscalingSpec.model_validate({"maxReplicas": 2}), None).p99_seconds is None


# ---- flapping and properties -------------------------------------------------------------------------------

def test_noisy_signals_around_a_steady_load_do_not_flap() -> None:
    rng = random.Random(7)
    _, state, _ = run([sig(rps=190, waiting=40, p99=1.0)], replicas=1)
    reads = [sig(rps=300 * rng.uniform(0.85, 1.15), reporting=None, p99=0.1 * rng.uniform(0.5, 1.5),
                 waiting=rng.choice([0, 0, 0, 3])) for _ in range(200)]
    replicas, _, _ = run(reads, replicas=2, state=state)
    changes = sum(1 for a, b in itertools.pairwise(replicas) if a != b)
    assert changes <= 2, replicas  # settles, then stays


@settings(max_examples=300)
@given(
    reads=st.lists(st.tuples(st.floats(0, 5000), st.floats(0, 2000), st.one_of(st.none(), st.floats(0, 30)), st.integers(0, 12)),
                   min_size=1, max_size=25),
    lo=st.integers(1, 5), span=st.integers(0, 10), extra_cap=st.one_of(st.none(), st.integers(0, 12)),
    budget=st.one_of(st.none(), st.integers(0, 12)), start=st.integers(0, 20),
)
@pytest.mark.thorough
def test_never_leaves_bounds_nor_exceeds_a_cap(reads, lo, span, extra_cap, budget, start) -> None:
    """Whatever the signals: never above min(maxReplicas, policy cap); never grown past the GPU budget, which
    stops growth even below minReplicas (a platform limit beats a service's wish); otherwise at least
    minReplicas (a cap below minReplicas is refused by validation, so caps here are at least minReplicas)."""
    cap = None if extra_cap is None else lo + extra_cap
    targets = replace(T, min_replicas=lo, max_replicas=lo + span, policy_max_replicas=cap)
    state, replicas = State(), start
    for i, (rps, waiting, p99, reporting) in enumerate(reads):
        s = Signals(waiting=waiting, reporting=reporting or None, completions=rps, in_system=rps * 0.1, tokens=rps * 16, p99=p99)
        gpus = None if budget is None else Budget(limit=budget, held=replicas, per_replica=1)  # alone in its namespace
        d = decide(i * 15.0, s, Observed(replicas=replicas, ready=min(replicas, reporting)), targets, state, gpus)
        assert d.desired <= targets.effective_max
        if budget is not None and d.desired > replicas:
            assert d.desired <= budget
        grow_limit = max(budget, replicas) if budget is not None else targets.effective_max
        assert d.desired >= min(targets.min_replicas, grow_limit)
        state, replicas = d.state, d.desired


def test_a_restart_does_not_skip_the_scale_down_window() -> None:
    """A fresh State (the operator restarted, or another replica took the Lease) holds 4 idle replicas for the
    whole window, as if they had just been recommended; scale-up is not held back by it."""
    replicas, _, _ = run([sig(rps=0)] * 30, replicas=4)
    first_down = next(i for i, r in enumerate(replicas) if r < 4)
    assert first_down * 15 >= 300
    up = decide(0, sig(waiting=8 * 16, reporting=2), Observed(replicas=2, ready=2), T, State())
    assert up.desired == 6


# ---- a surge lifts the backlog caps -----------------------------------------------------------------------------

def _rising(now: float, rps: float, waiting: float, p99: float, replicas: int, reporting: int, *, since: float = 0.0,
            state: State | None = None) -> tuple[State, object]:
    """Arrivals rising steadily from `since` (a read every 15 s: 40 % more over the span), then one read at `now`
    with `replicas` set and `reporting` of them reporting."""
    state = state or State()
    t = since
    while t < now:
        share = 0.6 + 0.4 * (t - since) / max(1.0, now - since)
        d = decide(t, sig(rps=rps * share, reporting=reporting, waiting=0, p99=0.05), Observed(replicas=reporting, ready=reporting, startup_seconds=60),
                   replace(T, max_replicas=64), state)
        state = d.state
        t += 15
    d = decide(now, sig(rps=rps, reporting=reporting, waiting=waiting, p99=p99), Observed(replicas=replicas, ready=reporting, startup_seconds=60),
               replace(T, max_replicas=64), state)
    return d.state, d


def test_a_surge_lets_the_backlog_signals_past_the_replicas_still_loading() -> None:
    # 2 report, 2 more load; the arrivals rose for three minutes and the queue grows, p99 at 8x the target: the
    # replicas coming were planned for a rate already passed, so p99 asks for what it measures (2 x 8 = 16),
    # limited only by the step (doubling from 4 to 8).
    _, d = _rising(180, rps=600, waiting=400, p99=2.0, replicas=4, reporting=2)
    assert d.recommendations["p99"] == 16 and d.desired == 8
    assert "a surge" in d.reason


@pytest.mark.parametrize(("case", "kwargs"), [
    ("a rise seen for less than two minutes is not a trend yet", {"since": 90}),
    ("p99 under twice its target is a backlog the tolerance may hold", {"p99": 0.45}),
    ("a queue under its target per pod", {"waiting": 20}),
])
def test_without_a_surge_the_replicas_loading_cap_the_backlog_signals(case: str, kwargs: dict) -> None:
    args = {"rps": 600.0, "waiting": 400.0, "p99": 2.0, "since": 0.0} | kwargs
    _, d = _rising(180, args["rps"], args["waiting"], args["p99"], replicas=4, reporting=2, since=args["since"])
    assert d.recommendations.get("p99", 4) <= 4 and d.desired == 4, case
    assert "a surge" not in d.reason
