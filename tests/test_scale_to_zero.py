"""Scale to zero and back (autoscaling/zero.py, pure): zero only after the idle time, never while anything is
pending, one replica on the first demand, held when the wake query cannot be read; what status says. And the
API around it: minReplicas 0 needs a wake signal (validate and CEL say the same), and a KEDA ScaledObject gets the
wake query as the trigger that activates it from zero."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.api import messages as M
from pooling_operator.autoscaling.decide import Budget, Observed, Signals, State
from pooling_operator.autoscaling.scale import autoscaling_status, decision_conditions
from pooling_operator.autoscaling.targets import resolve_targets
from pooling_operator.autoscaling.zero import (
    HELD,
    IDLE,
    SERVING,
    WOKEN,
    Wake,
    ZeroState,
    at_zero,
    decide_or_zero,
    idle_bound,
    remembered,
    to_zero_or_back,
    wake_size,
)
from pooling_operator.builders import BuildContext, plan
from pooling_operator.status import conditions as C
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from tests.factories import pooling

WAKE = {"prometheus": {"query": 'sum(interceptor_pending_requests{host="minilm.search.example.com"})'}}
IDLE_READ = {"completions": 0.0, "waiting": 0.0, "in_system": 0.0, "wake": 0.0}
BUSY_READ = {"completions": 2.5, "waiting": 0.0, "in_system": 0.4, "wake": 0.0}


def step(now: float, current: int, ready: int, state: ZeroState, bound: float = 300, wake_error: str | None = None,
         **read: Any) -> Any:  # fmt: skip
    values = {**IDLE_READ, **read}
    return to_zero_or_back(now, f"t{now:g}", current, ready, wake_error=wake_error, bound=bound, state=state, **values)


@pytest.mark.parametrize(
    ("idle_seconds", "startup", "bound"),
    [(None, None, 300.0), (None, 20.0, 300.0), (None, 45.0, 450.0), (600, 45.0, 600.0), (30, 900.0, 30.0)],
)
def test_the_idle_time_is_ten_start_ups_at_least_five_minutes_unless_set(idle_seconds: int | None, startup: float | None,
                                                                          bound: float) -> None:  # fmt: skip
    assert idle_bound(idle_seconds, startup) == bound


def test_a_service_goes_to_zero_only_after_the_whole_idle_time() -> None:
    state = ZeroState()
    for now in (0, 15, 150, 285):
        out = step(now, 1, 1, state)
        assert out.desired is None and not out.at_zero and out.condition_reason == SERVING, now
        state = out.state
    out = step(300, 1, 1, state)
    assert (out.desired, out.at_zero, out.condition_reason) == (0, True, IDLE)
    assert out.reason == "scaled to 0 replicas: idle for 300 s (the bound is 300 s)"
    assert out.status == {"since": "t300"}


@pytest.mark.parametrize(
    "busy",
    [
        {"completions": 0.2},  # a request finished in the window
        {"waiting": 1.0},  # one waits in vLLM
        {"in_system": 0.5},  # one is being served
        {"wake": 3.0},  # requests pending at the front: never zero while anything is pending
        {"completions": None},  # no series: a loading replica, or a scrape gap, is not idleness
        {"wake": None},  # the wake query could not be read
    ],
)
def test_anything_pending_or_unknown_starts_the_idle_time_again(busy: dict[str, Any]) -> None:
    state = step(0, 1, 1, ZeroState()).state
    assert state.idle_since == 0
    out = step(290, 1, 1, state, **busy)
    assert out.desired is None and out.state.idle_since is None
    out = step(300, 1, 1, out.state)
    assert out.desired is None, "the idle time starts over after the request"
    assert step(590, 1, 1, out.state).desired is None and step(600, 1, 1, out.state).desired == 0


def test_at_zero_the_first_demand_wakes_one_replica_and_status_says_how_long_it_took() -> None:
    gone = step(300, 1, 1, step(0, 1, 1, ZeroState()).state).state
    quiet = step(315, 0, 0, gone)
    assert (quiet.desired, quiet.at_zero, quiet.condition_reason) == (0, True, IDLE)
    woken = step(330, 0, 0, quiet.state, wake=2.0)
    assert (woken.desired, woken.at_zero, woken.condition_reason) == (1, False, WOKEN)
    assert woken.reason == "woken from 0 replicas: the wake query read 2"
    assert woken.status == {"since": "t300", "lastWake": {"at": "t330", "by": "the wake query read 2"}}
    loading = step(345, 1, 0, woken.state, completions=None, waiting=None, wake=2.0)
    assert loading.desired is None and loading.condition_reason == WOKEN  # the decision (holding, no data) stands
    ready = step(405, 1, 1, loading.state, **BUSY_READ)
    assert ready.status["lastWake"] == {"at": "t330", "by": "the wake query read 2", "firstReadySeconds": 75.0}
    assert ready.condition_reason == SERVING and ready.desired is None


def test_the_last_replica_goes_only_from_one_the_decision_steps_down_to_it_first() -> None:
    state = step(0, 3, 3, ZeroState()).state
    assert step(300, 3, 3, state).desired is None
    assert step(315, 1, 1, step(300, 3, 3, state).state).desired == 0


def test_a_woken_replica_that_never_gets_ready_goes_once_the_front_holds_nothing() -> None:
    woken = step(0, 0, 0, ZeroState(), wake=2.0).state
    waiting = step(15, 1, 0, woken, completions=None, waiting=None, wake=2.0)
    assert waiting.desired is None and waiting.state.idle_since is None  # requests are held: it keeps trying
    gave_up = step(60, 1, 0, waiting.state, completions=None, waiting=None, wake=0.0)  # the front gave up on them
    assert gave_up.desired is None and gave_up.state.idle_since == 60
    assert step(360, 1, 0, gave_up.state, completions=None, waiting=None, wake=0.0).desired == 0


def test_a_wake_query_that_returns_no_series_says_so() -> None:
    out = to_zero_or_back(0, "t0", 0, 0, completions=None, waiting=None, in_system=None, wake=0.0, wake_error=None,
                          bound=300, state=ZeroState(), wake_series=0)  # fmt: skip
    assert out.desired == 0 and "returned no series" in out.reason


def test_after_a_restart_status_is_remembered() -> None:
    doc = pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "wake": WAKE}})
    doc["status"] = {"autoscaling": {"scaledToZero": {"since": "2026-12-04T01:00:00Z", "lastWake": {
        "at": "2026-12-04T07:00:00Z", "by": "the wake query read 1", "firstReadySeconds": 71.0}}}}
    result = validate(doc)
    assert result.resource is not None
    state = remembered(result.resource)
    assert state.since == "2026-12-04T01:00:00Z"
    assert state.last_wake == {"at": "2026-12-04T07:00:00Z", "by": "the wake query read 1", "firstReadySeconds": 71.0}
    assert remembered(validate(pooling()).resource) == ZeroState()


def test_a_wake_the_namespace_gpu_budget_cannot_hold_waits_at_zero_and_says_why() -> None:
    gone = step(300, 1, 1, step(0, 1, 1, ZeroState()).state).state
    targets = resolve_targets(validate(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "wake": WAKE}})).resource, None)  # type: ignore[arg-type]
    d = decide_or_zero(330, "t330", Signals(), Observed(replicas=0), targets, State(), gone, Wake(2.0), None,
                       Budget(limit=4, held=4, per_replica=1))  # fmt: skip
    assert d.desired == 0 and d.limited and d.limited_reason == C.LIMIT_BUDGET
    assert d.zero is not None and d.zero.state == gone, "not woken: nothing of a wake is remembered"
    assert (d.zero.at_zero, d.zero.condition_reason) == (True, IDLE) and d.zero.status == {"since": "t300"}
    assert "GPU budget" in d.reason
    roomy = decide_or_zero(330, "t330", Signals(), Observed(replicas=0), targets, State(), gone, Wake(2.0), None,
                           Budget(limit=4, held=3, per_replica=1))  # fmt: skip
    assert roomy.desired == 1 and not roomy.limited


def test_at_zero_an_unreadable_wake_query_holds_at_zero() -> None:
    out = step(0, 0, 0, ZeroState(), wake=None, wake_error="no connection to http://prometheus:9090 within 5s")
    assert (out.desired, out.at_zero, out.condition_reason) == (0, True, HELD)
    d = at_zero(out, State())
    assert not d.metrics_available and d.metrics_reason == C.PROMETHEUS_UNREACHABLE
    assert "no connection to http://prometheus:9090" in d.metrics_message


def test_status_and_the_condition_say_it() -> None:
    gone = step(300, 1, 1, step(0, 1, 1, ZeroState()).state)
    d = at_zero(step(315, 0, 0, gone.state), State())
    assert autoscaling_status(d, 0, 0, "2026-12-04T10:00:00Z")["scaledToZero"] == {"since": "t300"}
    [*_, zero] = decision_conditions(d, 3)
    assert (zero["type"], zero["status"], zero["reason"]) == ("ScaledToZero", "True", IDLE)
    assert zero["message"] == "at 0 replicas: no demand (the wake query reads 0)"


# ---- the API ------------------------------------------------------------------------------------------------


def errors(doc: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate(doc).problems if p.severity == "error"]


def test_min_replicas_zero_needs_a_wake_signal_and_scale_to_zero_needs_min_zero() -> None:
    assert f"spec.autoscaling.minReplicas: {M.MIN_REPLICAS_ZERO}" in errors(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2}}))
    assert errors(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "wake": WAKE}})) == []
    assert errors(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "wake": WAKE, "scaleToZero": {"idleSeconds": 900}}})) == []
    assert f"spec.autoscaling.scaleToZero: {M.SCALE_TO_ZERO_NEEDS_MIN_ZERO}" in errors(
        pooling({"autoscaling": {"minReplicas": 1, "maxReplicas": 2, "scaleToZero": {"idleSeconds": 900}}}))
    assert any(e.startswith("spec.autoscaling.scaleToZero.idleSeconds: Input should be greater than or equal to 30")
               for e in errors(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "wake": WAKE,
                                                        "scaleToZero": {"idleSeconds": 5}}})))  # fmt: skip
    assert any(e.startswith("spec.autoscaling.wake.prometheus.query")
               for e in errors(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "wake": {"prometheus": {"query": ""}}}})))


@pytest.mark.parametrize("backend", ["operator", "keda"])
def test_min_replicas_zero_without_a_wake_signal_is_refused_for_either_backend(backend: str) -> None:
    """Issue 65: with KEDA too, for the ScaledObject is the operator's (a trigger added by hand is not kept) and its
    waiting and p99 triggers read vLLM's series, which vanish with the last pod: at zero it would never wake."""
    found = errors(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "backend": backend}}))
    assert found == [f"spec.autoscaling.minReplicas: {M.MIN_REPLICAS_ZERO}"]
    assert "never wake" in M.MIN_REPLICAS_ZERO and "wake.prometheus.query" in M.MIN_REPLICAS_ZERO
    assert "front.kedaHttpAddOn" in M.MIN_REPLICAS_ZERO and "external trigger" not in M.MIN_REPLICAS_ZERO
    for way_out in ({"wake": WAKE}, {"front": {"kedaHttpAddOn": {"hosts": ["minilm.example.com"]}}}, {"minReplicas": 1}):
        assert errors(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "backend": backend, **way_out}})) == []


