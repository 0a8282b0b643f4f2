"""The simulator's routing (autoscaling/simulator/routing.py, pure): each policy's pick, and a fixed fleet with a
slowed replica under each (what bench/router_sim_check.py holds to the real router)."""

from __future__ import annotations

import random

import pytest

from pooling_operator.autoscaling.simulator.routing import ROUTINGS, fixed_fleet, pick
from pooling_operator.autoscaling.simulator.servicemodel import Replica, ServiceParams


def test_power_of_two_takes_the_less_loaded_of_two_and_the_first_on_a_tie() -> None:
    held = {"a": 3, "b": 1, "c": 1}
    asked: list[str] = []

    def in_flight(name: str) -> int:
        asked.append(name)
        return held[name]

    for seed in range(50):
        asked.clear()
        rng = random.Random(seed)
        first, second = random.Random(seed).sample(["a", "b", "c"], 2)
        chosen = pick("power-of-two", rng, ["a", "b", "c"], in_flight)
        assert asked == [first, second], "only the two drawn are looked at"
        assert chosen == (first if held[first] <= held[second] else second)


def test_least_outstanding_takes_the_fewest_and_even_ignores_the_load() -> None:
    held = {"a": 3, "b": 1, "c": 2}
    assert {pick("least-outstanding", random.Random(s), ["a", "b", "c"], held.__getitem__) for s in range(20)} == {"b"}
    assert {pick("even", random.Random(s), ["a", "b", "c"], held.__getitem__) for s in range(40)} == {"a", "b", "c"}
    assert pick("power-of-two", random.Random(0), ["only"], held.__getitem__) == "only"


def plan(seed: int, rate: float = 40.0, seconds: float = 20.0) -> list[tuple[float, int]]:
    rng, t, out = random.Random(seed), 0.0, []
    while t < seconds:
        t += rng.expovariate(rate)
        out.append((t, rng.choice([16, 200])))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_slowed_replica_takes_less_under_load_aware_routing_and_every_request_is_answered(seed: int) -> None:
    took: dict[str, float] = {}
    for routing in ROUTINGS:
        replicas = [Replica(ServiceParams(), seed=seed), Replica(ServiceParams(), seed=seed + 100)]
        replicas[1].slowdown = 3.0
        counts, latencies = fixed_fleet(replicas, routing, plan(seed), seed)
        assert sum(counts) == len(latencies) == len(plan(seed))
        took[routing] = counts[1] / sum(counts)
    assert 0.4 < took["even"] < 0.6
    assert took["power-of-two"] < took["even"] - 0.1 and took["least-outstanding"] < took["even"] - 0.1
