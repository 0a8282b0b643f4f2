"""Autoscaling benchmark: ours against hpa-queue, keda and the oracle on three traces, with the simulator.

Not part of the test suite. For each trace of this folder (step, diurnal, spikes) it runs
`pooling-operator simulate service.yaml --trace T --compare hpa-queue,keda,oracle` in-process and prints, per
policy, SLO-minutes missed and GPU-minutes; then whether ours is Pareto-at-least-as-good as each baseline
(no more SLO-minutes missed and no more GPU-minutes) and within 1.3x the oracle's GPU-minutes.

    .venv/bin/python bench/autoscaling/run.py [--seed N] [--trace step|diurnal|spikes ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "operator")]

from pooling_operator.autoscaling.simulator.cli import read_service  # noqa: E402
from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams  # noqa: E402
from pooling_operator.autoscaling.simulator.simulate import setup_for, simulate, to_json  # noqa: E402
from pooling_operator.autoscaling.simulator.trace import parse_trace  # noqa: E402

TRACES = ("step", "diurnal", "spikes")
BASELINES = ("hpa-queue", "keda")
ORACLE_BUDGET = 1.3  # ours may use at most this many times the oracle's GPU-minutes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", action="append", choices=TRACES, help="only this trace (repeatable)")
    ap.add_argument("--service", default=str(HERE / "service.yaml"))
    ap.add_argument("--json", action="store_true", help="print the simulator's JSON per trace instead")
    args = ap.parse_args(argv)
    resource, policy = read_service(args.service)
    setup = setup_for(resource, policy, ServiceParams(), seed=args.seed)
    verdicts = []
    for name in args.trace or TRACES:
        trace = parse_trace((HERE / f"{name}.csv").read_text(encoding="utf-8"))
        started = time.perf_counter()
        results = simulate(resource, policy, trace, setup, [*BASELINES, "oracle"])
        seconds = time.perf_counter() - started
        if args.json:
            print(json.dumps({"trace": name, **to_json(results)}))
            continue
        ours, oracle = results["operator"], results["oracle"]
        print(f"{name} ({trace.end / 60:.0f} min, {ours.completed} requests, p99 target {setup.p99_target:g}s; "
              f"simulated in {seconds:.1f}s)")
        print(f"  {'policy':<10} {'SLO-min missed':>14} {'GPU-min':>9} {'x oracle':>9} {'max replicas':>13}")
        for policy_name, r in results.items():
            ratio = r.gpu_minutes / oracle.gpu_minutes if oracle.gpu_minutes else float("nan")
            print(f"  {policy_name:<10} {r.slo_minutes_missed:>10}/{len(r.minutes):<3} {r.gpu_minutes:>9.1f} "
                  f"{ratio:>9.2f} {r.max_replicas:>13}")
        for base in BASELINES:
            b = results[base]
            ok = ours.slo_minutes_missed <= b.slo_minutes_missed and ours.gpu_minutes <= b.gpu_minutes
            verdicts.append(ok)
            print(f"  ours vs {base}: {'Pareto at least as good' if ok else 'NOT Pareto-better'} "
                  f"(SLO-min {ours.slo_minutes_missed} vs {b.slo_minutes_missed}, GPU-min {ours.gpu_minutes:.1f} vs {b.gpu_minutes:.1f})")
        within = ours.gpu_minutes <= ORACLE_BUDGET * oracle.gpu_minutes
        verdicts.append(within)
        print(f"  ours vs oracle: {ours.gpu_minutes / oracle.gpu_minutes:.2f}x its GPU-minutes "
              f"({'within' if within else 'OVER'} {ORACLE_BUDGET}x), SLO-min {ours.slo_minutes_missed} vs {oracle.slo_minutes_missed}")
        print()
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
