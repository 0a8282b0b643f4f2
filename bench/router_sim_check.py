"""The simulator's routing held to the real run of vllm-router (issue 69): does `--routing power-of-two` predict what
the real router did to two real MiniLM replicas, one of them slowed?

The real run is bench/results/router_real.json (bench/router_real.py: open loop, Poisson arrivals, a quarter of
them long inputs; a Service's even split, then vllm-router's power_of_two). Here the same arrival plan (the same
generator and seed, the prompt tokens of each text) is replayed through the simulator's own routing
(`simulator/routing.py: fixed_fleet`, `pick`) over two replicas of the service model.

The two replicas in the real run shared two cores with the router, the client and a busy loop, far slower than the
service model's one core each. So the model is **calibrated on the even arm only**: a slowdown `k` of both
replicas, chosen on a grid to match the even arm's p50, mean and p99 (median over `--seeds` runs of the model's
step jitter), with the slowed replica `--slow` times slower still (2: the busy loop at the same priority takes
half of its core; the even arm cannot tell this factor, since its split does not depend on it). The power-of-two
arm is then **predicted**, not fitted: the slowed replica's share of the requests and the change of p50, mean and
p99 against even routing, as the median and range over the seeds, beside what the real router measured; and the
same for other `--slow` factors, to show how much the prediction rests on it.

    .venv/bin/python bench/router_sim_check.py [--seeds 20] [--json bench/results/router_sim_check.json]

A benchmark: prints figures, never gates the suite. Runs in about 2 s on one core.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "operator"))

from bench.router_real import arrival_plan  # noqa: E402
from pooling_operator.autoscaling.simulator.routing import Routing, fixed_fleet  # noqa: E402
from pooling_operator.autoscaling.simulator.servicemodel import Replica, ServiceParams  # noqa: E402

REAL = REPO / "bench" / "results" / "router_real.json"
ARMS: dict[str, Routing] = {"Service (even)": "even", "router power_of_two": "power-of-two"}
K_GRID = [round(2 ** (i / 4), 3) for i in range(0, 29)]  # 1 .. 128, four steps an octave
S_GRID = [1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0]


def tokens(text: str) -> int:
    """MiniLM's prompt tokens of a bench text: one a word (the bench's words are whole tokens) plus [CLS], [SEP]."""
    return len(text.split()) + 2


def run(plan: list[tuple[float, int]], routing: Routing, k: float, s: float, seed: int) -> dict[str, float]:
    params = ServiceParams()
    replicas = [Replica(params, seed=seed * 2 + i) for i in range(2)]
    replicas[0].slowdown, replicas[1].slowdown = k, k * s  # replica 1 is the slowed one, as in the real run
    took, latencies = fixed_fleet(replicas, routing, plan, seed)
    q = statistics.quantiles(latencies, n=100)
    return {"p50": q[49], "p99": q[98], "mean": statistics.fmean(latencies), "slowed_share": took[1] / sum(took)}


def median_over(plan: list[tuple[float, int]], routing: Routing, k: float, s: float, seeds: int) -> dict[str, list[float]]:
    rows = [run(plan, routing, k, s, seed) for seed in range(seeds)]
    return {key: sorted(r[key] for r in rows) for key in rows[0]}


def misfit(sim: dict[str, list[float]], real: dict[str, Any]) -> float:
    return sum(math.log(statistics.median(sim[key]) / real[key]) ** 2 for key in ("p50", "mean", "p99"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20, help="runs of the model's step jitter per point (default 20)")
    ap.add_argument("--slow", type=float, default=2.0, help="the slowed replica's extra slowdown (default 2: half a core)")
    ap.add_argument("--json", type=Path, help="write the fit and the prediction here")
    a = ap.parse_args()
    real = json.loads(REAL.read_text())
    args = real["args"]
    rows = {row["way"]: row for row in real["load"]}
    plan = [(t, tokens(text)) for t, text in arrival_plan(args["rate"], args["seconds"], args["long_share"], args["seed"])]
    even_real = rows["Service (even)"]
    print(f"real run ({REAL.relative_to(REPO)}): {len(plan)} requests at {args['rate']}/s, seed {args['seed']}")

    def fit(s: float) -> tuple[float, float]:
        return min((misfit(median_over(plan, "even", k, s, max(3, a.seeds // 4)), even_real), k) for k in K_GRID)

    sensitivity = {}
    for other in S_GRID:
        bad, k_other = fit(other)
        share = statistics.median(median_over(plan, "power-of-two", k_other, other, a.seeds)["slowed_share"])
        sensitivity[other] = {"k": k_other, "misfit": round(bad, 4), "slowed_share": round(share, 3)}
    s = a.slow
    bad, k = fit(s)
    even = median_over(plan, "even", k, s, a.seeds)
    two = median_over(plan, "power-of-two", k, s, a.seeds)
    print(f"fitted on the even arm: both replicas {k:g}x the service model's step, the slowed one {s:g}x more (misfit {bad:.3f})")

    def show(name: str, sim: dict[str, list[float]], measured: dict[str, Any]) -> None:
        share = measured["took"][1] / sum(measured["took"])
        print(f"{name:<22} real: slowed share {share:.0%}, p50 {measured['p50']:.3f} s, mean {measured['mean']:.3f} s, "
              f"p99 {measured['p99']:.3f} s")
        print(f"{'':<22} model: slowed share {statistics.median(sim['slowed_share']):.0%} "
              f"({min(sim['slowed_share']):.0%}-{max(sim['slowed_share']):.0%}), p50 {statistics.median(sim['p50']):.3f} s, "
              f"mean {statistics.median(sim['mean']):.3f} s, p99 {statistics.median(sim['p99']):.3f} s")

    show("Service (even)", even, even_real)
    show("router power_of_two", two, rows["router power_of_two"])
    changes: dict[str, Any] = {}
    print("power_of_two against even (the prediction; the model's range over the seeds):")
    for key in ("p50", "mean", "p99"):
        measured = rows["router power_of_two"][key] / even_real[key] - 1
        per_seed = sorted(t / e - 1 for t, e in zip(two[key], even[key], strict=True))
        model = statistics.median(per_seed)
        changes[key] = {"real": round(measured, 3), "model": round(model, 3), "model_range": [round(per_seed[0], 3), round(per_seed[-1], 3)]}
        print(f"  {key:<5} real {measured:+.0%}   model {model:+.0%} ({per_seed[0]:+.0%} to {per_seed[-1]:+.0%})")
    real_share = rows["router power_of_two"]["took"][1] / sum(rows["router power_of_two"]["took"])
    changes["slowed_share"] = {"real": round(real_share, 3), "model": round(statistics.median(two["slowed_share"]), 3),
                               "model_range": [round(two["slowed_share"][0], 3), round(two["slowed_share"][-1], 3)]}
    print("the predicted share of the slowed replica under power_of_two for other --slow factors (each with k refitted):")
    for other, row in sensitivity.items():
        print(f"  --slow {other:<5g} k {row['k']:<7g} even-arm misfit {row['misfit']:.3f}  slowed share {row['slowed_share']:.0%}")
    if a.json:
        a.json.write_text(json.dumps({"real": str(REAL.relative_to(REPO)), "seeds": a.seeds, "fit": {"k": k, "slow": s, "misfit": round(bad, 4)},
                                      "sensitivity": {f"{x:g}": v for x, v in sensitivity.items()},
                                      "even": {key: statistics.median(v) for key, v in even.items()},
                                      "power_of_two": {key: statistics.median(v) for key, v in two.items()},
                                      "prediction": changes}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
