"""What a new replica costs, in the decision: a replica added now serves only after the service's start-up
(`status.startup`), and one removed now is back only after it. Pure: numbers in, numbers out.

- `forecast`: the arrival rate one start-up ahead, when the recent arrivals rise steadily (a least-squares
  line over the last start-up, at least `MIN_TREND_SECONDS`): scale-up then starts early enough for the
  replicas to be ready when the demand is there. A rise must be clear (the line explains `MIN_FIT` of the
  samples' variance, and rises by `MIN_RISE` of the rate over the fit) and the forecast is capped at
  `MAX_AHEAD` times today's rate, so a flash crowd's first jump is not extrapolated into a wall.
- `quick_down`: with the default scale-down window, a fall is followed after one start-up (not the default
  300 s) when it is clear: every recommendation of that start-up is at least `CLEAR_DROP` below the current
  count; the arrivals of that start-up are below the level of the start-up before (its lower quartile, so a
  burst shorter than three quarters of it is no level) by as much, and by more than `NOISE_SIGMAS` times
  their own spread (noise around a level is not a fall); and demand did not rise through that fall's middle
  more than once lately, in the recommendations kept or the arrivals remembered (bursts that come and go are
  expected back). A small fall, or one not yet sustained for a start-up, keeps the default window and step.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

MIN_TREND_SECONDS = 120.0
MAX_TREND_SECONDS = 300.0
MIN_TREND_SAMPLES = 4
MIN_RISE = 0.10  # of the current rate, over the fitted span
MIN_FIT = 0.7  # R² of the line over the samples: below it the rise is noise
MAX_AHEAD = 2.0
CLEAR_DROP = 0.25
NOISE_SIGMAS = 3.0  # a clear fall is larger than this many standard deviations of the arrivals around it
MEMORY_SECONDS = 900.0  # arrival samples kept


def remember(samples: Sequence[tuple[float, float]], now: float, rate: float) -> tuple[tuple[float, float], ...]:
    """The arrival samples with (now, rate) added and those older than MEMORY_SECONDS dropped."""
    return (*((t, r) for t, r in samples if t > now - MEMORY_SECONDS), (now, rate))


def forecast(samples: Sequence[tuple[float, float]], now: float, rate: float, startup: float | None) -> float:
    """The arrival rate expected one start-up from now (never below `rate`)."""
    if not startup or startup <= 0:
        return rate
    span = min(MAX_TREND_SECONDS, max(MIN_TREND_SECONDS, startup))
    recent = [(t, r) for t, r in samples if t >= now - span]
    if len(recent) < MIN_TREND_SAMPLES:
        return rate
    n = len(recent)
    mean_t = sum(t for t, _ in recent) / n
    mean_r = sum(r for _, r in recent) / n
    var = sum((t - mean_t) ** 2 for t, _ in recent)
    if var <= 0:
        return rate
    slope = sum((t - mean_t) * (r - mean_r) for t, r in recent) / var
    total = sum((r - mean_r) ** 2 for _, r in recent)
    explained = slope * slope * var / total if total > 0 else 0.0  # R² of the line: a trend, not noise
    fitted_span = recent[-1][0] - recent[0][0]
    if slope <= 0 or explained < MIN_FIT or slope * fitted_span < MIN_RISE * max(rate, 1e-9):
        return rate
    return min(rate * MAX_AHEAD, rate + slope * startup)


def _level(arrivals: Sequence[tuple[float, float]], since: float, until: float) -> float | None:
    """The level the arrivals held in (since, until]: their lower quartile, so a burst shorter than three
    quarters of that span is not a level, and a window that holds the fall itself is judged by what it held."""
    rates = [r for t, r in arrivals if since < t <= until]
    if len(rates) < 2:
        return None
    return statistics.quantiles(rates, n=4, method="inclusive")[0]


def _fell_clearly(arrivals: Sequence[tuple[float, float]], now: float, window: float) -> bool:
    """The arrivals of the last window are below the level of the window before by CLEAR_DROP and by more than
    NOISE_SIGMAS times their own spread: a level that fell and stayed, not noise around one."""
    now_part = [r for t, r in arrivals if t > now - window]
    level = _level(arrivals, now - 2 * window, now - window)
    if len(now_part) < 2 or level is None:
        return False
    b = statistics.fmean(now_part)
    return b <= (1 - CLEAR_DROP) * level and level - b > NOISE_SIGMAS * statistics.stdev(now_part)


def quick_down(history: Sequence[tuple[float, int]], now: float, current: int, startup: float | None,
               floor: float | None, arrivals: Sequence[tuple[float, float]] = ()) -> int | None:
    """The count a clear fall allows now, or None (the default window and step apply). `history` is the raw
    recommendations, (time, replicas), newest last; `floor` the policy's minScaleDownStabilizationSeconds;
    `arrivals` the recent arrival rates (remember)."""
    if not startup or current <= 1:
        return None
    window = max(startup, floor or 0.0)
    recent = [r for t, r in history if t >= now - window]
    covered = any(t <= now - window + 1e-9 for t, _ in history)  # the history reaches back a whole window
    if not recent or not covered:
        return None
    most = max(recent)
    low = math.floor(current * (1 - CLEAR_DROP))
    if most > low:
        return None
    if not _fell_clearly(arrivals, now, window) or _bursts(history, low, arrivals, now, window):
        return None
    return most


def _bursts(history: Sequence[tuple[float, int]], low: int, arrivals: Sequence[tuple[float, float]], now: float,
            window: float) -> bool:
    """Demand came and went more than once lately (in the recommendations kept, or in the arrivals remembered,
    through the middle of the level before the fall and the level now): bursts, expected back."""
    if sum(1 for (_, a), (_, b) in itertools.pairwise(history) if a <= low < b) > 1:
        return True
    level = _level(arrivals, now - 2 * window, now - window) or 0.0
    middle = (level + statistics.fmean(r for t, r in arrivals if t > now - window)) / 2
    rates = [r for _, r in arrivals]
    return sum(1 for a, b in itertools.pairwise(rates) if a <= middle < b) > 1