def test_a_keda_service_at_zero_admitted_before_the_rule_is_told_it_can_never_wake() -> None:
    """An object of that shape already on a cluster (admitted by v0.2.0's CRD) is refused by the reconcile's parse:
    SpecValid False naming the field and saying it could never wake, not a silent zero."""
    from tests.test_reconcile import assert_refused, cond, refused

    status, kube = refused(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "backend": "keda"}}))
    assert_refused(status, kube, C.INVALID_SPEC, "spec.autoscaling.minReplicas")
    assert "could never wake" in cond(status, C.SPEC_VALID)["message"]


def scaled_object(autoscaling: dict[str, Any]) -> dict[str, Any]:
    result = validate(pooling({"autoscaling": {"maxReplicas": 4, "backend": "keda", **autoscaling}}, name="minilm", namespace="search"))
    assert result.ok, [str(p) for p in result.errors]
    return next(o for o in plan(result.resource, contract("0.33"), BuildContext()).objects if o["kind"] == "ScaledObject")


def test_keda_wakes_the_service_on_the_wake_query_and_idles_for_the_bound() -> None:
    so = scaled_object({"minReplicas": 0, "wake": WAKE, "scaleToZero": {"idleSeconds": 900}})["spec"]
    assert so["minReplicaCount"] == 0 and so["cooldownPeriod"] == 900
    [wake] = [t for t in so["triggers"] if t["name"] == "wake"]
    assert wake["metadata"]["query"] == f"sum({WAKE['prometheus']['query']})" and wake["metadata"]["activationThreshold"] == "0"
    plain = scaled_object({"minReplicas": 1})["spec"]
    assert "cooldownPeriod" not in plain and [t["name"] for t in plain["triggers"]] == ["waiting"]  # renders as before


