"""Request traces a platform team meets, generated from a seed: a benchmark the decision cannot be tuned to.

Each family draws its parameters at random and states its rates as multiples of one replica's capacity for the
service model at the family's request size (`capacity`), so the same family stresses a light and a heavy model
alike and `maxReplicas` is never what binds (every peak stays under `PEAK_REPLICAS` replicas' worth).

    step        a level, then a step up or down by 2-5x that lasts 10-20 minutes, then back (30-45 min)
    flash       a flash crowd: 8-15x the base for 2-6 minutes in a 15-minute trace
    diurnal     a compressed day: a ramp from a trough to a peak 8-25x above it over 15-25 minutes and back
    bursts      a base load with 3-8 bursts of 15-90 s at 2.5-6x it (25-40 min)
    lengths     long and mixed request sizes: short requests, then a change of size mid-trace (to 100-300
                tokens, or back), at rates of each size's capacity (for a model too slow to serve 9 requests
                a second of that size, the longest size it does: see `_longest`)
    noisy       noisy steady load: a constant mean with 10-30 % Gaussian noise every 30 s (30-40 min)
    drift       slow drift: a linear change by 2-5x over 40-60 minutes, up or down

`trace(family, seed, capacity)` is pure: the same seed gives the same trace. The benchmark picks the family of
a seed as `FAMILIES[seed % len(FAMILIES)]`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

ROW_SECONDS = 30.0
PEAK_REPLICAS = 11.0  # the highest rate of any trace, in replicas' worth (maxReplicas is 16)
SHORT_TOKENS = 16.0
MIN_LONG_RPS = 9.0  # long requests are at most as long as one replica serves this many of a second


@dataclass(frozen=True)
class Row:
    seconds: float
    rate: float  # requests per second
    tokens: float  # mean prompt tokens


@dataclass(frozen=True)
class Generated:
    family: str
    seed: int
    rows: tuple[Row, ...]
    params: dict[str, float]  # what was drawn, for the report

    def csv(self) -> str:
        lines = ["seconds,requests_per_second,mean_tokens"]
        lines += [f"{r.seconds:g},{r.rate:.3f},{r.tokens:g}" for r in self.rows]
        return "\n".join(lines) + "\n"

    @property
    def minutes(self) -> float:
        return (self.rows[-1].seconds + 60.0) / 60.0


Capacity = Callable[[float], float]  # mean tokens -> requests per second one replica serves at saturation


def _rows(seconds: float, rate_at: Callable[[float], float], tokens_at: Callable[[float], float]) -> tuple[Row, ...]:
    out = []
    t = 0.0
    while t < seconds:
        out.append(Row(t, max(0.0, rate_at(t)), tokens_at(t)))
        t += ROW_SECONDS
    return tuple(out)


def _cap(level: float) -> float:
    return min(level, PEAK_REPLICAS)


def step(rng: random.Random, capacity: Capacity) -> tuple[tuple[Row, ...], dict[str, float]]:
    c = capacity(SHORT_TOKENS)
    base = rng.uniform(0.5, 2.0)
    factor = rng.uniform(2.0, 5.0)
    up = rng.random() < 0.7
    high = _cap(base * factor)
    low = base if up else high / factor
    first, second = (low, high) if up else (high, low)
    start, length = rng.uniform(6, 12) * 60, rng.uniform(10, 20) * 60
    total = start + length + rng.uniform(10, 15) * 60
    rows = _rows(total, lambda t: c * (second if start <= t < start + length else first), lambda t: SHORT_TOKENS)
    return rows, {"base": first, "level": second, "start_min": start / 60, "length_min": length / 60}


def flash(rng: random.Random, capacity: Capacity) -> tuple[tuple[Row, ...], dict[str, float]]:
    c = capacity(SHORT_TOKENS)
    base = rng.uniform(0.5, 1.2)
    crowd = _cap(base * rng.uniform(8.0, 15.0))
    start, length = rng.uniform(4, 7) * 60, rng.uniform(2, 6) * 60
    rows = _rows(15 * 60, lambda t: c * (crowd if start <= t < start + length else base), lambda t: SHORT_TOKENS)
    return rows, {"base": base, "crowd": crowd, "start_min": start / 60, "length_min": length / 60}


def diurnal(rng: random.Random, capacity: Capacity) -> tuple[tuple[Row, ...], dict[str, float]]:
    c = capacity(SHORT_TOKENS)
    peak = rng.uniform(5.0, PEAK_REPLICAS)
    trough = peak / rng.uniform(8.0, 25.0)
    half = rng.uniform(15, 25) * 60  # trough to peak

    def rate(t: float) -> float:
        phase = math.sin(math.pi * min(t, 2 * half) / (2 * half)) ** 2
        return c * (trough + (peak - trough) * phase)

    return _rows(2 * half + 120, rate, lambda t: SHORT_TOKENS), {"trough": trough, "peak": peak, "ramp_min": half / 60}


def bursts(rng: random.Random, capacity: Capacity) -> tuple[tuple[Row, ...], dict[str, float]]:
    c = capacity(SHORT_TOKENS)
    base = rng.uniform(1.0, 2.0)
    total = rng.uniform(25, 40) * 60
    spans: list[tuple[float, float, float]] = []
    for _ in range(rng.randint(3, 8)):
        start = rng.uniform(2 * 60, total - 3 * 60)
        spans.append((start, start + rng.uniform(15, 90), _cap(base * rng.uniform(2.5, 6.0))))

    def rate(t: float) -> float:
        return c * max([level for s, e, level in spans if s <= t < e] or [base])

    # rows at burst edges too, so a 15 s burst is not lost between two 30 s rows
    times = sorted({*(i * ROW_SECONDS for i in range(int(total // ROW_SECONDS))), *(x for s, e, _ in spans for x in (s, e))})
    rows = tuple(Row(round(t, 3), rate(t), SHORT_TOKENS) for t in times if t < total)
    return rows, {"base": base, "bursts": float(len(spans)), "minutes": total / 60}


def _longest(tokens: float, capacity: Capacity) -> float:
    """`tokens`, or less for a model so slow that one replica serves fewer than MIN_LONG_RPS requests of that
    size a second: the simulator's oracle sizes replicas with a search that needs requests in every minute
    at 1 % of a replica's capacity, which a handful of requests a second does not give."""
    while tokens > SHORT_TOKENS and capacity(tokens) < MIN_LONG_RPS:
        tokens -= 1
    return tokens


