"""What scale to zero saves, and what it costs (issue 47): traces with idle stretches, each through the operator's
decision with and without zero, KEDA with its wake trigger and without zero, and the clairvoyant oracle with and
without zero (it sees demand return a start-up ahead), for both models of the autoscaling benchmark.

The families (each generated from its seed; rates as multiples of one replica's capacity, like families.py):

    nights      two working sessions of 15-30 min at 0.3-2 replicas' worth, a night of 1-3 h idle between them
    sporadic    3-6 short sessions of 2-8 min at 0.2-1.5 replicas' worth, idle gaps of 10-60 min between them
    weekend     idle but for single requests now and then (one every 5-30 min on average) over 2-4 h

Zero is decided by the operator's own autoscaling/zero.py (the simulator feeds it the front's requests, held or in
flight, as the wake query's value), with the default idle time: ten start-ups, at least 300 s. A request that
arrives at zero waits at the front for a replica, and that wait counts in its latency and the SLO-minutes.

    .venv/bin/python bench/autoscaling/zero.py --seeds 0-7 --out bench/results/scale-to-zero.json

Prints per model and family the medians of GPU-minutes and SLO-minutes for every policy, GPU-minutes saved by
zero (ours with zero against ours without), the SLO-minutes it cost, and ours-with-zero against the oracle with
zero. A benchmark: it never gates the suite.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "operator"))

import families  # noqa: E402
import heldout  # noqa: E402

from pooling_operator.autoscaling.simulator.simulate import setup_for, simulate  # noqa: E402
from pooling_operator.autoscaling.simulator.trace import parse_trace  # noqa: E402
from pooling_operator.vllm.validate import validate  # noqa: E402

WAKE_QUERY = 'sum(interceptor_request_concurrency{route_name="bench",route_namespace="bench"})'
FAMILIES = ("nights", "sporadic", "weekend")
ROW = 30.0


def _rows(spans: list[tuple[float, float, float]], end: float, tokens: float) -> str:
    """CSV rows every ROW seconds: the rate of the span covering each, else 0."""
    lines = ["seconds,requests_per_second,mean_tokens"]
    for i in range(int(end // ROW)):
        t = i * ROW
        rate = next((r for s, e, r in spans if s <= t < e), 0.0)
        lines.append(f"{t:g},{rate:.4f},{tokens:g}")
    return "\n".join(lines) + "\n"


def trace_csv(family: str, seed: int, capacity: float) -> tuple[str, dict[str, float]]:
    rng = random.Random(f"zero:{family}:{seed}")
    spans: list[tuple[float, float, float]] = []
    if family == "nights":
        first, night, second = rng.uniform(15, 30) * 60, rng.uniform(60, 180) * 60, rng.uniform(15, 30) * 60
        level = rng.uniform(0.3, 2.0)
        spans = [(0.0, first, capacity * level), (first + night, first + night + second, capacity * level)]
        end, params = first + night + second + 120, {"night_min": night / 60, "replicas_worth": level}
    elif family == "sporadic":
        t = 0.0
        for _ in range(rng.randint(3, 6)):
            length = rng.uniform(2, 8) * 60
            spans.append((t, t + length, capacity * rng.uniform(0.2, 1.5)))
            t += length + rng.uniform(10, 60) * 60
        end, params = t, {"sessions": float(len(spans))}
    else:  # weekend: single requests now and then, as a rate of one request per interval
        every = rng.uniform(5, 30) * 60
        end = rng.uniform(2, 4) * 3600
        spans = [(0.0, end, 1.0 / every)]
        params = {"minutes_between": every / 60}
    return _rows(spans, end, families.SHORT_TOKENS), {k: round(v, 2) for k, v in params.items()}


def resource(model: heldout.Model, zero: bool) -> Any:
    doc = heldout.service(model).model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["autoscaling"]["minReplicas"] = 0 if zero else 1
    if zero:
        doc["spec"]["autoscaling"]["wake"] = {"prometheus": {"query": WAKE_QUERY}}
    result = validate(doc)
    assert result.ok, [str(p) for p in result.errors]
    return result.resource


def one(job: tuple[heldout.Model, str, int]) -> dict[str, Any]:
    model, family, seed = job
    text, params = trace_csv(family, seed, model.params.capacity_rps(families.SHORT_TOKENS))
    trace = parse_trace(text)
    started = time.perf_counter()
    out: dict[str, Any] = {}
    for zero in (True, False):
        res = resource(model, zero)
        setup = setup_for(res, None, model.params, seed=seed)
        for name, r in simulate(res, None, trace, setup, ["keda", "oracle"]).items():
            out[f"{name}{'-zero' if zero else ''}"] = {"gpu_minutes": round(r.gpu_minutes, 2), "slo_minutes": r.slo_minutes_missed,
                                                       "wakes": wakes(r.timeline)}
    return {"model": model.name, "family": family, "seed": seed, "minutes": round(trace.end / 60, 1), "params": params,
            "seconds": round(time.perf_counter() - started, 1), "policies": out}


def wakes(timeline: Any) -> int:
    """How many times the service came back from zero replicas."""
    counts = [e.replicas for e in timeline]
    return sum(1 for a, b in itertools.pairwise(counts) if a == 0 and b > 0)


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


POLICIES = ("operator-zero", "operator", "keda-zero", "keda", "oracle-zero", "oracle")


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        print(f"\n{model}: median GPU-minutes / SLO-minutes per trace")
        print(f"{'family':<10} {'n':>3} " + " ".join(f"{p:>15}" for p in POLICIES)
              + "  saved by zero  SLO cost  wakes  cost/wake  zero/oracle-zero")
        for family in [*FAMILIES, "all"]:
            mine = [r for r in rows if r["model"] == model and (family == "all" or r["family"] == family)]
            if not mine:
                continue
            med = {p: (median([r["policies"][p]["gpu_minutes"] for r in mine]), median([r["policies"][p]["slo_minutes"] for r in mine]))
                   for p in POLICIES}
            saved = median([1 - r["policies"]["operator-zero"]["gpu_minutes"] / r["policies"]["operator"]["gpu_minutes"] for r in mine])
            cost = median([r["policies"]["operator-zero"]["slo_minutes"] - r["policies"]["operator"]["slo_minutes"] for r in mine])
            woke = median([r["policies"]["operator-zero"].get("wakes", 0) for r in mine])
            per_wake = median([(r["policies"]["operator-zero"]["slo_minutes"] - r["policies"]["operator"]["slo_minutes"])
                               / max(1, r["policies"]["operator-zero"].get("wakes", 0)) for r in mine])
            ratio = median([r["policies"]["operator-zero"]["gpu_minutes"] / r["policies"]["oracle-zero"]["gpu_minutes"]
                            if r["policies"]["oracle-zero"]["gpu_minutes"] else math.inf for r in mine])
            print(f"{family:<10} {len(mine):>3} " + " ".join(f"{g:>8.1f} / {s:>4g}" for g, s in med.values())
                  + f"  {saved:>12.0%}  {cost:>+8g}  {woke:>5g}  {per_wake:>+9.2f}  {ratio:>16.2f}")
            summary[f"{model}/{family}"] = {"n": len(mine), "median": {p: {"gpu_minutes": g, "slo_minutes": s} for p, (g, s) in med.items()},
                                            "saved_by_zero": round(saved, 3), "slo_cost": cost, "wakes": woke,
                                            "slo_cost_per_wake": round(per_wake, 2), "zero_over_oracle_zero": round(ratio, 2)}
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-7", help="seeds per family and model, e.g. 0-7")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="write every trace's figures and the summary (JSON)")
    args = p.parse_args(argv)
    seeds = heldout.seeds_of(args.seeds)
    jobs = [(m, f, s) for m in heldout.MODELS.values() for f in FAMILIES for s in seeds]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(one, jobs))
    print(f"{len(rows)} traces, {time.perf_counter() - started:.0f} s on {args.workers} workers")
    summary = report(rows)
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(["bench/autoscaling/zero.py", *(argv or sys.argv[1:])]),
                                        "summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