# ---- in the simulator ------------------------------------------------------------------------------------------


def test_the_simulator_takes_an_idle_service_to_zero_and_holds_the_waking_requests_at_the_front() -> None:
    """The operator's own zero.py in simulate: 10 min of load, 30 min idle, 10 min of load. With zero the service
    has no replica through most of the idle stretch, the first requests after it wait for a start-up at the front
    (their minute is missed), and it holds fewer GPU-minutes; without zero it keeps one replica."""
    from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams
    from pooling_operator.autoscaling.simulator.simulate import setup_for, simulate
    from pooling_operator.autoscaling.simulator.trace import parse_trace

    trace = parse_trace("seconds,requests_per_second,mean_tokens\n0,5,16\n600,0,16\n2400,5,16\n2940,5,16\n")
    params = ServiceParams(startup_s=60.0)
    runs = {}
    for zero in (True, False):
        autoscaling: dict[str, Any] = {"minReplicas": 0 if zero else 1, "maxReplicas": 4, "p99Latency": "500ms"}
        if zero:
            autoscaling["wake"] = WAKE
        resource = validate(pooling({"autoscaling": autoscaling})).resource
        setup = setup_for(resource, None, params, seed=3)
        runs[zero] = simulate(resource, None, trace, setup)["operator"]
    with_zero, without = runs[True], runs[False]
    at_zero = [e for e in with_zero.timeline if e.replicas == 0]
    # the load ends at 600 s; the idle time is ten 60 s start-ups, and the rate window must empty first
    assert at_zero and 600 + 600 <= at_zero[0].t <= 600 + 600 + 90, at_zero[:1]
    woken = next(e for e in with_zero.timeline if e.t > at_zero[0].t and e.replicas > 0)
    assert 2400 <= woken.t <= 2400 + 15, woken  # the first decision after demand returns
    assert min(e.replicas for e in without.timeline) == 1
    # no replica for ~19 of its 50 minutes; one woken (5/s kept one replica far from busy: no capacity to size by)
    assert with_zero.max_replicas == 1
    assert with_zero.gpu_minutes < without.gpu_minutes - 15  # 50 against ~31
    assert with_zero.slo_minutes_missed > without.slo_minutes_missed  # the cold start costs the waking minute


