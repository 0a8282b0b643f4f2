"""What a restart's list pages cost to parse, with and without CPython's cyclic collector (runtime/heap.py).

One page of 500 Deployments as the API server lists them (the bench's rendered Deployments with the metadata and
status the API server adds), parsed alone (median of 15), then 60 such pages parsed and kept, as the stores keep
them, with the collector on and off. orjson is timed beside json when it is installed (it is not a dependency).

    .venv/bin/python bench/reconcile/parse_cost.py     # ~15 s
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run  # the bench's own services and render

PAGE = 500
KEPT = 60
STAMP = "2026-12-06T04:00:00Z"


def page() -> bytes:
    deployments = [o for o in run.rendered_children(run.services(PAGE, "bench")) if o["kind"] == "Deployment"]
    for i, d in enumerate(deployments):
        d["metadata"].update(uid=f"0b6c2d8e-1f0a-4c55-9d7a-{i:012d}", resourceVersion=str(123456 + i), generation=1, creationTimestamp=STAMP,
                             managedFields=[{"manager": "vllm-pooling-operator", "operation": "Apply", "apiVersion": "apps/v1", "time": STAMP,
                                             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}}])  # fmt: skip
        d["status"] = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                       "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": STAMP, "lastTransitionTime": STAMP,
                                       "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."}]}  # fmt: skip
    return json.dumps({"kind": "DeploymentList", "apiVersion": "apps/v1", "metadata": {"resourceVersion": "1"}, "items": deployments}).encode()


def kept(loads: Callable[[bytes], Any], data: bytes, collector: bool) -> float:
    keep: list[Any] = []
    gc.collect()
    gc.enable() if collector else gc.disable()
    try:
        started = time.perf_counter()
        for _ in range(KEPT):
            keep.append(loads(data)["items"])
        return time.perf_counter() - started
    finally:
        gc.enable()
        del keep
        gc.collect()


def main() -> int:
    data = page()
    print(f"one page: {PAGE} Deployments, {len(data) / 1e6:.2f} MB of JSON")
    parsers: list[tuple[str, Callable[[bytes], Any]]] = [("json", json.loads)]
    try:
        import orjson

        parsers.append(("orjson", orjson.loads))
    except ImportError:
        print("(orjson not installed: json only)")
    for name, loads in parsers:
        one = statistics.median(_timed(loads, data) for _ in range(15))
        on, off = kept(loads, data, True), kept(loads, data, False)
        print(f"{name}: one page {one * 1000:.1f} ms; {KEPT} pages kept: collector on {on:.2f} s, off {off:.2f} s ({on / off:.1f}x)")
    return 0


def _timed(loads: Callable[[bytes], Any], data: bytes) -> float:
    started = time.perf_counter()
    loads(data)
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())
