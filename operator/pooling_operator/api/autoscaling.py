"""The autoscaling part of a service's spec and status: the targets, steps and bounds a PoolingService or
ScoringService scales by (AutoscalingSpec), the wake signal and idle time of scale to zero, and what the
autoscaler reports (AutoscalingStatus). Split from api/services.py, which re-exports them."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from pooling_operator.api import messages as M
from pooling_operator.api.cel import cel, validations
from pooling_operator.api.schema import Duration, HostName, Name, Spec

Backend = Literal["operator", "keda"]


class ScaleBehavior(Spec):
    """How fast replicas change in one direction. Unset fields take the policy's defaults, then the operator's:
    scale-up 0 s and 4 replicas or doubling per 15 s, whichever is more; scale-down 300 s and 1 replica per
    15 s, except that after a clear fall in demand, sustained for one start-up (status.startup.typicalSeconds),
    replicas go straight to what demand needs (never sooner than the policy's
    limits.minScaleDownStabilizationSeconds). A value set here, even the default's, is always honoured."""

    stabilization_seconds: int | None = Field(
        default=None, ge=0, le=3600,
        description="Look-back window whose most conservative recommendation wins (unset: see scaleUp/scaleDown).",
    )
    max_step: int | None = Field(
        default=None, ge=1, le=1000,
        description="Most replicas added or removed per 15 s (unset scale-up: 4 or doubling, whichever is more).",
    )


class PolicyRef(Spec):
    """A reference to a cluster-scoped AutoscalingPolicy."""

    name: Name = Field(description="Name of the AutoscalingPolicy.")




class PrometheusWakeSpec(Spec):
    """Demand for the service read from Prometheus: a series that exists while no pod of the service runs."""

    query: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL whose value is the demand waiting for or arriving at this service, read while it has "
        "no replica (and, at its replicas' idle time, as requests still pending): the KEDA HTTP add-on "
        "interceptor's requests in flight for its route, an ingress or gateway's request rate for the route, a "
        "queue's length. A value above 0 wakes the service; no series reads as 0; Prometheus unreachable holds.",
    )


class WakeSpec(Spec):
    """The demand signal that outlives the pods (vLLM's own metrics vanish with the last one)."""

    prometheus: PrometheusWakeSpec = Field(description=PrometheusWakeSpec.__doc__)


# The KEDA HTTP add-on's interceptor publishes, per InterceptorRoute, the requests it holds or forwards
# (OpenTelemetry instrument interceptor.request.concurrency with attributes route_name and route_namespace:
# kedacore/http-add-on interceptor/metrics/instruments.go 18, 24-25, 87-88), which Prometheus names
# interceptor_request_concurrency. It exists while no pod of the service runs: the wake signal of a front.
INTERCEPTOR_CONCURRENCY = "interceptor_request_concurrency"


class KedaHttpAddOnFront(Spec):
    """The KEDA HTTP add-on (http.keda.sh) as the front: its interceptor holds requests while the service has no
    ready replica and forwards them once one is Ready. The operator renders an InterceptorRoute named after the
    service (add-on v0.14 or later) and reads the interceptor's pending requests as the wake signal."""

    hosts: list[HostName] = Field(
        min_length=1, max_length=64,
        description="Host names whose requests the interceptor routes to this service (the Host header clients "
        "send to the interceptor), e.g. bge-m3.search.example.com; a leading *. matches subdomains.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    max_pending_requests: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="Most requests each interceptor replica holds for this service while it has no ready replica; "
        "past it the interceptor refuses. Unset: the add-on's own limit (none by default). Needs add-on 1.0 "
        "(coldStart.maxPendingRequests).",
    )


class FrontSpec(Spec):
    """The front that holds requests while no pod runs and routes them when pods do."""

    keda_http_add_on: KedaHttpAddOnFront = Field(description=KedaHttpAddOnFront.__doc__)


class ScaleToZeroSpec(Spec):
    """When an idle service gives up its last replica."""

    idle_seconds: int | None = Field(
        default=None,
        ge=30,
        le=7 * 86400,
        description="Seconds without a completed request, a waiting one or wake demand before the last replica "
        "goes. Default: ten of the service's start-ups (status.startup.typicalSeconds), at least 300 s: the next "
        "request pays one start-up, so zero must save many.",
    )


