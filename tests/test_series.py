"""A resource's status as Prometheus series (status/series.py) and their one holder (runtime/series.py): what the
chart's alert rules and dashboards read (docs/alerts.md)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from pooling_operator.runtime.series import Series
from pooling_operator.status.series import BY_NAME, FAMILIES, series
from tests.factories import model_cache, pooling, pooling_job


def cond(type_: str, status: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": "R", "message": "m"}


AUTOSCALED = pooling({"autoscaling": {"minReplicas": 1, "maxReplicas": 8, "p99Latency": "250ms"}}, name="a")
AUTOSCALED["status"] = {
    "conditions": [cond("Ready", "True"), cond("MetricsAvailable", "False"), cond("ScalingLimited", "True"),
                   cond("NotAType", "True")],
    "readyReplicas": 3, "autoscaling": {"desiredReplicas": 8, "p99LatencySeconds": 0.4, "queueDepth": 3.5, "arrivalRate": 41.0,
                                        "capacityPerReplica": 58.0},
    "startup": {"lastSeconds": 190, "typicalSeconds": 80, "samples": 4},
}  # fmt: skip
FIXED = pooling({"replicas": 2}, name="f")
FIXED["status"] = {"readyReplicas": 1}
JOB = pooling_job({"output": {"storageBudget": "1Gi"}}, name="j")
JOB["status"] = {"conditions": [cond("Succeeded", "False")], "samples": {"done": 10, "failed": 2}, "dataset": {"lines": 40},
                 "bytesWritten": 1024, "storage": {"estimatedBytes": 4096}}  # fmt: skip
CACHE = model_cache(name="c")
CACHE["status"] = {"conditions": [cond("Failed", "True")]}


@pytest.mark.parametrize(("body", "want"), [
    (AUTOSCALED, {
        "vllm_pooling_operator_condition": {"Ready": 1.0, "MetricsAvailable": 0.0, "ScalingLimited": 1.0},
        "vllm_pooling_operator_replicas": {"desired": 8.0, "ready": 3.0, "min": 1.0, "max": 8.0},
        "vllm_pooling_operator_p99_latency_seconds": {"observed": 0.4, "target": 0.25},
        "vllm_pooling_operator_autoscaler_observed": {"queue_depth": 3.5, "arrival_rate": 41.0, "capacity_per_replica": 58.0},
        "vllm_pooling_operator_startup_seconds": {"last": 190.0, "typical": 80.0}}),
    (FIXED, {"vllm_pooling_operator_replicas": {"desired": 2.0, "ready": 1.0}}),
    (JOB, {"vllm_pooling_operator_condition": {"Succeeded": 0.0},
           "vllm_pooling_operator_job_samples": {"done": 10.0, "failed": 2.0, "total": 40.0},
           "vllm_pooling_operator_job_bytes": {"written": 1024.0, "estimated": 4096.0, "budget": 2.0**30}}),
    (CACHE, {"vllm_pooling_operator_condition": {"Failed": 1.0}}),
    # what a refused spec may hold: nothing readable is left out, nothing raises
    ({"kind": "PoolingService", "spec": {"autoscaling": {"maxReplicas": "eight", "p99Latency": "soon"}, "replicas": True},
      "status": {"conditions": ["x", {"type": "Ready"}], "readyReplicas": None, "autoscaling": []}},
     {"vllm_pooling_operator_condition": {"Ready": 0.0}, "vllm_pooling_operator_replicas": {"min": 1.0}}),
    ({"kind": "PoolingJob", "spec": "nonsense", "status": "nonsense"}, {}),
])  # fmt: skip
def test_status_to_series(body: dict[str, Any], want: dict[str, dict[str, float]]) -> None:
    got = series(body)
    assert got == want
    for family, values in got.items():  # every label value is one the family declares
        assert set(values) <= set(BY_NAME[family].values)


def sample(family: str, key: tuple[str, str, str], value: str) -> float | None:
    labels = dict(zip(("kind", "namespace", "name"), key, strict=True)) | {BY_NAME[family].label: value}
    return REGISTRY.get_sample_value(family, labels)


def test_the_holder_sets_what_the_status_says_and_drops_what_it_no_longer_says_and_the_gone() -> None:
    held, key = Series(), ("PoolingService", "ns", "held")
    body = dict(AUTOSCALED, metadata={"name": "held", "namespace": "ns"})
    held.publish(key, body)
    assert sample("vllm_pooling_operator_replicas", key, "desired") == 8.0
    assert sample("vllm_pooling_operator_condition", key, "ScalingLimited") == 1.0
    # autoscaling removed from the spec: its bounds and latency go, what remains is updated
    changed = dict(body, spec={k: v for k, v in body["spec"].items() if k != "autoscaling"}, status={"readyReplicas": 1})
    held.publish(key, changed)
    assert sample("vllm_pooling_operator_replicas", key, "max") is None
    assert sample("vllm_pooling_operator_p99_latency_seconds", key, "target") is None
    assert sample("vllm_pooling_operator_condition", key, "ScalingLimited") is None
    assert sample("vllm_pooling_operator_replicas", key, "ready") == 1.0 and len(held) == 1
    held.drop(key)
    assert all(sample(f.name, key, v) is None for f in FAMILIES for v in f.values) and len(held) == 0
