"""What a resource's status says, as Prometheus series for the chart's alert rules (docs/alerts.md) and dashboards.

One function of the object as watched (spec and the whole status, the reconcile's and the autoscaler's fields
alike): family -> {the family's own label values: value}. Every family is labelled by the object's kind,
namespace and name, and by at most one more label with a fixed set of values, so the series of a platform grow
with its resources, never with traffic. Pure, and never raising on a spec the rules would refuse: whatever is
not readable is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pooling_operator.api.quantity import parse_quantity
from pooling_operator.api.resources import KINDS
from pooling_operator.api.schema import duration_seconds
from pooling_operator.status import conditions as C

OBJECT_LABELS = ("kind", "namespace", "name")


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    label: str  # the family's own label, beside kind, namespace and name
    values: tuple[str, ...]  # every value it takes


FAMILIES = (
    Family("vllm_pooling_operator_condition", "A resource's status condition: 1 while True, 0 while False or "
           "Unknown (the reconcile's and the autoscaler's, as stored).", "type", C.TYPES_ORDER),
    Family("vllm_pooling_operator_replicas", "A service's replicas: desired (the autoscaler's decision, or "
           "spec.replicas), ready, and the autoscaling bounds min and max.", "state", ("desired", "ready", "min", "max")),
    Family("vllm_pooling_operator_p99_latency_seconds", "An autoscaled service's p99 end-to-end latency as the "
           "autoscaler last observed it, and its target (spec.autoscaling.p99Latency).", "what", ("observed", "target")),
    Family("vllm_pooling_operator_autoscaler_observed", "What the autoscaler last observed of a service "
           "(status.autoscaling): requests waiting, arrivals per second, and the requests per second one replica "
           "serves (its learned capacity).", "what", ("queue_depth", "arrival_rate", "capacity_per_replica")),
    Family("vllm_pooling_operator_startup_seconds", "A service's replica start-up, pod created to Ready: the last "
           "and the typical (status.startup).", "what", ("last", "typical")),
    Family("vllm_pooling_operator_job_samples", "A job's inputs: done, failed, and the dataset's total once its "
           "shards have counted it.", "state", ("done", "failed", "total")),
    Family("vllm_pooling_operator_job_bytes", "A job's output bytes: written so far, the projected total "
           "(status.storage) and spec.output.storageBudget.", "what", ("written", "estimated", "budget")),
)
BY_NAME = {f.name: f for f in FAMILIES}


def series(body: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{family name: {its label's value: value}} for one object, as watched."""
    spec, status = _dict(body, "spec"), _dict(body, "status")
    out: dict[str, dict[str, float]] = {f.name: {} for f in FAMILIES}
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") in C.TYPES_ORDER:
            out["vllm_pooling_operator_condition"][c["type"]] = 1.0 if c.get("status") == "True" else 0.0
    kind = body.get("kind")
    what = KINDS[kind].family if kind in KINDS else None
    if what == "service":
        _service(spec, status, out)
    if what == "job":
        _job(spec, status, out)
    return {name: values for name, values in out.items() if values}


def _dict(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """parent[key] where it is a mapping, else empty: a status or spec block as watched, never trusted."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _service(spec: dict[str, Any], status: dict[str, Any], out: dict[str, dict[str, float]]) -> None:
    replicas = out["vllm_pooling_operator_replicas"]
    scaling = _dict(spec, "autoscaling") if isinstance(spec.get("autoscaling"), dict) else None
    observed = _dict(status, "autoscaling")
    desired = observed.get("desiredReplicas") if scaling is not None else spec.get("replicas", 1)
    _put(replicas, "desired", desired)
    _put(replicas, "ready", status.get("readyReplicas", 0))
    if scaling is not None:
        _put(replicas, "min", scaling.get("minReplicas", 1))
        _put(replicas, "max", scaling.get("maxReplicas"))
        latency = out["vllm_pooling_operator_p99_latency_seconds"]
        _put(latency, "observed", observed.get("p99LatencySeconds"))
        seen = out["vllm_pooling_operator_autoscaler_observed"]
        for key, field in (("queue_depth", "queueDepth"), ("arrival_rate", "arrivalRate"), ("capacity_per_replica", "capacityPerReplica")):
            _put(seen, key, observed.get(field))
        target = scaling.get("p99Latency")
        if isinstance(target, str):
            try:
                latency["target"] = duration_seconds(target)
            except ValueError:
                pass
    startup = _dict(status, "startup")
    _put(out["vllm_pooling_operator_startup_seconds"], "last", startup.get("lastSeconds"))
    _put(out["vllm_pooling_operator_startup_seconds"], "typical", startup.get("typicalSeconds"))


def _job(spec: dict[str, Any], status: dict[str, Any], out: dict[str, dict[str, float]]) -> None:
    samples = _dict(status, "samples")
    _put(out["vllm_pooling_operator_job_samples"], "done", samples.get("done"))
    _put(out["vllm_pooling_operator_job_samples"], "failed", samples.get("failed"))
    dataset = _dict(status, "dataset")
    _put(out["vllm_pooling_operator_job_samples"], "total", dataset.get("lines"))
    written = out["vllm_pooling_operator_job_bytes"]
    _put(written, "written", status.get("bytesWritten"))
    storage = _dict(status, "storage")
    _put(written, "estimated", storage.get("estimatedBytes"))
    output = _dict(spec, "output")
    budget = output.get("storageBudget")
    if isinstance(budget, (int, str)) and not isinstance(budget, bool):
        try:
            written["budget"] = float(parse_quantity(budget))
        except ValueError:
            pass


def _put(values: dict[str, float], key: str, value: object) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        values[key] = float(value)
