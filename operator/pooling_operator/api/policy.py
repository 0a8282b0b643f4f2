"""AutoscalingPolicy: cluster-scoped guardrails and defaults set by the platform team."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ConfigDict, Field

from pooling_operator.api.base import Duration, ObjectDict, Spec, StatusBase
from pooling_operator.api.services import AutoscalingSpec, Backend, ScaleBehavior

DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring:9090"


class PrometheusSpec(Spec):
    """Where the autoscaler reads metrics."""

    url: str = Field(
        default=DEFAULT_PROMETHEUS_URL,
        pattern=r"^https?://[^\s]+$",
        description=f"Prometheus base URL. Default {DEFAULT_PROMETHEUS_URL}.",
    )


class PolicyDefaults(Spec):
    """Targets used when a service leaves them unset."""

    queue_depth_per_replica: float = Field(default=16, gt=0, description="Waiting requests per replica. Default 16.")
    p99_latency_seconds: float | None = Field(default=None, gt=0, le=3600, description="Target p99 latency.")
    window: Duration = Field(default="60s", description="Query rate window. Default 60s.")
    scale_up: ScaleBehavior | None = Field(default=None, description="Default scale-up behaviour.")
    scale_down: ScaleBehavior | None = Field(default=None, description="Default scale-down behaviour.")


class PolicyLimits(Spec):
    """Caps no service may exceed."""

    max_replicas: int | None = Field(default=None, ge=1, le=10000, description="Most replicas of one service.")
    max_gp_us_per_namespace: int | None = Field(
        default=None, ge=0, le=100000, alias="maxGPUsPerNamespace", description="Most GPUs autoscaled services of one namespace may hold."
    )
    min_scale_down_stabilization_seconds: int | None = Field(
        default=None, ge=0, le=3600, description="Floor of every service's scaleDown.stabilizationSeconds."
    )


class AutoscalingPolicySpec(Spec):
    """Guardrails and defaults for autoscaled services."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.allowedBackends) || self.allowedBackends.size() > 0",
                    "message": "allowedBackends must name at least one backend",
                    "fieldPath": ".allowedBackends",
                }
            ]
        }
    )

    default: bool = Field(default=False, description="Applies to services that reference no policy.")
    namespace_selector: ObjectDict | None = Field(
        default=None, description="Namespaces (a LabelSelector) whose services may use the policy. Default: all."
    )
    prometheus: PrometheusSpec = Field(default_factory=PrometheusSpec, description=PrometheusSpec.__doc__)
    defaults: PolicyDefaults = Field(default_factory=PolicyDefaults, description=PolicyDefaults.__doc__)
    limits: PolicyLimits = Field(default_factory=PolicyLimits, description=PolicyLimits.__doc__)
    allowed_backends: list[Backend] = Field(
        default_factory=lambda: ["operator", "keda"],
        description="Backends services may choose. Default [operator, keda].",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class AutoscalingPolicyStatus(StatusBase):
    """Observed state of an AutoscalingPolicy."""

    services: int | None = Field(default=None, description="Services following this policy.")


def policy_for(autoscaling: AutoscalingSpec | None, policies: Mapping[str, AutoscalingPolicySpec]) -> AutoscalingPolicySpec | None:
    """The policy an autoscaled service follows: the one it names, else the single default; None when the
    service is not autoscaled or no such policy is known."""
    if autoscaling is None:
        return None
    if autoscaling.policy_ref is not None:
        return policies.get(autoscaling.policy_ref.name)
    defaults = [p for p in policies.values() if p.default]
    return defaults[0] if len(defaults) == 1 else None
