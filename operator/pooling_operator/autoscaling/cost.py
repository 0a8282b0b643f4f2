"""What a service's GPUs cost per million tokens (`status.cost`), pure: values in, values out.

A platform team compares models, GPU shares and routing by what one million tokens (or inputs) costs in
GPU-seconds, and in money where the policy prices a GPU-hour. The figures are for whole, fixed windows of wall
time (`window`, one hour by default; `windowEnd` names which), so an idle service reads the same every window and
its status is not rewritten:

- **GPU-seconds held**: the GPUs the service's pods hold (the Deployment's pods that exist, loading or serving,
  times `vllm.memory.gpus_held` of the spec: a share counts as its fraction), integrated over the window from the
  autoscaler's readings (`Held`: one point per change, read every period, so a change is placed to within a
  period). A window the autoscaler did not watch whole (it started, or began tracking the service, after the
  window began) is not reported, unless the service itself was created within it.
- **Prompt tokens and inputs served**: the increase over the window of vLLM's `vllm:prompt_tokens_total` and
  `vllm:request_success_total` (one per input: vLLM runs each input of a request as its own engine request),
  summed over the service's pods, read at the window's end (`cost_queries`).
- **Per million**: GPU-seconds / (tokens / 10^6), likewise per million inputs; with a price per GPU-hour for the
  service's GPU product (`pricing.gpuHour` of its policy), the price of a million tokens in the policy's currency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pooling_operator.api.clock import rfc3339
from pooling_operator.vllm.metrics import PROMPT_TOKENS, SUCCESS

DEFAULT_WINDOW_SECONDS = 3600  # one hour: the window status.cost reports (VPO_COST_WINDOW_SECONDS)
TOKENS = "promptTokens"
INPUTS = "inputs"


@dataclass(frozen=True)
class Held:
    """GPUs a service held over time: ``points`` are (wall seconds, GPUs held from then on), oldest first;
    ``since`` is when the record begins (before it nothing is known; -inf: nothing was held before the first
    point, the service did not exist)."""

    since: float
    points: tuple[tuple[float, float], ...] = ()


def start(now: float, gpus: float, created: float | None, period: float) -> Held:
    """The record of a service first read at ``now`` holding ``gpus``. A service created within two periods of its
    first reading held nothing before it existed: its record begins at its creation (the reading's GPUs from
    then, to within those periods)."""
    if created is not None and 0.0 <= now - created <= 2 * period:
        return Held(since=-math.inf, points=((created, gpus),))
    return Held(since=now, points=((now, gpus),))


def record(held: Held, now: float, gpus: float, window: float) -> Held:
    """One reading: a point where the count changed; points older than three windows are folded into one (the window
    read next begins at most two windows and a grace before now: its start stays inside the record)."""
    points = held.points
    if not points or points[-1][1] != gpus:
        points = (*points, (now, gpus))
    horizon, dropped = now - 3 * window, False
    while len(points) > 1 and points[1][0] <= horizon:
        points, dropped = points[1:], True
    return Held(since=max(held.since, points[0][0]) if dropped else held.since, points=points)


def grace(window: float) -> float:
    """Seconds after a window's end before it is read: the pods' last scrapes of it reach Prometheus (60 s, a
    quarter of a shorter window)."""
    return min(60.0, window / 4)


def window_end(now: float, window: float) -> float:
    """The end of the last whole window before ``now`` (windows are aligned to the epoch)."""
    return math.floor(now / window) * window


def gpu_seconds(held: Held, begin: float, end: float) -> float | None:
    """The integral of the GPUs held over [begin, end); None when the record begins after ``begin``."""
    if held.since > begin:
        return None
    total = 0.0
    for i, (t, gpus) in enumerate(held.points):
        until = held.points[i + 1][0] if i + 1 < len(held.points) else end
        lo, hi = max(t, begin), min(until, end)
        if hi > lo:
            total += gpus * (hi - lo)
    return total


def cost_queries(matchers: str, window: float, end: float) -> dict[str, str]:
    """PromQL for the tokens and inputs a service's pods served in the window ending at ``end`` (the `@`
    modifier reads it at the window's end whenever the query runs)."""
    w, at = f"{int(window)}s", f"{end:.0f}"
    return {
        TOKENS: f"sum(increase({PROMPT_TOKENS}{{{matchers}}}[{w}] @ {at}))",
        INPUTS: f"sum(increase({SUCCESS}{{{matchers}}}[{w}] @ {at}))",
    }


def price_per_gpu_hour(pricing: Any, product: str | None) -> tuple[Decimal, str] | None:
    """(price, currency) of one GPU-hour of ``product`` from a policy's `pricing`; None without a price for it."""
    if pricing is None or product is None:
        return None
    raw = (pricing.gpu_hour or {}).get(product)
    if raw is None:
        return None
    try:
        return Decimal(str(raw)), pricing.currency
    except InvalidOperation:
        return None


def _figure(x: float) -> float:
    """Four significant digits: status figures that do not wiggle in the last place."""
    return float(f"{x:.4g}")


def cost_status(window: float, end: float, gpu_s: float, tokens: float | None, inputs: float | None,
                price: tuple[Decimal, str] | None) -> dict[str, Any]:  # fmt: skip
    """status.cost for one window. Counters read as their increase (Prometheus extrapolates to the window's
    edges), rounded to whole tokens and inputs; a ratio only where its divisor is above zero."""
    out: dict[str, Any] = {"window": f"{int(window)}s", "windowEnd": rfc3339(datetime.fromtimestamp(end, UTC)), "gpuSeconds": _figure(gpu_s)}
    t = round(tokens) if tokens is not None else None
    n = round(inputs) if inputs is not None else None
    if t is not None:
        out["promptTokens"] = t
    if n is not None:
        out["inputs"] = n
    if t:
        out["gpuSecondsPerMillionTokens"] = _figure(gpu_s / (t / 1e6))
    if n:
        out["gpuSecondsPerMillionInputs"] = _figure(gpu_s / (n / 1e6))
    if t and price is not None:
        per_hour, currency = price
        out["pricePerMillionTokens"] = _figure(float(per_hour) * gpu_s / 3600 / (t / 1e6))
        out["currency"] = currency
    return out