def lengths(rng: random.Random, capacity: Capacity) -> tuple[tuple[Row, ...], dict[str, float]]:
    long_tokens = _longest(float(rng.randint(100, 300)), capacity)
    sizes = (SHORT_TOKENS, long_tokens) if rng.random() < 0.6 else (long_tokens, SHORT_TOKENS)
    levels = (rng.uniform(1.0, 5.0), rng.uniform(1.0, 5.0))
    change = rng.uniform(8, 15) * 60
    total = change + rng.uniform(12, 20) * 60

    def part(t: float) -> int:
        return 0 if t < change else 1

    rows = _rows(total, lambda t: capacity(sizes[part(t)]) * levels[part(t)], lambda t: sizes[part(t)])
    return rows, {"tokens_before": sizes[0], "tokens_after": sizes[1], "level_before": levels[0],
                  "level_after": levels[1], "change_min": change / 60}


def noisy(rng: random.Random, capacity: Capacity) -> tuple[tuple[Row, ...], dict[str, float]]:
    c = capacity(SHORT_TOKENS)
    mean = rng.uniform(1.5, 6.0)
    noise = rng.uniform(0.10, 0.30)
    total = rng.uniform(30, 40) * 60
    draws = [mean * max(0.2, 1 + rng.gauss(0, noise)) for _ in range(int(total // ROW_SECONDS) + 1)]
    rows = _rows(total, lambda t: c * _cap(draws[int(t // ROW_SECONDS)]), lambda t: SHORT_TOKENS)
    return rows, {"mean": mean, "noise": noise, "minutes": total / 60}


def drift(rng: random.Random, capacity: Capacity) -> tuple[tuple[Row, ...], dict[str, float]]:
    c = capacity(SHORT_TOKENS)
    low = rng.uniform(0.8, 2.0)
    high = _cap(low * rng.uniform(2.0, 5.0))
    a, b = (low, high) if rng.random() < 0.6 else (high, low)
    total = rng.uniform(40, 60) * 60
    rows = _rows(total, lambda t: c * (a + (b - a) * t / total), lambda t: SHORT_TOKENS)
    return rows, {"from": a, "to": b, "minutes": total / 60}


GENERATORS = {"step": step, "flash": flash, "diurnal": diurnal, "bursts": bursts, "lengths": lengths, "noisy": noisy,
              "drift": drift}
FAMILIES = tuple(GENERATORS)


def family_of(seed: int) -> str:
    return FAMILIES[seed % len(FAMILIES)]


def trace(family: str, seed: int, capacity: Capacity) -> Generated:
    rng = random.Random(f"{family}:{seed}")
    rows, params = GENERATORS[family](rng, capacity)
    return Generated(family, seed, rows, params)
