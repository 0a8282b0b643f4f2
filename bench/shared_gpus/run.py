"""Sixteen small models in one namespace: each replica on a whole GPU, against time-sliced shares of the GPUs, with
the operator's autoscaler on every service, through the simulator's co-tenants (autoscaling/simulator/cotenants.py).

Not part of the test suite. A namespace is 16 services, each with a trace of bench/autoscaling/families.py
(the family of service i of namespace n is FAMILIES[(16 n + i) % 7]), scaled so that its peak is 3-40 % of one
replica's capacity, drawn per service: small models that a whole GPU mostly idles under. The service model is
the MiniLM fit; one replica's capacity stands for one device's, so co-tenants busy at once share that. Layouts:

    whole        every replica holds a GPU of its own (`resources.gpu.count: 1`): today's default
    share-16Gi   a 16Gi time-sliced share of an H100 (4 to a device), busy co-tenants sharing its time
    share-8Gi    8Gi (9 to a device)
    share-4Gi    4Gi (19 to a device)
    share-4Gi-free  4Gi with no contention (what a model without throughput sharing would claim)

Per layout: SLO-minutes missed (all services' minutes whose p99 missed 500 ms), GPU-minutes as chargeback counts
them (pod-minutes x the share's fraction), and device-minutes (minutes each device held a pod: what the cluster
pays for). It exits 1 when the goal is missed, over all namespaces together: share-16Gi's device-minutes <= 0.6 x
whole's with SLO-minutes missed <= whole's + 5 % of the service-minutes. The denser layouts are reported, not
judged: memory decides how many fit a device, not how much of its time each needs (their SLO figures are that
price). The goal was set on namespaces 0-1; the report uses 100-109, run once.

    .venv/bin/python bench/shared_gpus/run.py --seeds 0-1                     # development
    .venv/bin/python bench/shared_gpus/run.py --seeds 100-109 --out bench/results/shared_gpus.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(HERE.parent / "autoscaling")]

import families  # noqa: E402
from heldout import seeds_of  # noqa: E402

from pooling_operator.autoscaling.simulator.cotenants import Tenant, run_namespace  # noqa: E402
from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams  # noqa: E402
from pooling_operator.autoscaling.simulator.simulate import setup_for  # noqa: E402
from pooling_operator.autoscaling.simulator.trace import parse_trace  # noqa: E402
from pooling_operator.vllm.gpu_tables import PRODUCTS  # noqa: E402
from pooling_operator.vllm.validate import validate  # noqa: E402

SERVICES = 16
PRODUCT = "NVIDIA-H100-80GB-HBM3"
PEAK = (0.03, 0.40)  # each service's peak, in one replica's capacity
P99 = "500ms"
PARAMS = ServiceParams()
GiB = 2**30
LAYOUTS: dict[str, tuple[int | None, bool]] = {  # name -> (share in GiB or whole GPUs, contention)
    "whole": (None, False),
    "share-16Gi": (16, True),
    "share-8Gi": (8, True),
    "share-4Gi": (4, True),
    "share-4Gi-free": (4, False),
}
GOALS = {"share-16Gi": (0.6, 0.05)}  # device-minutes ratio to whole's, SLO-minutes over whole's as a share of the minutes


def service_doc(name: str, share_gib: int | None) -> Any:
    gpu: dict[str, Any] = {"count": 1} if share_gib is None else {"product": PRODUCT, "share": {"memory": f"{share_gib}Gi", "via": "timeSlicing"}}
    doc = {
        "apiVersion": "vllm-pooling.io/v1alpha1", "kind": "PoolingService", "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "model": {"name": "sentence-transformers/all-MiniLM-L6-v2", "revision": "c9745ed1d9f207416be6d2e6f8de32d1f16199bf",
                      "hints": {"architectures": ["BertModel"], "maxModelLen": 512, "numParameters": 22713216,
                                "numHiddenLayers": 6, "hiddenSize": 384, "numAttentionHeads": 12}},
            "task": "embed", "pooling": {"type": "MEAN", "normalize": True},
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "maxModelLen": 512, "maxNumBatchedTokens": 2048, "maxNumSeqs": 128},
            "resources": {"gpu": gpu},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "p99Latency": P99, "queueDepthPerReplica": 8},
        },
    }  # fmt: skip
    result = validate(doc)
    assert result.ok, [str(p) for p in result.errors]
    return result.resource


def small_trace(namespace: int, i: int) -> tuple[str, str, float]:
    """(family, CSV, peak in replicas' worth) of service i: a family's trace scaled to a small peak."""
    family = families.FAMILIES[(SERVICES * namespace + i) % len(families.FAMILIES)]
    generated = families.trace(family, 1000 * namespace + i, PARAMS.capacity_rps)
    peak = random.Random(f"shared-gpus:{namespace}:{i}").uniform(*PEAK)
    top = max(r.rate / PARAMS.capacity_rps(r.tokens) for r in generated.rows)
    factor = peak / top if top > 0 else 0.0
    lines = ["seconds,requests_per_second,mean_tokens"] + [f"{r.seconds:g},{r.rate * factor:.4f},{r.tokens:g}" for r in generated.rows]
    return family, "\n".join(lines) + "\n", peak


def one(job: tuple[int, str]) -> dict[str, Any]:
    """One namespace in one layout (in a worker process)."""
    namespace, layout = job
    share_gib, contention = LAYOUTS[layout]
    tenants = []
    for i in range(SERVICES):
        _, csv, _ = small_trace(namespace, i)
        resource = service_doc(f"svc-{i}", share_gib)
        setup = setup_for(resource, None, PARAMS, seed=1000 * namespace + i, initial_replicas=1)
        tenants.append(Tenant(f"svc-{i}", setup, parse_trace(csv), None if share_gib is None else share_gib * GiB))
    started = time.perf_counter()
    device = PRODUCTS[PRODUCT].mib * 2**20
    result = run_namespace(tenants, device, contention=contention)
    return {
        "namespace": namespace, "layout": layout, "seconds": round(time.perf_counter() - started, 1),
        "slo_minutes": result.slo_minutes_missed, "service_minutes": sum(len(r.minutes) for r in result.services.values()),
        "gpu_minutes": round(result.gpu_minutes, 2), "device_minutes": round(result.device_minutes, 2), "devices": result.devices,
        "max_replicas": max(r.max_replicas for r in result.services.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-1", help="namespaces, e.g. 0-3 or 100-109 (default 0-1)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", help="write every row and the summary as JSON here")
    args = ap.parse_args(argv)
    namespaces = seeds_of(args.seeds)
    jobs = [(n, layout) for n in namespaces for layout in LAYOUTS]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(one, jobs))
    print(f"{len(namespaces)} namespaces x {SERVICES} services x {len(LAYOUTS)} layouts, simulated in "
          f"{time.perf_counter() - started:.0f}s ({args.workers} workers)")
    total: dict[str, dict[str, float]] = {}
    for layout in LAYOUTS:
        mine = [r for r in rows if r["layout"] == layout]
        total[layout] = {k: sum(r[k] for r in mine) for k in ("slo_minutes", "service_minutes", "gpu_minutes", "device_minutes")}
        total[layout]["devices_max"] = max(r["devices"] for r in mine)
    whole = total["whole"]
    print(f"  {'layout':<15} {'SLO-min missed':>18} {'GPU-min (charged)':>18} {'device-min':>11} {'x whole':>8} {'devices (max)':>14}")
    for layout, t in total.items():
        print(f"  {layout:<15} {t['slo_minutes']:>8.0f}/{t['service_minutes']:<9.0f} {t['gpu_minutes']:>18.1f} "
              f"{t['device_minutes']:>11.1f} {t['device_minutes'] / whole['device_minutes']:>8.3f} {t['devices_max']:>14.0f}")
    failed = []
    for layout, (ratio, slo_share) in GOALS.items():
        t = total[layout]
        r = t["device_minutes"] / whole["device_minutes"]
        if r > ratio:
            failed.append(f"{layout}: device-minutes {r:.3f} x whole's, goal <= {ratio}")
        if t["slo_minutes"] > whole["slo_minutes"] + slo_share * t["service_minutes"]:
            failed.append(f"{layout}: {t['slo_minutes']:.0f} SLO-minutes missed, goal <= whole's {whole['slo_minutes']:.0f} "
                          f"+ {slo_share:.0%} of {t['service_minutes']:.0f}")
    for line in failed:
        print(f"GOAL MISSED: {line}")
    if not failed:
        print("every goal met")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "total": total, "failed": failed}, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
