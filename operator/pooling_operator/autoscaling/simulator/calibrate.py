"""The service model fitted to a real server's measured sweep, and the parameters file `simulate` reads. Pure:
measured points in, ServiceParams out; the measuring is bench/realvllm_calibration.py's.

A closed loop of c clients (each with one request in flight) and an open loop of Poisson arrivals are run
through `servicemodel.Replica` exactly as the bench runs them against a server, so a fitted model is judged on
the same figures the server was: requests/s, client mean and p50.

The fit (`fit`), on closed-loop levels (the bench uses c = 1, 8, 32):

1. `http_overhead_s` = client mean − server e2e mean at the lowest level (what HTTP/JSON adds; the e2e
   histogram does not see it);
2. c / rps grows by `step_per_token_s × tokens` per client once batches form: the least-squares slope over
   the levels gives `step_per_token_s`;
3. at the lowest level a request has its step to itself: vLLM's inference time (vllm:request_inference_time_
   seconds) is the step, so `step_base_s` = inference − its tokens' share, and `server_overhead_s` = e2e −
   queue − inference. A server that does not report them leaves the split to a search (golden sections on
   the share, which a closed loop barely tells apart, see tests/test_calibrate.py);
4. a common speed factor on the step is searched (golden sections, 0.6-1.4) for the least squared
   log-error of the simulated requests/s and client means at every level.

Jitter is scaled with the fitted step; the batching limits come from the server's own flags; overload
constants are kept (a closed loop below the batch limit never overloads).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from pooling_operator.autoscaling.simulator.servicemodel import Completion, Replica, ServiceParams

PASSES = 6  # coordinate-descent passes of the open-loop refit
DT = 0.0005  # s: the closed loop's clock tick; below half the HTTP overhead, so submissions stay in order


@dataclass(frozen=True)
class Point:
    """What one load level measured (or simulated)."""

    rps: float
    client_mean_s: float
    client_p50_s: float
    server_mean_s: float
    tokens: float  # prompt tokens per request
    # vLLM's own split of the server's time, where it reports it (vllm:request_queue_time_seconds,
    # vllm:request_inference_time_seconds, vllm:iteration_tokens_total): means per request, tokens per step
    queue_s: float | None = None
    inference_s: float | None = None
    step_tokens: float | None = None
    client_p99_s: float | None = None


def flag(field_name: str) -> str:
    """The name of a ServiceParams field in the parameters file and on the command line (without the dashes):
    step_base_s -> step-base-seconds."""
    return (field_name[:-2] + "_seconds" if field_name.endswith("_s") else field_name).replace("_", "-")


FIELDS = {flag(f.name): f for f in dataclasses.fields(ServiceParams)}


def to_file(params: ServiceParams, about: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The parameters file's content: every field by its flag name (plus an optional `about` map)."""
    out: dict[str, Any] = {name: getattr(params, f.name) for name, f in FIELDS.items()}
    if about:
        out["about"] = dict(about)
    return out


def from_file(content: Any, base: ServiceParams | None = None) -> ServiceParams:
    """ServiceParams from a parameters file's content (a mapping of flag names; `about` is ignored); a key
    that is none of them, or a value of the wrong type, is a ValueError naming it and what is accepted."""
    if not isinstance(content, Mapping):
        raise ValueError(f"expected a mapping of service-model parameters, got {type(content).__name__}")
    values: dict[str, Any] = {}
    for key, value in content.items():
        if key == "about":
            continue
        f = FIELDS.get(str(key))
        if f is None:
            raise ValueError(f"{key}: not a service-model parameter; known: {', '.join(FIELDS)}")
        kind: type = type(f.default)  # int or float: every ServiceParams field has a number for default
        if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not float(value).is_integer()):
            raise ValueError(f"{key}: expected {'an integer' if kind is int else 'a number'}, got {value!r}")
        values[f.name] = kind(value)
    return dataclasses.replace(base or ServiceParams(), **values)


def closed_loop(params: ServiceParams, c: int, tokens: int, seconds: float, warmup: float = 3.0, seed: int = 1) -> Point:
    """The model under c clients, each resubmitting when its answer (plus the HTTP round trip) is back."""
    rep = Replica(params, seed=seed)
    half = params.http_overhead_s / 2
    dt = min(DT, half / 2) if half > 0 else DT
    pending = [(half * (1 + k / max(1, c)), k) for k in range(c)]  # (arrival at the server, client)
    heapq.heapify(pending)
    sent: dict[float, list[int]] = {}
    latencies, kept = [], []
    t, end = 0.0, warmup + seconds
    while t < end:
        t += dt
        while pending and pending[0][0] <= t:
            arrival, k = heapq.heappop(pending)
            rep.submit(arrival, tokens)
            sent.setdefault(arrival, []).append(k)
        for done in rep.advance(t):
            k = sent[done.arrival].pop()
            back = done.finish + half
            if done.arrival - half >= warmup and back <= end:
                latencies.append(back - (done.arrival - half))
                kept.append(done)
            heapq.heappush(pending, (back + half, k))
    return _point(latencies, kept, seconds, tokens)


