"""A run drawn over time, for a platform team: the trace's demand, each policy's replicas (ready solid, asked
for dashed: the gap is replicas starting) and each policy's p99 per minute against the target, one panel each.
Pure: results in, the picture's bytes out (SVG or PNG); the command line writes them (cli.py). Needs
matplotlib (the `plot` extra); without it `render` raises PlotUnavailable with the line to install it."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from pooling_operator.autoscaling.simulator.simulate import Result
from pooling_operator.autoscaling.simulator.trace import Trace

FORMATS = ("svg", "png")
COLOURS = {"operator": "#1f77b4", "hpa-queue": "#ff7f0e", "keda": "#2ca02c", "oracle": "#7f7f7f"}


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _steps(trace: Trace) -> tuple[list[float], list[float]]:
    """The trace's rate as a step line: (times in minutes, requests/s)."""
    xs, ys = [], []
    for s in trace.segments:
        xs.append(s.start / 60)
        ys.append(s.rate)
    xs.append(trace.end / 60)
    ys.append(trace.segments[-1].rate if trace.segments else 0.0)
    return xs, ys


def render(results: Mapping[str, Result], trace: Trace, target: float, fmt: str = "svg", title: str = "") -> bytes:
    """The picture of `results` (policy -> Result, all on `trace`) in `fmt` (svg or png)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise PlotUnavailable("plotting needs matplotlib: pip install 'vllm-pooling-operator[plot]'") from exc

    fig, (demand, replicas, p99) = plt.subplots(3, 1, sharex=True, figsize=(12, 7.5), height_ratios=(1, 1.4, 1.2))
    try:
        xs, ys = _steps(trace)
        demand.step(xs, ys, where="post", color="black", linewidth=1.2)
        demand.set_ylabel("demand\nrequests/s")
        demand.set_ylim(bottom=0)
        for name, r in results.items():
            colour = COLOURS.get(name)
            times = [e.t / 60 for e in r.timeline]
            label = f"{name}: {r.slo_minutes_missed} SLO-min missed, {r.gpu_minutes:.0f} GPU-min"
            replicas.step(times, [e.ready for e in r.timeline], where="post", color=colour, linewidth=1.4, label=label)
            replicas.step(times, [e.replicas for e in r.timeline], where="post", color=colour, linewidth=0.9,
                          linestyle="--", alpha=0.8)
            minutes = [m.minute + 0.5 for m in r.minutes if m.p99 is not None]
            p99.plot(minutes, [m.p99 for m in r.minutes if m.p99 is not None], marker=".", markersize=3,
                     linewidth=1.0, color=colour, label=name)
        replicas.set_ylabel("replicas\nready (solid), asked (dashed)")
        replicas.set_ylim(bottom=0)
        replicas.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        p99.axhline(target, color="red", linewidth=1.0, linestyle=":", label=f"target {target:g}s")
        p99.set_yscale("log")
        p99.set_ylabel("p99 per minute\nseconds (log)")
        p99.set_xlabel("minutes")
        p99.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        if title:
            demand.set_title(title, fontsize=10)
        fig.tight_layout()
        out = io.BytesIO()
        extra: dict[str, Any] = {"metadata": {"Date": None}} if fmt == "svg" else {}  # svg: no date, same bytes
        fig.savefig(out, format=fmt, **extra)
        return out.getvalue()
    finally:
        plt.close(fig)


def format_of(path: str) -> str:
    """svg or png from a file name; anything else is an error naming both."""
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix not in FORMATS:
        raise ValueError(f"--plot {path}: the file name must end in .svg or .png")
    return suffix
