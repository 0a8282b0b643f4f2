"""The simulator's request trace: its CSV format and the Poisson arrivals it stands for. Pure: text in,
values out; randomness only from the `random.Random` passed in.

The CSV has the header `seconds,requests_per_second,mean_tokens`; each row holds from its `seconds` to the next
row's, the last row for `LAST_ROW_SECONDS`. Arrivals are a Poisson process at each row's rate; a request has
`mean_tokens` prompt tokens on average (the integers either side, in the proportion that keeps the mean).
"""

from __future__ import annotations

import bisect
import csv
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

HEADER = ("seconds", "requests_per_second", "mean_tokens")
LAST_ROW_SECONDS = 60.0


class InputError(ValueError):
    """Input the simulator refuses. The message is one line, fit to print as it is."""


@dataclass(frozen=True)
class Segment:
    start: float
    rate: float  # requests per second
    mean_tokens: float


@dataclass(frozen=True)
class Trace:
    segments: tuple[Segment, ...]
    end: float

    @classmethod
    def constant(cls, rate: float, mean_tokens: float, seconds: float) -> Trace:
        return cls((Segment(0.0, rate, mean_tokens),), seconds)

    def overlapping(self, start: float, end: float) -> list[Segment]:
        """The segments that hold at some time in [start, end)."""
        starts = [s.start for s in self.segments]
        first = max(0, bisect.bisect_right(starts, start) - 1)
        return [s for s in self.segments[first:] if s.start < end and s.start < self.end]

    def at(self, t: float) -> Segment | None:
        """The segment holding at t; None outside the trace."""
        if t < 0 or t >= self.end:
            return None
        return self.segments[bisect.bisect_right([s.start for s in self.segments], t) - 1]


def parse_trace(text: str) -> Trace:
    """The trace of a CSV text; InputError naming the line on anything else."""
    rows = [(n, row) for n, row in enumerate(csv.reader(text.splitlines()), start=1) if any(c.strip() for c in row)]
    if not rows or tuple(c.strip() for c in rows[0][1]) != HEADER:
        got = ",".join(rows[0][1]) if rows else "an empty file"
        raise InputError(f"the trace must start with the header {','.join(HEADER)}, got {got}")
    segments: list[Segment] = []
    for n, row in rows[1:]:
        if len(row) != len(HEADER):
            raise InputError(f"line {n}: expected {len(HEADER)} values ({','.join(HEADER)}), got {len(row)}")
        try:
            seconds, rate, tokens = (float(c) for c in row)
        except ValueError:
            raise InputError(f"line {n}: expected numbers, got {','.join(row)}") from None
        if not all(math.isfinite(x) for x in (seconds, rate, tokens)):
            raise InputError(f"line {n}: expected finite numbers, got {','.join(row)}")
        if seconds < 0:
            raise InputError(f"line {n}: seconds must not be negative, got {row[0].strip()}")
        if segments and seconds <= segments[-1].start:
            raise InputError(f"line {n}: seconds must increase from row to row, got {row[0].strip()} after {segments[-1].start:g}")
        if not segments and seconds != 0:
            raise InputError(f"line {n}: the first row must start at 0 seconds, got {row[0].strip()}")
        if rate < 0:
            raise InputError(f"line {n}: requests_per_second must not be negative, got {row[1].strip()}")
        if tokens < 1:
            raise InputError(f"line {n}: mean_tokens must be at least 1, got {row[2].strip()}")
        segments.append(Segment(seconds, rate, tokens))
    if not segments:
        raise InputError("the trace has a header but no rows")
    return Trace(tuple(segments), segments[-1].start + LAST_ROW_SECONDS)


def arrivals(trace: Trace, rng: random.Random) -> Iterator[tuple[float, int]]:
    """(time, prompt tokens) of every request, in time order. The process is memoryless, so each row starts
    afresh at its start."""
    segments = trace.segments
    for i, seg in enumerate(segments):
        end = min(trace.end, segments[i + 1].start if i + 1 < len(segments) else trace.end)
        if seg.rate <= 0:
            continue
        whole = int(seg.mean_tokens)
        frac = seg.mean_tokens - whole
        t = seg.start
        while True:
            t += rng.expovariate(seg.rate)
            if t >= end:
                break
            yield t, whole + (1 if frac and rng.random() < frac else 0)