def open_loop(params: ServiceParams, rate: float, tokens: int, seconds: float, warmup: float = 3.0, seed: int = 1) -> Point:
    """The model under Poisson arrivals at `rate` per second (what a client sending on a timer measures): rps
    is what was answered within the measured seconds, the latencies those of every request sent in them."""
    rng = random.Random(seed)
    rep = Replica(params, seed=seed)
    half = params.http_overhead_s / 2
    t, end = 0.0, warmup + seconds
    while True:
        t += rng.expovariate(rate)
        if t >= end:
            break
        rep.submit(t + half, tokens)
    latencies, kept, served = [], [], 0
    for done in rep.advance(end + 600.0):  # everything sent is answered (the client waits for it)
        sent = done.arrival - half
        served += warmup <= done.finish + half < end
        if sent >= warmup:
            latencies.append(done.finish + half - sent)
            kept.append(done)
    return dataclasses.replace(_point(latencies, kept, seconds, tokens), rps=served / seconds)


def _point(latencies: list[float], done: list[Completion], seconds: float, tokens: float) -> Point:
    if not latencies:
        return Point(0.0, math.inf, math.inf, math.inf, tokens)
    steps: dict[float, int] = {}  # step start -> tokens, as vllm:iteration_tokens_total counts them
    for d in done:
        if d.scheduled is not None:
            steps[d.scheduled] = steps.get(d.scheduled, 0) + d.tokens
    ordered = sorted(latencies)
    return Point(
        len(latencies) / seconds, statistics.fmean(latencies), statistics.median(latencies),
        statistics.fmean(d.latency for d in done), tokens,
        client_p99_s=ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        queue_s=statistics.fmean(d.scheduled - d.arrival for d in done if d.scheduled is not None),
        inference_s=statistics.fmean(d.computed - d.scheduled for d in done if d.computed is not None and d.scheduled is not None),
        step_tokens=statistics.fmean(steps.values()) if steps else None,
    )