@pytest.mark.parametrize(
    ("held", "since", "capacity", "startup", "size"),
    [
        (75, 0, None, 60, 1),  # never served: one replica, the decision takes over from its metrics
        (0, 0, 10.0, 60, 1),
        # 5/s; by Ready 75 + 5 x 60 = 375 wait, drained in 60 s on top of 5/s: 11.25/s against 10/s
        (75, 0, 10.0, 60, 2),
        # 10/s, as two replicas at the 8/s each served on target before, 750 by Ready: 22.5/s -> 3
        (150, 0, 8.0, 60, 3),
        (75, 0, 100.0, 60, 1),
        # 45 s into the start-up, 300 held: 300 / 60 s = 5/s, 375 by Ready, the same 2
        (300, 45, 10.0, 60, 2),
        (3, 0, 0.5, 120, 2),  # a slow model: 0.2/s, 27 by Ready: 0.65/s against 0.5/s
        (1, 0, 2.0, 120, 1),  # one request now and then: one replica
    ],
)
def test_a_wake_is_sized_to_what_waits(held: float, since: float, capacity: float | None, startup: float, size: int) -> None:
    assert wake_size(held, since, capacity, startup) == size


def measured(capacity: float, saturated: bool = True) -> ZeroState:
    gone = step(300, 1, 1, step(0, 1, 1, ZeroState()).state).state
    return ZeroState(since=gone.since, capacity_rps=capacity, capacity_saturated=saturated)


