"""How the simulator sends a request to one of a service's ready replicas (`Setup.routing`), pure: the policies of a
Service, a least-request gateway and vllm-router's power_of_two, and a fixed fleet of replicas under one of them
(what `bench/router_sim_check.py` holds to a real run of the router)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, TypeVar

from pooling_operator.autoscaling.simulator.servicemodel import Replica

# How a request reaches one of the ready replicas:
#   even                a Kubernetes Service (kube-proxy): every ready replica equally likely, whatever it holds
#   least-outstanding   a front that knows each replica's requests in flight and sends to the fewest (ties at
#                       random), as a gateway's least-request balancing does; what a smarter front would buy
#   power-of-two        vllm-router's power_of_two (spec.routing.vllmRouter, policy powerOfTwo): two distinct ready
#                       replicas at random, the one with fewer requests in flight, the first on a tie
#                       (src/policies/power_of_two.rs 0.1.17: `if load1 <= load2`); in discovery mode its load is
#                       the router's own count of what it sent and has not had back. One router's view: with
#                       several router replicas each counts only its own share
Routing = Literal["even", "least-outstanding", "power-of-two"]
ROUTINGS: tuple[Routing, ...] = ("even", "least-outstanding", "power-of-two")
T = TypeVar("T")


def pick(routing: Routing, rng: random.Random, serving: Sequence[T], in_flight: Callable[[T], int]) -> T:
    """Which of the ready replicas `serving` a request goes to (ROUTINGS); `in_flight` says what one holds now (it
    may run the replica up to the request's time first), and is asked only of the replicas the policy looks at."""
    if routing == "even":
        return serving[rng.randrange(len(serving))]
    if routing == "power-of-two":
        if len(serving) == 1:
            return serving[0]
        first, second = rng.sample(list(serving), 2)
        return first if in_flight(first) <= in_flight(second) else second
    held = [in_flight(q) for q in serving]
    tied = [q for q, n in zip(serving, held, strict=True) if n == min(held)]
    return tied[0] if len(tied) == 1 else tied[rng.randrange(len(tied))]


def fixed_fleet(replicas: Sequence[Replica], routing: Routing, plan: Iterable[tuple[float, int]],
                seed: int = 0) -> tuple[list[int], list[float]]:  # fmt: skip
    """A fixed set of ready replicas (each with its own `slowdown`: a CPU share, a noisy neighbour) under one
    routing, fed `plan` ((time, prompt tokens), in time order): how many requests each took, and every request's
    latency (the router's own hop is not modelled). What `bench/router_sim_check.py` holds to a real run."""
    rng = random.Random(f"{seed}:route")
    took = [0] * len(replicas)
    latencies: list[float] = []
    last = 0.0

    def in_flight(i: int) -> int:
        latencies.extend(done.total_latency for done in replicas[i].advance(last))
        return replicas[i].in_flight

    for t, tokens in plan:
        last = t
        i = pick(routing, rng, range(len(replicas)), in_flight)
        replicas[i].submit(t, tokens)
        took[i] += 1
    for r in replicas:
        latencies.extend(done.total_latency for done in r.advance(last + 3600.0))
    return took, latencies