class AutoscalingSpec(Spec):
    """Scale on what users feel: requests in the system and arrivals against the learned capacity of a
    replica, queue depth and p99 latency, read from Prometheus. Deployment replicas are then owned by the
    autoscaler (the /scale subresource), never by the operator's apply."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("(has(self.minReplicas) ? self.minReplicas : 1) <= self.maxReplicas", M.MIN_LE_MAX_REPLICAS, ".minReplicas"),
            cel(
                "!has(self.minReplicas) || self.minReplicas >= 1 || has(self.wake) || has(self.front)",
                M.MIN_REPLICAS_ZERO,
                ".minReplicas",
            ),
            cel("!has(self.scaleToZero) || (has(self.minReplicas) && self.minReplicas == 0)", M.SCALE_TO_ZERO_NEEDS_MIN_ZERO,
                ".scaleToZero"),
        )
    )

    min_replicas: int = Field(
        default=1, ge=0, le=1000,
        description="Fewest replicas. Default 1; 0 only with a wake signal (wake.prometheus.query or a front), for "
        "either backend: vLLM's metrics vanish with the last pod.",
    )
    max_replicas: int = Field(ge=1, le=1000, description="Most replicas (also capped by the policy).")
    queue_depth_per_replica: int | None = Field(
        default=None,
        ge=1,
        le=100000,
        description="Target of vllm:num_requests_waiting per ready replica. Default: the policy's, else 16.",
    )
    p99_latency: Duration | None = Field(
        default=None,
        description="Target p99 of end-to-end request latency, a duration such as 250ms or 2s. Default: the "
        "policy's. Changing it never changes the pods: every service exports the same fine latency buckets.",
    )
    window: Duration | None = Field(
        default=None, description="Rate window of the queries, e.g. 60s. Default: the policy's, else 60s."
    )
    scale_up: ScaleBehavior | None = Field(
        default=None, description="Scale-up behaviour. Default: stabilization 0 s, at most 4 replicas or doubling per 15 s, "
        "whichever is more."
    )
    scale_down: ScaleBehavior | None = Field(
        default=None, description="Scale-down behaviour. Default: stabilization 300 s, at most 1 replica per 15 s; once demand "
        "has clearly fallen for one start-up (status.startup.typicalSeconds), straight to what it needs."
    )
    policy_ref: PolicyRef | None = Field(
        default=None, description="The AutoscalingPolicy to follow. Default: the policy marked default."
    )
    backend: Backend = Field(
        default="operator",
        description="operator (the built-in autoscaler) or keda (a KEDA ScaledObject is created). Default operator.",
    )
    wake: WakeSpec | None = Field(
        default=None, description=(WakeSpec.__doc__ or "") + " Needed for minReplicas 0 without a front; with one, default: "
        "the front's pending requests for this service."
    )
    front: FrontSpec | None = Field(default=None, description=FrontSpec.__doc__)
    scale_to_zero: ScaleToZeroSpec | None = Field(default=None, description=(ScaleToZeroSpec.__doc__ or "") + " minReplicas 0 only.")

    def wake_query(self, namespace: str, name: str) -> str | None:
        """The wake signal: wake.prometheus.query as written, else the front's pending requests for this service
        (its InterceptorRoute is named after it), else none."""
        if self.wake is not None:
            return self.wake.prometheus.query
        if self.front is not None:
            return f'{INTERCEPTOR_CONCURRENCY}{{route_namespace="{namespace}",route_name="{name}"}}'
        return None


# ---- status ---------------------------------------------------------------------------------------------


class WakeStatus(Spec):
    """The last wake from zero."""

    model_config = ConfigDict(extra="ignore")

    at: str | None = Field(default=None, description="When the autoscaler asked for a replica again.")
    by: str | None = Field(default=None, description="What woke it (the wake query's value).")
    first_ready_seconds: float | None = Field(
        default=None, description="Seconds from the wake to the first Ready replica, at the autoscaler's period."
    )


class ScaledToZeroStatus(Spec):
    """A service with minReplicas 0: when it went to zero and what woke it last (condition ScaledToZero: at zero now)."""

    model_config = ConfigDict(extra="ignore")

    since: str | None = Field(default=None, description="When the service last went to zero replicas.")
    last_wake: WakeStatus | None = Field(default=None, description=WakeStatus.__doc__)


class AutoscalingStatus(Spec):
    """The autoscaler's last decision and the signals it read (observed values)."""

    model_config = ConfigDict(extra="ignore")

    desired_replicas: int | None = Field(default=None, description="Replicas the autoscaler wants.")
    current_replicas: int | None = Field(default=None, description="Replicas of the Deployment when it decided.")
    ready_replicas: int | None = Field(default=None, description="Replicas serving and reporting metrics.")
    queue_depth: float | None = Field(default=None, description="Waiting requests per ready replica.")
    arrival_rate: float | None = Field(default=None, description="Estimated arrivals, requests per second.")
    expected_arrival_rate: float | None = Field(
        default=None, description="Arrivals expected one start-up ahead, when a clear rise is planned for (requests per second)."
    )
    capacity_per_replica: float | None = Field(
        default=None, description="Learned requests per second one replica serves at the current request size."
    )
    requests_in_system: float | None = Field(
        default=None, description="Mean requests in the system (Little's law: rate of the latency sum)."
    )
    p99_latency_seconds: float | None = Field(default=None, description="Observed p99 latency, seconds.")
    recommendations: dict[str, int] | None = Field(
        default=None, description="Replicas each signal recommended; the largest wins."
    )
    last_scale_time: str | None = Field(default=None, description="When the autoscaler last changed replicas.")
    scaled_to_zero: ScaledToZeroStatus | None = Field(default=None, description=ScaledToZeroStatus.__doc__)
    reason: str | None = Field(default=None, description="Why the last decision was taken.")


class CostStatus(Spec):
    """What the service's GPUs cost per million tokens over the last whole window (the built-in autoscaler's; docs/cost.md)."""

    model_config = ConfigDict(extra="ignore")

    window: str | None = Field(default=None, description="The window's length, e.g. 3600s.")
    window_end: str | None = Field(default=None, description="When the window ended (windows are whole and aligned).")
    gpu_seconds: float | None = Field(
        default=None, description="GPU-seconds the service's pods held in the window, loading or serving (a share counts its fraction)."
    )
    prompt_tokens: int | None = Field(default=None, description="Prompt tokens the pods served (vllm:prompt_tokens_total).")
    inputs: int | None = Field(default=None, description="Inputs the pods served (vllm:request_success_total: one per input).")
    gpu_seconds_per_million_tokens: float | None = Field(default=None, description="gpuSeconds per million prompt tokens.")
    gpu_seconds_per_million_inputs: float | None = Field(default=None, description="gpuSeconds per million inputs.")
    price_per_million_tokens: float | None = Field(
        default=None, description="What a million prompt tokens cost at the policy's pricing.gpuHour for the service's GPU product."
    )
    currency: str | None = Field(default=None, description="The currency of pricePerMillionTokens (the policy's pricing.currency).")