def _golden(f: Callable[[float], float], lo: float, hi: float, rounds: int = 8) -> float:
    """The argmin of f on [lo, hi], assumed unimodal (golden-section search)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    x1, x2 = b - g * (b - a), a + g * (b - a)
    f1, f2 = f(x1), f(x2)
    for _ in range(rounds):
        if f1 <= f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - g * (b - a)
            f1 = f(x1)
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + g * (b - a)
            f2 = f(x2)
    return x1 if f1 <= f2 else x2


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def fit(levels: Mapping[int, Point], base: ServiceParams, seconds: float = 10.0) -> ServiceParams:
    """The service model that reproduces the closed-loop `levels` (c -> measured point) best; `base` gives the
    batching limits, the start-up and the overload constants."""
    if len(levels) < 2:
        raise ValueError("fitting needs at least two closed-loop levels")
    cs = sorted(levels)
    tokens = statistics.fmean(levels[c].tokens for c in cs)
    low = levels[cs[0]]
    http = max(0.0, low.client_mean_s - low.server_mean_s)
    # c / rps grows by one request's share of a step per client once batches form
    _, slope = _line([float(c) for c in cs], [c / levels[c].rps for c in cs])
    per_token = max(1e-9, slope / max(1.0, tokens))
    if low.inference_s is not None and low.queue_s is not None:
        # vLLM reports how a lone request's time splits: its step (inference) and the rest (outside the step)
        step_base = max(1e-5, low.inference_s - per_token * low.tokens)
        outside, split = max(0.0, low.server_mean_s - low.queue_s - low.inference_s), None
    else:
        lone = max(1e-5, low.server_mean_s - per_token * low.tokens)  # a lone request beyond its tokens
        step_base, outside, split = lone, 0.0, lone

    def params(share: float, scale: float) -> ServiceParams:
        b = step_base * (1 - share) if split is not None else step_base
        over = split * share if split is not None else outside
        ratio = (b + per_token * scale * tokens) / max(1e-9, base.step_base_s + base.step_per_token_s * tokens)
        return dataclasses.replace(
            base, step_base_s=b * scale, step_per_token_s=per_token * scale, server_overhead_s=over,
            http_overhead_s=http, step_jitter_s=base.step_jitter_s * ratio,
            step_jitter_per_request_s=base.step_jitter_per_request_s * ratio,
        )

    def error(p: ServiceParams) -> float:
        total = 0.0
        for c in cs:
            sim, real = closed_loop(p, c, round(tokens), seconds), levels[c]
            total += math.log(max(sim.rps, 1e-9) / real.rps) ** 2 + math.log(sim.client_mean_s / real.client_mean_s) ** 2
        return total

    def error_at(share: float, scale: float) -> float:
        return error(params(share, scale))

    share, scale = 0.5, 1.0
    for _ in range(2 if split is not None else 1):  # coordinate descent: the split (when unmeasured), the speed
        if split is not None:
            share = _golden(partial(error_at, scale=scale), 0.0, 0.95)
        scale = _golden(partial(error_at, share), 0.6, 1.4)
    return params(share, scale)


def fit_open(closed: ServiceParams, levels: Mapping[int, Point], open_levels: Mapping[float, Point],
             api_cpu_s: float | None = None, seconds: float = 20.0) -> ServiceParams:
    """The closed-loop fit (`fit`'s result) refitted on open-loop levels as well: open-loop arrivals reach the
    engine while it computes, so steps form from what arrived during the last one and a step's fixed cost
    (`step_base_s`) weighs far more than a closed loop shows; and the API server works beside the engine
    (`api_s`, `api_contention`). Searched (coordinate descent, golden sections) for the least squared log-error
    of requests/s, p50 and p99 at the open-loop `open_levels` (rate -> measured point) together with requests/s
    at the closed-loop `levels` (their latency is left out: the model does not have the bursts in which the API
    server answers a closed loop's batch, and holding it to them costs the open loop, bench/README.md): a factor on the step's fixed cost and one on its per-token cost, the
    API server's work per request (taken out of the overheads the closed-loop fit put outside the step, server
    first, then HTTP) and its contention. `api_cpu_s`, the API process's measured CPU seconds per request,
    starts the search."""
    if not open_levels:
        raise ValueError("the open-loop fit needs at least one open-loop level")
    tokens = round(statistics.fmean(p.tokens for p in levels.values()))
    room = closed.server_overhead_s + closed.http_overhead_s

    def params(x: Mapping[str, float]) -> ServiceParams:
        api = x["api"]
        server = max(0.0, closed.server_overhead_s - api)
        http = max(0.0, closed.http_overhead_s - max(0.0, api - closed.server_overhead_s))
        return dataclasses.replace(closed, step_base_s=closed.step_base_s * x["base"], overload_step_factor=1.0,
                                   step_per_token_s=closed.step_per_token_s * x["per_token"], api_s=api,
                                   api_contention=x["contention"], server_overhead_s=server, http_overhead_s=http)

    def error(p: ServiceParams) -> float:
        total = 0.0
        for c, real in levels.items():
            sim = closed_loop(p, c, tokens, min(10.0, seconds))
            total += math.log(max(sim.rps, 1e-9) / real.rps) ** 2
        for rate, real in open_levels.items():
            sim = open_loop(p, rate, tokens, seconds)
            total += math.log(max(sim.rps, 1e-9) / real.rps) ** 2 + math.log(sim.client_p50_s / real.client_p50_s) ** 2
            if sim.client_p99_s and real.client_p99_s:
                total += math.log(sim.client_p99_s / real.client_p99_s) ** 2
        return total

    # The overload constants (servicemodel.py) were measured past saturation, which these levels do not reach:
    # the refit keeps the slowdown off rather than guess where it starts on this server.
    x = {"base": 1.0, "per_token": 1.0, "api": api_cpu_s if api_cpu_s else room / 2, "contention": 0.0}
    ranges = {"base": (0.5, 4.0), "per_token": (0.7, 1.3), "api": (0.0, 4 * max(room, x["api"])), "contention": (0.0, 4.0)}
    def error_with(key: str, value: float) -> float:  # x with one parameter changed
        return error(params({**x, key: value}))

    for _ in range(PASSES):
        for name, (lo, hi) in ranges.items():
            x[name] = _golden(partial(error_with, name), lo, hi, rounds=12)
    return params(x)


def within(model: Point, real: Point, throughput: float = 0.15, p50: float = 0.20, p99: float | None = None) -> tuple[bool, str]:
    """Whether the model reproduces a check point (requests/s within `throughput`, p50 within `p50` and, when
    given, p99 within `p99`), and the figures that say so."""
    dr, dp = model.rps / real.rps - 1, model.client_p50_s / real.client_p50_s - 1
    ok = abs(dr) <= throughput and abs(dp) <= p50
    figures = (f"req/s {real.rps:.1f} real, {model.rps:.1f} model ({dr:+.0%}); "
               f"p50 {1000 * real.client_p50_s:.1f} / {1000 * model.client_p50_s:.1f} ms ({dp:+.0%})")
    if p99 is not None and real.client_p99_s and model.client_p99_s:
        d99 = model.client_p99_s / real.client_p99_s - 1
        ok = ok and abs(d99) <= p99
        figures += f"; p99 {1000 * real.client_p99_s:.1f} / {1000 * model.client_p99_s:.1f} ms ({d99:+.0%})"
    return ok, figures
