"""What a new replica costs, in the decision (autoscaling/ahead.py): the forecast one start-up ahead, the quick
scale-down after a clear fall, and how decide uses them only where the user left the default (pure)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from pooling_operator.autoscaling import ahead
from pooling_operator.autoscaling.decide import TARGET_UTILIZATION, Observed, Signals, State, Targets, decide

T = Targets(min_replicas=1, max_replicas=32, queue_per_replica=16, p99_seconds=0.25, up_window_seconds=0, down_window_seconds=300)


def samples(rates: list[float], period: float = 15.0) -> tuple[tuple[float, float], ...]:
    return tuple((i * period, r) for i, r in enumerate(rates))


# ---- forecast ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("rates", "startup", "expect"), [
    ([10 + i for i in range(13)], None, 22.0),  # no start-up known: today's rate
    ([10 + i for i in range(13)], 0.0, 22.0),
    ([20, 21, 22], 180.0, 22.0),  # three samples are no trend
    ([10 + i for i in range(13)], 90.0, 22.0 + 90 / 15),  # a steady rise of 1 per 15 s, one start-up ahead
    ([10 + 2 * i for i in range(13)], 600.0, 68.0),  # a long start-up is capped at twice today's rate
    ([30 - i for i in range(13)], 180.0, 18.0),  # falling: today's rate
    ([20.0] * 13, 180.0, 20.0),  # flat
    ([20, 20, 20, 20, 20, 20, 20, 20, 20, 20.5, 20.5, 21, 21], 180.0, 21.0),  # a rise below 10 % of the rate
])
def test_forecast_extends_a_clear_rise_by_one_start_up(rates, startup, expect) -> None:
    s = samples(rates)
    assert ahead.forecast(s, s[-1][0], rates[-1], startup) == pytest.approx(expect)


def test_forecast_ignores_noise_around_a_level() -> None:
    rng = random.Random(3)
    rates = [100 * rng.uniform(0.7, 1.3) for _ in range(13)]
    rates[-1] = max(rates)  # even a high last read
    s = samples(rates)
    assert ahead.forecast(s, s[-1][0], rates[-1], 180.0) == rates[-1]


def test_forecast_fits_over_one_start_up_only() -> None:
    """A rise long ago followed by a level is no trend now."""
    rates = [10 + 5 * i for i in range(10)] + [55.0] * 12
    s = samples(rates)
    assert ahead.forecast(s, s[-1][0], 55.0, 120.0) == 55.0


def test_remember_keeps_fifteen_minutes() -> None:
    kept = ahead.remember(samples([1.0] * 100), 99 * 15.0 + 15, 2.0)
    assert kept[-1] == (1500.0, 2.0) and all(t > 1500 - ahead.MEMORY_SECONDS for t, _ in kept)


# ---- quick_down --------------------------------------------------------------------------------------------

def fall(before: int, after: int, reads_before: int = 20, reads_after: int = 5, rate_before: float = 100.0,
         rate_after: float = 10.0) -> tuple[list[tuple[float, int]], tuple[tuple[float, float], ...], float]:
    recs = [before] * reads_before + [after] * reads_after
    rates = [rate_before] * reads_before + [rate_after] * reads_after
    history = [(i * 15.0, r) for i, r in enumerate(recs)]
    return history, samples(rates), history[-1][0]


def test_a_clear_fall_sustained_for_one_start_up_is_followed() -> None:
    history, arrivals, now = fall(8, 2)
    assert ahead.quick_down(history, now, 8, 60.0, None, arrivals) == 2


@pytest.mark.parametrize(("why", "change"), [
    ("no start-up known", {"startup": None}),
    ("one replica", {"current": 1}),
    ("the fall is younger than the start-up", {"startup": 120.0}),
    ("the policy's floor is longer than what the fall lasted", {"floor": 120.0}),
])
def test_a_fall_not_yet_clear_keeps_the_default_window(why: str, change: dict) -> None:
    history, arrivals, now = fall(8, 2, reads_after=5)  # 60 s of the lower recommendation
    args = {"current": 8, "startup": 60.0, "floor": None} | change
    assert ahead.quick_down(history, now, args["current"], args["startup"], args["floor"], arrivals) is None, why


def test_a_small_fall_keeps_the_default_window() -> None:
    history, arrivals, now = fall(8, 7, rate_after=85.0)
    assert ahead.quick_down(history, now, 8, 60.0, None, arrivals) is None


def test_noise_is_not_a_fall() -> None:
    """Recommendations that dip while the arrivals only wobble around their level."""
    rng = random.Random(5)
    history = [(i * 15.0, 8 if i < 20 else 4) for i in range(25)]
    arrivals = samples([100 * rng.uniform(0.5, 1.5) for _ in range(25)])
    assert ahead.quick_down(history, history[-1][0], 8, 60.0, None, arrivals) is None


def test_bursts_that_came_and_went_are_expected_back() -> None:
    recs = [2] * 5 + [8] * 5 + [2] * 5 + [8] * 5 + [2] * 5
    rates = [10.0] * 5 + [100.0] * 5 + [10.0] * 5 + [100.0] * 5 + [10.0] * 5
    history = [(i * 15.0, r) for i, r in enumerate(recs)]
    assert ahead.quick_down(history, history[-1][0], 8, 60.0, None, samples(rates)) is None


# ---- in the decision: only where the default was left -------------------------------------------------------

def drive(targets: Targets, startup: float | None, reads: list[Signals], replicas: int) -> list[int]:
    state, out = State(), []
    for i, s in enumerate(reads):
        d = decide(i * 15.0, replace(s, reporting=replicas), Observed(replicas=replicas, ready=replicas, startup_seconds=startup),
                   targets, state)
        state, replicas = d.state, d.desired
        out.append(replicas)
    return out


def load(rps: float) -> Signals:
    return Signals(waiting=0.0, reporting=1, completions=rps, in_system=rps * 0.03, tokens=rps * 16, p99=0.05 if rps else None)


IDLE_AFTER_LOAD = [load(100)] * 30 + [load(0)] * 30  # the fall comes at read 30 (450 s)


def first_below(replicas: list[int], level: int) -> float:
    return next(i for i, r in enumerate(replicas) if r < level) * 15.0 - 450.0


def test_the_default_window_follows_a_clear_fall_after_one_start_up() -> None:
    replicas = drive(T, 60.0, IDLE_AFTER_LOAD, replicas=4)
    assert 60.0 <= first_below(replicas, 4) <= 90.0
    assert replicas[replicas.index(min(replicas))] == 1 and replicas.count(2) == replicas.count(3) == 0  # in one step


@pytest.mark.parametrize(("targets", "startup", "at_least"), [
    (replace(T, down_window_set=True), 60.0, 300.0),  # the user's window, even when it equals the default
    (replace(T, down_floor_seconds=240), 60.0, 240.0),  # the platform's floor
    (T, None, 300.0),  # no start-up measured yet
])
def test_an_explicit_window_a_floor_or_no_start_up_is_honoured(targets: Targets, startup: float | None, at_least: float) -> None:
    replicas = drive(targets, startup, IDLE_AFTER_LOAD, replicas=4)
    assert first_below(replicas, 4) >= at_least


def test_an_explicit_down_step_is_kept_on_a_quick_fall() -> None:
    replicas = drive(replace(T, down_step_set=True), 60.0, IDLE_AFTER_LOAD, replicas=4)
    assert 60.0 <= first_below(replicas, 4) <= 90.0 and 3 in replicas  # one at a time, as the user asked


@pytest.mark.parametrize(("targets", "expect"), [
    (T, 16),  # the default: four or doubling per 15 s, whichever is more
    (replace(T, up_step_set=True), 12),  # the user's maxStep: 4
])
def test_the_default_up_step_doubles_an_explicit_one_is_kept(targets: Targets, expect: int) -> None:
    s = Signals(waiting=8 * 64.0, reporting=8, completions=100.0, in_system=3.0, tokens=1600.0, p99=0.05)
    d = decide(0, s, Observed(replicas=8, ready=8), targets, State())
    assert d.desired == expect


def test_a_rising_trend_starts_replicas_one_start_up_ahead() -> None:
    rising = [load(100 + 10 * i) for i in range(13)]
    with_startup = drive(T, 180.0, rising, replicas=2)
    without = drive(T, None, rising, replicas=2)
    assert without[-1] == 2 and with_startup[-1] > 2
    state = State()
    for i, s in enumerate(rising):
        d = decide(i * 15.0, replace(s, reporting=2), Observed(replicas=2, ready=2, startup_seconds=180.0), T, state)
        state = d.state
    assert "rising towards" in d.reason and d.values["expectedArrivalRate"] > d.values["arrivalRate"]
    # what the autoscaler writes is what the CRD declares: an undeclared field makes the API server refuse the
    # whole status patch (500 "field not declared in schema": a CI run's autoscaling tests showed it)
    from pooling_operator.api.crd import all_crds
    from pooling_operator.autoscaling.scale import autoscaling_status

    crd = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "PoolingService")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["autoscaling"]
    assert set(autoscaling_status(d, 2, 2, "2026-12-01T00:00:00Z")) <= set(schema["properties"])


@pytest.mark.parametrize(("why", "base", "latency", "more"), [
    # (why, the rate rising by 10 % per read from, seconds each request spends in the system, replicas added?)
    ("a trickle: the engine idles between requests", 0.4, 0.015, False),
    ("light but rising past one request in the system per replica at the forecast", 40.0, 0.03, True),
    ("busy", 100.0, 0.03, True),
])  # fmt: skip
def test_a_rising_trend_asks_for_replicas_only_where_the_engines_would_be_busy(why: str, base: float, latency: float, more: bool) -> None:
    rising = [Signals(waiting=0.0, reporting=1, completions=base * 1.1**i, in_system=base * 1.1**i * latency, tokens=base * 1.1**i * 16,
                      p99=latency * 2) for i in range(13)]  # fmt: skip
    replicas = drive(T, 180.0, rising, replicas=1)
    assert (replicas[-1] > 1) is more, (why, replicas)


def test_without_requests_in_the_system_a_rising_trend_still_plans_ahead() -> None:
    # no inSystem series (an exporter without the latency sum): the rule as before, on the arrivals alone
    rising = [replace(load(0.4 * 1.1**i), in_system=None) for i in range(13)]
    assert drive(T, 180.0, rising, replicas=1)[-1] > 1


def test_a_rising_trend_asks_for_no_more_than_the_rate_a_replica_has_served_on_target() -> None:
    # 16 replicas run what fewer served on target before (250/s each, on target, never saturated): a rise asks for
    # what the forecast needs at that rate and the planned utilisation, not for today's 16 scaled by the rise. The
    # latter ratchets under noise: each rise that looks like a trend scales the count the last one raised, and
    # the scale-down window holds it (bench/README.md, "A trend that ratcheted").
    rates = [1000.0 + 25 * i for i in range(12)]
    state = State(capacity_tokens=250.0 * 16, capacity_floor=250.0 * 16, arrivals=samples(rates))
    s = Signals(waiting=0.0, reporting=16, completions=1275.0, in_system=1275.0 * 0.03, tokens=1275.0 * 16, p99=0.05)
    d = decide(180.0, s, Observed(replicas=16, ready=16, startup_seconds=180.0), T, state)
    expected = d.values["expectedArrivalRate"]
    assert expected > 1275.0  # a rise, planned one start-up ahead
    assert d.recommendations["trend"] == math.ceil(expected / (250.0 * TARGET_UTILIZATION)) < 16
    assert d.desired == 16  # and the scale-down window keeps what runs


def test_a_rising_trend_on_replicas_near_their_busiest_is_not_capped() -> None:
    # each replica serves 100/s of the 110/s it served on target before (above the planned utilisation of it): the
    # cap, that rate at TARGET_UTILIZATION, stays above today's count scaled by the rise, so a rising day is planned
    # for as before (a cap at the rate itself would ask for 3 here, one replica short)
    rates = [90.0 + 10 * i for i in range(12)]
    s = Signals(waiting=0.0, reporting=2, completions=200.0, in_system=200.0 * 0.03, tokens=200.0 * 16, p99=0.05)
    d = decide(180.0, s, Observed(replicas=2, ready=2, startup_seconds=180.0), T,
               State(capacity_tokens=110.0 * 16, capacity_floor=110.0 * 16, arrivals=samples(rates)))
    expected = d.values["expectedArrivalRate"]
    assert math.ceil(expected / 110.0) < math.ceil(2 * expected / 200.0)  # where a cap without the utilisation bites
    assert d.recommendations["trend"] == math.ceil(2 * expected / 200.0) > 2