def test_a_wake_with_a_measured_capacity_asks_for_what_waits_and_more_while_its_replicas_load() -> None:
    at_zero_state = measured(10.0)
    woken = step(400, 0, 0, at_zero_state, wake=75.0, startup_seconds=60.0)
    assert (woken.desired, woken.condition_reason) == (2, WOKEN) and "2 replicas" in woken.reason
    assert "2 replicas serve what waits" in woken.state.last_wake["by"]  # type: ignore[index]
    # 15 s on, none Ready, the front holds 600: 600 / 30 s = 20/s, 600 + 20 x 45 = 1500 by Ready -> 4.5 -> 5
    more = step(415, 2, 0, woken.state, completions=None, waiting=None, wake=600.0, startup_seconds=60.0)
    assert more.desired == 5 and not more.at_zero
    # never fewer: a front that holds less while they load leaves the count to the decision
    assert step(430, 5, 0, more.state, completions=None, waiting=None, wake=20.0, startup_seconds=60.0).desired is None
    # once one is Ready the decision has the replica's metrics: no more sizing here
    ready = step(445, 5, 1, more.state, completions=None, waiting=None, wake=600.0, startup_seconds=60.0)
    assert ready.desired is None and ready.state.last_wake["firstReadySeconds"] == 45.0  # type: ignore[index]


def test_a_sized_wake_is_bounded_and_held_by_the_scale_down_window() -> None:
    targets = resolve_targets(validate(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 3, "wake": WAKE}})).resource, None)  # type: ignore[arg-type]
    observed = Observed(replicas=0, startup_seconds=60.0)
    d = decide_or_zero(400, "t400", Signals(), observed, targets, State(), measured(2.0), Wake(75.0), None)
    assert d.desired == 3 and d.limited and d.limited_reason == C.LIMIT_MAX, "11.25/s at 2/s is 6, maxReplicas 3"
    assert d.zero is not None and d.zero.desired == 3
    assert (400, 3) in d.state.recommendations, "the scale-down window remembers the wake's size"
    short = decide_or_zero(400, "t400", Signals(), observed, targets, State(), measured(2.0), Wake(75.0), None,
                           Budget(limit=4, held=2, per_replica=1))  # fmt: skip
    assert short.desired == 2 and short.limited_reason == C.LIMIT_BUDGET and "GPU budget" in short.limited_message
    # the first replica reports a light load: the decision keeps the wake's three for its scale-down window
    light = Signals(waiting=0.0, reporting=1, completions=1.0, in_system=0.05, tokens=16.0, p99=0.05)
    later = decide_or_zero(490, "t490", light, Observed(replicas=3, ready=1, startup_seconds=60.0), targets,
                           d.state, d.zero.state, Wake(0.0), None)  # fmt: skip
    assert later.desired == 3


def test_the_capacity_a_replica_served_is_kept_for_the_next_wake() -> None:
    targets = resolve_targets(validate(pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 4, "wake": WAKE}})).resource, None)  # type: ignore[arg-type]
    trickle = Signals(waiting=0.0, reporting=1, completions=0.02, in_system=0.001, tokens=0.32, p99=0.05)
    d = decide_or_zero(0, "t0", trickle, Observed(replicas=1, ready=1), targets, State(), ZeroState(), Wake(0.0), None)
    assert d.zero is not None and d.zero.state.capacity_rps is None, "a lower bound read at a trickle is the trickle"
    busy = Signals(waiting=0.0, reporting=1, completions=8.0, in_system=1.6, tokens=128.0, p99=0.25)
    d = decide_or_zero(15, "t15", busy, Observed(replicas=1, ready=1), targets, d.state, d.zero.state, Wake(0.0), None)
    assert d.zero is not None and d.zero.state.capacity_rps == pytest.approx(8.0)
    assert not d.zero.state.capacity_saturated, "8/s served with nothing waiting is a lower bound"
    saturated = Signals(waiting=40.0, reporting=1, completions=8.0, in_system=4.0, tokens=128.0, p99=0.9)
    d = decide_or_zero(30, "t30", saturated, Observed(replicas=1, ready=1), targets, d.state, d.zero.state, Wake(0.0), None)
    assert d.zero is not None and d.zero.state.capacity_saturated, "measured at saturation"
