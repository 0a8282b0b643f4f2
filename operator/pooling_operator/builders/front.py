"""A service's front (autoscaling.front): the KEDA HTTP add-on's InterceptorRoute and the external-push trigger
a keda backend adds for it (status.endpoint names the interceptor: status/services.py). Pure.

No interceptor runs in our tests (it finds a route's Service by cluster DNS, which the test cluster has not): what
is rendered here is held to the add-on's v1beta1 API (add-on 0.14 and later) by line in tests/test_front.py and,
with the add-on's own CRD (its Go module at v0.15.0, fetched at test time) in the real API server, in the
control-plane tier.
"""

from __future__ import annotations

import math
from typing import Any

from pooling_operator.api.autoscaling import KedaHttpAddOnFront
from pooling_operator.builders.common import metadata
from pooling_operator.vllm.workload import Workload

INTERCEPTOR_ROUTE_API = "http.keda.sh/v1beta1"
# vLLM 0.32's --max-num-seqs default for the OpenAI server on a GPU of 70 GiB or more (256 below, 128 on a CPU):
# vllm/engine/arg_utils.py 2933-2942. The largest: where a replica holds fewer, the add-on's trigger asks for fewer
# replicas than the waiting-queue trigger beside it, which then decides.
VLLM_DEFAULT_MAX_NUM_SEQS = 1024
# Before a replica is asked for, the demand must be seen: a Prometheus scrape of the interceptor and a decision of
# the autoscaler (15 s), or KEDA's poll. A held request's wait covers that, then two start-ups.
READINESS_NOTICE_SECONDS = 60
READINESS_STEP_SECONDS = 30
READINESS_FLOOR_SECONDS = 120


def readiness_seconds(typical_startup: float | None, startup_timeout: int) -> int:
    """How long the interceptor holds a request for a replica to become Ready: a minute to notice the demand plus
    two of the service's typical start-ups (status.startup.typicalSeconds), at least two minutes, in 30 s steps
    (a new sample rarely rewrites the route), never past the engine's startupTimeoutSeconds; that timeout itself
    until a start-up was measured."""
    if typical_startup is None or typical_startup <= 0:
        return startup_timeout
    wait = READINESS_NOTICE_SECONDS + 2 * typical_startup
    stepped = READINESS_STEP_SECONDS * math.ceil(wait / READINESS_STEP_SECONDS)
    return min(startup_timeout, max(READINESS_FLOOR_SECONDS, stepped))


def concurrency_target(max_num_seqs: int | None, queue_per_replica: int) -> int:
    """Requests in flight per replica the add-on's scaler aims at: a full batch plus the waiting-queue target,
    the interceptor's count of what vLLM's waiting gauge counts past the batch."""
    return (max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS) + queue_per_replica


def interceptor_route(front: KedaHttpAddOnFront, w: Workload, uid: str | None, target: str, port: int, readiness: int,
                      target_concurrency: int) -> dict[str, Any]:
    """The add-on's InterceptorRoute, named after the service: its hosts to the `target` Service's port (the
    service's own, or its router's with spec.routing), held while no
    replica is Ready for `readiness` seconds (then the interceptor answers with an error), at most
    maxPendingRequests held per interceptor replica where set (add-on 1.0's coldStart.maxPendingRequests)."""
    spec: dict[str, Any] = {
        "target": {"service": target, "port": port},
        "rules": [{"hosts": list(front.hosts)}],
        "scalingMetric": {"concurrency": {"targetValue": target_concurrency}},
        "timeouts": {"readiness": f"{readiness}s"},
    }
    if front.max_pending_requests is not None:
        spec["coldStart"] = {"maxPendingRequests": front.max_pending_requests}
    return {"apiVersion": INTERCEPTOR_ROUTE_API, "kind": "InterceptorRoute", "metadata": metadata(w, w.name, uid), "spec": spec}


def external_push_trigger(w: Workload, scaler: str) -> dict[str, Any]:
    """The trigger a ScaledObject names the add-on's scaler and the route with (kedacore/http-add-on
    pkg/k8s/scaledobject.go 11-18: type external-push, metadata scalerAddress and interceptorRoute): KEDA wakes the
    Deployment from zero on the first held request, pushed at once rather than polled."""
    return {"type": "external-push", "name": "front", "metadata": {"scalerAddress": scaler, "interceptorRoute": w.name}}
